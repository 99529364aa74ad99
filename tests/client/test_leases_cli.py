"""`devicepool lease|renew|release|leases` against the in-process pools of
`test_leases_client` (a real `LeaseBook` behind each): what each prints, and its exit code
(docs/leases.md: 0 granted, 2 bad input, 3 refused or gone, 4 not granted)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devicepool.client import _lease_wait, _leases
from devicepool.client.errors import (
    EXIT_BAD_INPUT,
    EXIT_NOT_GRANTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_RUNTIME,
)
from devicepool.workflows.reconciler.lease_messages import LeaseAsk, ReleaseRequest
from tests.client.test_leases_client import LeasePool, Temporal
from tests.helpers.cli import cli, fake_temporal


@pytest.fixture
def temporal(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_lease_wait, "POLL_SECONDS", 0.01)

    def install(*pools: LeasePool) -> Temporal:
        return fake_temporal(monkeypatch, Temporal(*pools))

    return install


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["lease", "p", "--selector", "region"], "selector: must be key=value, got 'region'"),
        (["lease", "p", "-l", "a=1", "-l", "a=2"], "selector: a given twice (1 and 2)"),
        (["lease", "p", "--for", "-5m"], "--for: must be a duration such as"),
        (["lease", "p", "--for", "0s"], "--for: must be more than 0s, got '0s'"),
        (["lease", "p", "--wait", "soon"], "--wait: must be a duration such as"),
        (["lease", "P_1"], "invalid pool name 'P_1'"),
        (["lease", "nokind/p"], "nokind/p: unknown kind 'nokind'"),
        (["renew", "p", "L", "--for", "10"], "--for: must be a duration such as"),
    ],
)
def test_bad_input_is_exit_2_before_temporal_is_dialled(
    capsys: pytest.CaptureFixture[str], unreachable: str, argv: list[str], said: str
) -> None:
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert err.startswith(f"error: {said}") and err.count("\n") == 1, err


def test_no_stack_is_exit_1(capsys: pytest.CaptureFixture[str], unreachable: str) -> None:
    code, out, err = cli(capsys, "lease", "p", "--wait", "0s")
    assert (code, out) == (EXIT_RUNTIME, "")
    assert err.startswith(f"error: cannot reach Temporal at {unreachable}")


def test_lease_prints_exactly_its_json_keys_and_where_to_read_connect_info(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    pool = LeasePool("p", ["d-1"])
    temporal(pool)
    code, out, err = cli(capsys, "lease", "p", "--for", "10m", "-l", "device=d-1", "-o", "json")
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert list(shown) == ["lease", "pool", "device", "holder", "expiresAt", "connect"]
    assert (shown["pool"], shown["device"]) == ("p", "d-1")
    # No history key here: where to read it outside Temporal (docs/leases.md).
    assert shown["connect"] == {"ref": f"devicepool connect p {shown['lease']}"}
    assert shown["holder"] == _leases.default_holder(pid=False)
    assert shown["expiresAt"].endswith("Z") and shown["lease"] == pool.book.leases[0].id


def test_a_blank_holder_is_the_cli_s_default_one(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(LeasePool("p", ["d-1"]))
    code, out, err = cli(capsys, "lease", "p", "--holder", " ", "-o", "json")
    assert code == EXIT_OK, err
    assert json.loads(out)["holder"] == _leases.default_holder(pid=False)


def test_a_browser_pool_s_lease_names_it_as_the_cli_does(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(LeasePool("b", ["p-1"], kind="browserpool"))
    code, out, err = cli(capsys, "lease", "browserpool/b", "--holder", "ci", "-o", "table")
    assert code == EXIT_OK, err
    assert out.splitlines()[:4] == [
        f"Lease:    {out.split()[1]}",
        "Pool:     browserpool/b",
        "Device:   p-1",
        "Holder:   ci",
    ]
    # A bare name only a BrowserPool has reaches it too, as for every command.
    code, out, err = cli(capsys, "lease", "b", "-o", "json")
    assert code == EXIT_NOT_GRANTED, out
    assert err == "error: browserpool/b: no ready device matching the selector is free\n"


def test_refused_is_3_and_not_granted_is_4(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    pool = LeasePool("p", ["d-1"])
    temporal(pool)
    code, _, err = cli(capsys, "lease", "p", "-l", "region=eu", "--wait", "1m")
    assert (code, err) == (EXIT_REFUSED, 'error: pool "p": selector region=eu can never match\n')
    assert cli(capsys, "lease", "p")[0] == EXIT_OK
    code, _, err = cli(capsys, "lease", "p")
    assert (code, err) == (
        EXIT_NOT_GRANTED,
        'error: pool "p": no ready device matching the selector is free\n',
    )
    code, _, err = cli(capsys, "lease", "p", "--wait", "100ms")
    assert (code, err) == (
        EXIT_NOT_GRANTED,
        'error: pool "p": no ready device matching the selector came free\n',
    )
    assert pool.book.tickets == []  # the ticket given up is dropped


def test_renew_release_and_leases(capsys: pytest.CaptureFixture[str], temporal: Any) -> None:
    pool = LeasePool("p", ["d-1"])
    temporal(pool)
    lease_id = json.loads(cli(capsys, "lease", "p", "--holder", "ci")[1])["lease"]
    pool.lease(_leases.lease_request(selector=None, duration=None, wait=60, holder="next"))
    code, out, _ = cli(capsys, "leases", "p", "-o", "table")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == ["LEASE", "DEVICE", "HOLDER", "AGE", "EXPIRES", "IDLE"]
    assert lines[1].split() == [lease_id, "d-1", "ci", "0s", "59m", "0s"]
    assert lines[3].split() == ["TICKET", "POSITION", "HOLDER", "WAITED", "DEADLINE"]
    ticket = pool.book.tickets[0].id
    assert lines[4].split()[:4] == [ticket, "1", "next", "0s"]
    shown = json.loads(cli(capsys, "leases", "p", "-o", "json")[1])
    assert [x["id"] for x in shown["leases"]] == [lease_id] and len(shown["tickets"]) == 1

    code, out, _ = cli(capsys, "renew", "p", lease_id, "--for", "5m")
    assert code == EXIT_OK and out.startswith(f"devicepool/p: lease {lease_id} on d-1 renewed")
    code, out, _ = cli(capsys, "release", "p", ticket)
    assert (code, out) == (EXIT_OK, f"devicepool/p: ticket {ticket} dropped\n")
    code, out, _ = cli(capsys, "release", "p", lease_id)
    assert (code, out) == (EXIT_OK, f"devicepool/p: lease {lease_id} released: d-1 released\n")
    code, out, _ = cli(capsys, "release", "p", lease_id)  # idempotent
    assert code == EXIT_OK and out.startswith(f"devicepool/p: {lease_id} had ended already: lease")
    code, out, err = cli(capsys, "renew", "p", lease_id)
    assert (code, out) == (EXIT_REFUSED, "")
    assert err.startswith(f"error: pool \"p\": no lease '{lease_id}'")
    code, _, err = cli(capsys, "leases", "p", "-o", "table")
    assert (code, err) == (EXIT_OK, "No leases in p.\n")


def test_a_wait_on_a_terminal_shows_its_place_in_the_queue(
    capsys: pytest.CaptureFixture[str], temporal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws (and keeps) its bars as on a terminal
    pool = LeasePool("p", ["d-1"])
    temporal(pool)
    cli(capsys, "lease", "p")
    pool.lease(_leases.lease_request(selector=None, duration=None, wait=60, holder="first"))
    code, _, err = cli(capsys, "lease", "p", "--wait", "200ms")
    assert code == EXIT_NOT_GRANTED
    assert "devicepool/p" in err and "1 ahead in the queue" in err


def test_releasing_by_an_ask_s_id_what_had_ended_says_so(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    # A script on the stock `temporal` CLI knows only the id it asked under.
    pool = LeasePool("p", ["d-1"])
    temporal(pool)
    asked = _leases.lease_request(selector=None, duration=None, wait=0, holder="job")
    pool.lease_ask(LeaseAsk(ask="job-42", **asked.model_dump()))
    pool.lease_give_back(ReleaseRequest(lease="job-42"))
    code, out, _ = cli(capsys, "release", "p", "job-42")
    assert code == EXIT_OK and out.startswith("devicepool/p: job-42 had ended already: lease")
