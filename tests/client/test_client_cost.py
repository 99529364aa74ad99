"""`devicepool cost`: the report from the pools' `cost` answers (per pool, per account, --since)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devicepool.client._cli_cost import cost_rows
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT
from devicepool.workflows.pool.messages import BilledHour, PoolCost

NOW = datetime(2026, 12, 2, 12, 30, tzinfo=UTC)


def answer(account: str, hours: dict[int, float], *, devices: int = 2) -> PoolCost:
    billed = [
        BilledHour(start=NOW.replace(hour=h, minute=0), device_hours=v, cost=round(v * 0.1, 4))
        for h, v in hours.items()
    ]
    total = sum(hours.values())
    return PoolCost(
        account=account,
        price_per_hour=0.10,
        hourly_cost=devices * 0.10,
        cost_to_date=round(total * 0.1, 4),
        device_hours_to_date=total,
        hours=billed,
        counted_until=NOW - timedelta(minutes=30),  # quiet since 12:00
        billing_devices=devices,
    )


def test_pools_and_accounts_add_up_with_what_billed_since_the_last_pass() -> None:
    answers = [
        ("b", answer("acme", {10: 2.0, 11: 2.0})),
        ("a", answer("acme", {11: 1.0})),
        ("c", None),
    ]
    report = cost_rows(answers, since=None, now=NOW)
    a, b, c = report["pools"]
    assert (a["pool"], a["deviceHours"], a["cost"]) == ("a", 2.0, 0.2)  # 1 + 2 devices x 0.5 h
    assert (b["deviceHours"], b["cost"]) == (5.0, 0.5)
    assert c == {
        "pool": "c",
        "account": None,
        "deviceHours": None,
        "cost": None,
        "hourlyCost": None,
    }
    assert report["accounts"] == [
        {"account": "acme", "deviceHours": 7.0, "cost": 0.7, "hourlyCost": 0.4}
    ]
    # --since 1h: the hours that began at 11:00 or later, and the half hour since.
    recent = cost_rows(answers, since=NOW - timedelta(hours=1), now=NOW)
    assert [p["deviceHours"] for p in recent["pools"][:2]] == [2.0, 3.0]


def test_a_bad_since_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--since", "yesterday"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("error: --since: must be a duration such as ")
