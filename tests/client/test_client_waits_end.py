"""`--wait` ends on what waiting cannot fix, for both kinds, and says what it waits on (issue 43,
items 2 and 19): a spend cap that holds the pool below its size, a BrowserPool whose selector
matches no live node. A hold that clears by itself (a cap full of devices on their way out, a
provider's rate limit) is waited out, and the progress says so; off a terminal the progress is
a line now and then, never a stray blank line before `error:`."""

from __future__ import annotations

from typing import Any

import pytest

from devicepool.client._cli_progress import why
from devicepool.client.errors import EXIT_OK, EXIT_RUNTIME
from tests.client.test_client_both_kinds import Pool, browser, device, temporal
from tests.helpers.cli import cli as run

__all__ = ["temporal"]  # the fixture, used by name


class Scripted(Pool):
    """A pool whose `status` answers follow a script, the last one repeated."""

    def __init__(self, made: Pool, statuses: list[dict[str, Any]]) -> None:
        super().__init__(made.id, made.answers)
        self.statuses = statuses

    async def query(self, name: str, **kw: Any) -> Any:
        if name == "status":
            self.queries.append(name)
            return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return await super().query(name, **kw)


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def device_status(*conditions: dict[str, Any], ready: int = 3, **more: Any) -> dict[str, Any]:
    return {
        "observedGeneration": 2,
        "desiredReplicas": 5,
        "readyDevices": ready,
        "conditions": list(conditions),
        **more,
    }


CAP = (
    "spendCap (maxDevices 3) allows 3 device(s); 5 desired, 2 create(s) held back — "
    "raise spendCap to grow (running devices are kept)"
)


def capped(message: str, reason: str, said: str, **more: Any) -> dict[str, Any]:
    """A status held by a spend cap: Ready=False (`message` its message), SpendCapReached=True
    for `reason`, `said` its message."""
    return device_status(
        cond("Ready", "False", "SpendCapReached", message),
        cond("SpendCapReached", "True", reason, said),
        **more,
    )


CAPPED = capped("3/5 devices ready; the spend cap allows 3", "CapReached", CAP)
CONVERGED = device_status(cond("Ready", "True", "Converged"), ready=5)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devicepool.client._waits.POLL_SECONDS", 0.01)


def scale_wait(
    capsys: pytest.CaptureFixture[str],
    temporal: Any,
    statuses: list[dict[str, Any]],
    *,
    replicas: int = 5,
    timeout: str = "30",
) -> tuple[Scripted, int, str, str]:
    """`scale p --replicas N --wait` against pool `p` whose `status` answers `statuses` in
    turn: (the pool, exit code, stdout, stderr)."""
    pool = Scripted(device("p"), statuses)
    temporal(pool)
    argv = ["scale", "p", "--replicas", str(replicas), "--wait", "--timeout", timeout]
    return (pool, *run(capsys, *argv))


def test_a_spend_cap_below_the_size_stops_the_wait_at_once_saying_what_to_do(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    pool, code, _out, err = scale_wait(capsys, temporal, [CAPPED])
    assert code == EXIT_RUNTIME
    assert err.splitlines() == [
        f'error: pool "p" cannot become ready: SpendCapReached: {CAP}; or lower spec.replicas '
        "to what it allows — the pool keeps running below its size meanwhile"
    ]
    assert pool.queries.count("status") == 1


def test_a_full_cap_that_leaves_room_for_the_size_is_waited_out(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    """A cap that allows the whole size holds creates only while devices on their way out
    (failed, terminating) still bill: they go, the creates follow."""
    full = (
        "spendCap (maxDevices 5) allows 5 device(s); 5 desired, 1 create(s) held back — "
        "raise spendCap to grow (running devices are kept)"
    )
    held = capped("4/5 devices ready", "CapReached", full, ready=4)
    _, code, out, err = scale_wait(capsys, temporal, [held, held, CONVERGED])
    assert (code, err) == (EXIT_OK, "")
    assert out.splitlines()[-1] == "devicepool/p ready"


def test_an_accounts_cap_stops_the_wait_once_it_held_for_its_grace(
    capsys: pytest.CaptureFixture[str], temporal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The account's cap is shared: a device of another pool leaving makes room, and the
    ledger's first count is not in at once. It stops the wait once it held a while."""
    monkeypatch.setattr("devicepool.client._waits.HOLD_GRACE_SECONDS", 0.2)
    said = (
        "account 'default' spendCap (maxDevices 4) allows 4 device(s) over all its pools; "
        "4 bill or are being created, and 2 create(s) of this pool wait — raise "
        "accounts.default.spendCap in the worker config to grow (running devices are kept)"
    )
    held = capped("3/5 devices ready", "AccountCapReached", said)
    pool, code, _out, err = scale_wait(capsys, temporal, [held])
    assert code == EXIT_RUNTIME
    assert err.splitlines() == [
        f'error: pool "p" cannot become ready: SpendCapReached: {said}; or make room in the '
        "account's other pools — the pool grows once there is room"
    ]
    assert pool.queries.count("status") > 2  # not at the first sight


def test_a_browser_pool_with_no_live_node_stops_the_wait_at_once(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    no_node = {
        "observedGeneration": 2,
        "desiredReplicas": 3,
        "readyProfiles": 0,
        "profileIds": [],
        "conditions": [
            cond("Ready", "False", "NoNodes", "0/3 profiles ready"),
            cond(
                "NodesAvailable",
                "False",
                "NoLiveNode",
                "no live node worker matches nodeSelector (os=windows)",
            ),
        ],
    }
    pool = Scripted(browser("b"), [no_node])
    temporal(pool)
    code, _out, err = run(
        capsys, "scale", "browserpool/b", "--replicas", "3", "--wait", "--timeout", "30"
    )
    assert code == EXIT_RUNTIME
    assert err.splitlines() == [
        'error: pool "browserpool/b" cannot become ready: NoLiveNode: no live node worker '
        "matches nodeSelector (os=windows) — start a node worker with those labels, or "
        "change spec.nodeSelector; the pool makes its profiles once one beats"
    ]


@pytest.mark.parametrize(
    "holding",
    [
        cond("ProviderAvailable", "False", "ProviderRateLimited", "creates resume at ..."),
        cond("ProviderAvailable", "False", "ProviderUnavailable", "HTTP 503"),
        cond("SpendCapReached", "True", "NoRoomBeside", "no room beside it"),
        cond("RemediationPaused", "True", "TooManyUnhealthy", "3 of 5 unhealthy"),
    ],
)
def test_what_clears_by_itself_is_waited_out(
    capsys: pytest.CaptureFixture[str], temporal: Any, holding: dict[str, Any]
) -> None:
    held = device_status(cond("Ready", "False", "BelowDesired", "3/5 devices ready"), holding)
    _, code, _out, err = scale_wait(capsys, temporal, [held, held, held, CONVERGED])
    assert (code, err) == (EXIT_OK, "")


def test_the_progress_names_what_the_pool_waits_on() -> None:
    from devicepool.client._waits import waiting_on

    assert waiting_on(CAPPED) == ["SpendCapReached"]
    limited = device_status(
        cond("Ready", "False", "BelowDesired"),
        cond("ProviderAvailable", "False", "ProviderRateLimited"),
        cond("Progressing", "True", "Provisioning"),
        cond("RemediationPaused", "False", "Healthy"),
    )
    assert why({**limited, "provisioningDevices": 2}) == (
        " · 2 booting · waiting: ProviderRateLimited"
    )
    browser_held = {
        "conditions": [
            cond("Ready", "False", "NoNodes"),
            cond("NodesAvailable", "False", "NoLiveNode"),
        ]
    }
    assert why(browser_held) == " · waiting: NoLiveNode"
    assert why(device_status(cond("Ready", "False", "BelowDesired"))) == ""
    # A provider's used-up quota holds creates until it resets: named, as a spend cap is.
    quota_held = device_status(
        cond("Ready", "False", "BelowDesired"),
        cond("QuotaExhausted", "True", "DailyCreateQuota", "creates resume at ..."),
    )
    assert why(quota_held) == " · waiting: DailyCreateQuota"
    assert why(device_status(cond("QuotaExhausted", "False", "QuotaAvailable"))) == ""


def test_a_stop_on_a_terminal_that_draws_no_bar_leaves_no_blank_line_before_the_error(
    capsys: pytest.CaptureFixture[str], temporal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, item 19: on a terminal that is not interactive (TERM=dumb: an editor's
    shell, a CI runner's pty), the bar printed its last frame and a blank line on stop."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich takes stderr for a terminal...
    monkeypatch.setenv("TERM", "dumb")  # ...one that cannot redraw a line
    unknown = "unknown region 'mars-1' (spec.region); known: us-west — provisioning stopped"
    looked = device_status(ready=0)
    blocked = device_status(cond("Ready", "False", "UnknownRegion", unknown), ready=0)
    _, code, _out, err = scale_wait(capsys, temporal, [looked, looked, blocked])
    assert code == EXIT_RUNTIME
    assert err == f'error: pool "p" cannot become ready: UnknownRegion: {unknown}\n'


async def test_off_a_terminal_a_long_wait_prints_a_line_on_each_change_and_now_and_then(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait in a pipe or a CI log said nothing for its whole timeout."""
    from devicepool.client import _cli_progress

    clock = [1000.0]
    monkeypatch.setattr(_cli_progress.time, "monotonic", lambda: clock[0])
    held = device_status(
        cond("Ready", "False", "BelowDesired"),
        cond("ProviderAvailable", "False", "ProviderRateLimited"),
        ready=2,
    )
    # (seconds into the wait, the status read then)
    reads = [(1, held), (11, held), (13, held), (20, held), (27, held), (28, CONVERGED)]

    async def wait(cb: Any) -> None:
        for at, status in reads:
            clock[0] = 1000.0 + at
            cb(status)

    await _cli_progress.wait_with_progress(
        {"devicepool/p": wait}, total_key="desiredReplicas", done_key="readyDevices", label="ready"
    )
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        # nothing in the first 10 s; then the figures, again 15 s later, and on a change
        "devicepool/p: 2/5 ready · waiting: ProviderRateLimited (11s)",
        "devicepool/p: 2/5 ready · waiting: ProviderRateLimited (27s)",
        "devicepool/p: 5/5 ready (28s)",
    ]


async def test_off_a_terminal_the_windows_countdown_alone_prints_no_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates waiting for the account's window: each read's `next in N s` differs, and that
    alone printed a line a second in a CI log; a line now comes on a real change or every 15 s."""
    from datetime import UTC, datetime, timedelta

    from devicepool.client import _cli_progress

    clock = [1000.0]
    monkeypatch.setattr(_cli_progress.time, "monotonic", lambda: clock[0])

    def waiting(second: int) -> dict[str, Any]:
        permit = datetime.now(UTC) + timedelta(seconds=1 + second % 3)
        window = {"waiting": True, "capacity": 20, "windowSeconds": 60}
        window["nextPermitAt"] = permit.isoformat()
        return device_status(ready=2, pendingDevices=3, accountWindow=window)

    async def wait(cb: Any) -> None:
        for second in range(1, 61):
            clock[0] = 1000.0 + second
            cb(waiting(second))

    await _cli_progress.wait_with_progress(
        {"devicepool/p": wait}, total_key="desiredReplicas", done_key="readyDevices", label="ready"
    )
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit("(", 1)[-1] for line in lines] == ["10s)", "25s)", "40s)", "55s)"]
    assert lines[0].startswith(
        "devicepool/p: 2/5 ready · 3 pending · waiting for the account's window (20/60s), next in "
    )


def test_a_wait_that_times_out_says_what_held_the_pool(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    limited = device_status(
        cond("Ready", "False", "BelowDesired", "3/5 devices ready"),
        cond("ProviderAvailable", "False", "ProviderRateLimited", "creates resume at ..."),
        phase="Provisioning",
    )
    _, code, _, err = scale_wait(capsys, temporal, [limited], timeout="0.1")
    assert (code, err.splitlines()[-1]) == (
        EXIT_RUNTIME,
        'error: pool "p" not ready after 0.1s (3/5 ready, phase Provisioning; '
        "waiting: ProviderRateLimited)",
    )


def test_a_scale_down_of_a_pool_whose_proxy_pool_the_worker_lost_is_waited_out(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    """Review R9: a pool runs on a proxy pool the worker config since lost (Ready=False
    UnknownProxyPool at every generation); a scale-down to 0 goes through and needs no
    create, so the reference cannot hold it: the wait sees it through, not 'cannot become
    ready'."""
    lost = cond("Ready", "False", "UnknownProxyPool", "unknown proxy pool 'resi'")
    shrinking = device_status(lost, desiredReplicas=0, ready=2)
    gone = device_status(cond("Ready", "True", "Converged"), desiredReplicas=0, ready=0)
    _, code, out, err = scale_wait(capsys, temporal, [shrinking, shrinking, gone], replicas=0)
    assert (code, err) == (EXIT_OK, "")
    assert out.splitlines()[-1] == "devicepool/p ready"


def test_a_pool_short_of_its_size_on_an_unknown_proxy_pool_still_stops_at_once(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    short = device_status(
        cond("Ready", "False", "UnknownProxyPool", "unknown proxy pool 'resi'"), ready=0
    )
    _, code, _out, err = scale_wait(capsys, temporal, [short])
    assert code == EXIT_RUNTIME and "UnknownProxyPool" in err, err
