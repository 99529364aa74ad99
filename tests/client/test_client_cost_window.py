"""`devicepool cost` says its window: the header, the default in `--help`, days (`2d`).

Issue 43 item 13: the table gave no hint of the span it covered, `--help` no default, and
`--since 2d` was refused. The CLI's durations take days; a manifest's stay as kubectl
writes them (Go's `time.ParseDuration` has no `d`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devicepool.api.durations import parse_duration
from devicepool.client._cli_cost import cost_header
from devicepool.client._cli_support import timeout_seconds
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT
from devicepool.workflows.pool.messages import BilledHour, PoolCost

NOW = datetime(2026, 12, 5, 21, 40, tzinfo=UTC)


def test_the_header_names_the_window_and_the_hour_it_counts_from() -> None:
    since = NOW - timedelta(hours=24)
    assert cost_header("24h", since=since, now=NOW) == (
        "Cost over the last 24h (since 2026-12-04 21:00 UTC)"
    )
    assert cost_header(" 2d ", since=NOW - timedelta(days=2), now=NOW) == (
        "Cost over the last 2d (since 2026-12-03 21:00 UTC)"
    )
    assert cost_header(None, since=None, now=NOW) == (
        "Cost since each pool was created (to 2026-12-05 21:40 UTC)"
    )


class _Pools:
    def __init__(self, now: datetime) -> None:
        hour = now.replace(minute=0, second=0, microsecond=0)
        self.answer = PoolCost(
            account="acme",
            price_per_hour=0.10,
            hourly_cost=0.2,
            cost_to_date=1.0,
            device_hours_to_date=10.0,
            hours=[
                BilledHour(start=hour - timedelta(hours=h), device_hours=2.0, cost=0.2)
                for h in range(5)
            ],
            counted_until=now,
            billing_devices=2,
        )

    async def costs(self, name: str | None) -> list[tuple[str, Any]]:
        return [("p1", self.answer)]


def run_cost(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    async def open_pools(name: str | None = None) -> _Pools:
        return _Pools(datetime.now(UTC))

    monkeypatch.setattr("devicepool.client._cli_cost.open_pools", open_pools)
    code = main(["cost", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_since_takes_days_and_the_table_opens_with_its_window(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = datetime.now(UTC)
    code, out, err = run_cost(monkeypatch, capsys, "--since", "2d", "-o", "table")
    after = datetime.now(UTC)
    assert (code, err) == (0, "")
    first, header, *rows = out.splitlines()
    match = re.fullmatch(r"Cost over the last 2d \(since (\d{4}-\d\d-\d\d \d\d:00) UTC\)", first)
    assert match, first
    starts = {
        (t - timedelta(days=2)).replace(minute=0).strftime("%Y-%m-%d %H:00")
        for t in (before, after)
    }
    assert match.group(1) in starts
    assert header.split() == ["POOL", "ACCOUNT", "DEVICE-HOURS", "COST", "$/H"]
    assert rows[0].split()[:2] == ["p1", "acme"]


def test_without_since_the_header_says_since_each_pool_was_created(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cost(monkeypatch, capsys, "-o", "table")
    assert code == 0
    assert out.splitlines()[0].startswith("Cost since each pool was created (to ")


def test_json_has_no_header_and_says_since(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cost(monkeypatch, capsys, "--since", "1d", "-o", "json")
    assert code == 0
    assert out.lstrip().startswith("{") and '"since": "' in out


def test_help_shows_the_default_window_and_a_duration_metavar(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["cost", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--since DURATION" in text
    assert "2d" in text
    assert "default: since each pool was created" in text


@pytest.mark.parametrize("bad", ["0d", "-1d", "d", "2days", "1e400d"])
def test_a_bad_window_is_one_line_naming_since(
    bad: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cost(monkeypatch, capsys, "--since", bad)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err.startswith("error: --since: ") and err.count("\n") == 1, err


def test_the_cli_durations_take_days_and_manifests_do_not() -> None:
    assert timeout_seconds("1d") == 86400
    assert timeout_seconds("1d12h") == 129600
    assert parse_duration("2d", days=True) == 172800
    with pytest.raises(ValueError, match="a duration such as"):
        parse_duration("2d")  # a manifest's durations are kubectl's: no days


def test_protect_for_takes_days_as_the_pool_reads_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from devicepool.client.pool_client import PoolClient

    sent: list[Any] = []

    async def control(self: PoolClient, name: str, update: str, request: Any) -> str:
        sent.append(request)
        return "d-1 is protected"

    async def open_pools(name: str | None = None) -> PoolClient:
        return PoolClient(object())  # type: ignore[arg-type]

    monkeypatch.setattr(PoolClient, "_control", control)
    monkeypatch.setattr("devicepool.client._cli_control.open_pools", open_pools)
    assert main(["protect", "p1", "d-1", "--for", "2d"]) == 0, capsys.readouterr().err
    assert sent[0].duration == 2 * 86400


@pytest.mark.parametrize("window", ["8d", "169h", "30d"])
def test_a_window_past_the_week_the_pools_keep_is_refused(
    window: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A pool keeps its last week by the hour: "the last 30d" would be a week's spend.
    code, out, err = run_cost(monkeypatch, capsys, "--since", window, "-o", "table")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert err == (
        f"error: --since: at most 7d (the pools keep a week by the hour; without --since: "
        f"since each pool was created), got {window!r}\n"
    )


def test_a_week_is_the_longest_window(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cost(monkeypatch, capsys, "--since", "7d", "-o", "table")
    assert code == 0 and out.startswith("Cost over the last 7d (since ")
