"""Leases where a person looks first: `get`'s LEASED column (both kinds) and `describe`'s
Leases line and list (pure: fixed statuses and `leases` answers, a fake client)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL
from devicepool.api.names import QUERY_LEASES
from devicepool.client._cli_browser import print_browser_description
from devicepool.client._cli_kinds import print_pools
from devicepool.client._cli_views import leases_line, print_description
from devicepool.client._pool_reads import _leases_of
from devicepool.client._results import PoolSummary
from devicepool.workflows.reconciler.lease_messages import LeasesView
from devicepool.workflows.reconciler.lease_records import Lease, Ticket


def ago(seconds: float) -> datetime:
    """`seconds` before now (at the call: the tables count ages to the moment they print)."""
    return datetime.now(UTC) - timedelta(seconds=seconds)


def leases_answer(*, waiting: int = 1) -> dict[str, Any]:
    """A `leases` answer as `describe -o json` carries it: two leases (one offered), tickets."""
    leases = [
        Lease(
            id="l-ci",
            device="dev-1",
            holder="ci-7",
            granted_at=ago(300),
            expires_at=ago(-660),
            renewed_at=ago(20),
            duration=900,
        ),
        Lease(
            id="l-offer",
            device="dev-2",
            holder="bot",
            granted_at=ago(5),
            expires_at=ago(-660),
            renewed_at=ago(5),
            duration=600,
            ticket="t0",
            claimed=False,
        ),
    ]
    tickets = [
        Ticket(
            id=f"t{i + 1}",
            holder=f"waiter-{i}",
            duration=600,
            created_at=ago(45 - i),
            deadline=ago(-255),
        )
        for i in range(waiting)
    ]
    view = LeasesView(leases=leases, tickets=tickets)
    return view.model_dump(mode="json", by_alias=True, include={"leases", "tickets"})


STATUS = {
    "phase": "Ready",
    "desiredReplicas": 4,
    "readyDevices": 4,
    "leasedDevices": 2,
    "leasesQueued": 1,
    "oldestQueuedSeconds": 30.0,
    "leasesExpired": 3,
    "conditions": [],
}


def device_description(status: dict[str, Any], leases: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p1", "creationTimestamp": ago(60).isoformat()},
        "spec": {"platform": "android", "region": "us-west", "replicas": 4},
        "status": status,
        "workflow": {"id": "devicepool/p1", "runId": "r", "status": "RUNNING"},
        "devices": [],
        "events": [],
        "leases": leases,
    }


def section(out: str, title: str) -> list[list[str]]:
    """The rows (split on blanks) of `out` from the line `title` to the next blank line."""
    lines = out[out.index(f"\n{title}\n") :].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_get_shows_leased_after_ready_for_both_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    pools = [
        PoolSummary(name="p1", spec={"platform": "ios"}, status=STATUS, kind=DEVICE_POOL.name),
        # A worker from before leases: a blank, not a 0 it cannot know.
        PoolSummary(name="p0", spec={"platform": "ios"}, status={"readyDevices": 2}),
        PoolSummary(
            name="b1",
            spec={"replicas": 3},
            status={"readyProfiles": 3, "leasedDevices": 1},
            kind=BROWSER_POOL.name,
        ),
    ]
    print_pools(pools, [DEVICE_POOL, BROWSER_POOL])
    devices, browsers = capsys.readouterr().out.split("\n\n")
    header, *rows = devices.splitlines()
    leased = header.split().index("LEASED")
    assert header.split()[leased - 1] == "READY"
    assert {row.split()[1]: row.split()[leased] for row in rows} == {"p1": "2", "p0": "-"}
    header, row = browsers.splitlines()
    assert dict(zip(header.split(), row.split(), strict=True))["LEASED"] == "1"


def test_describe_says_held_waiting_and_the_oldest_wait_then_lists_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_description(device_description(STATUS, leases_answer()))
    out = capsys.readouterr().out
    # The oldest ticket's own time (45 s ago), not the status's figure from the last pass.
    assert "Leases: " in out
    assert "2 held | 1 waiting | oldest waits 45s | 3 ended without their holder" in out
    rows = section(out, "Leases:")
    assert rows[0] == ["LEASE", "DEVICE", "HOLDER", "AGE", "EXPIRES", "IDLE"]
    assert rows[1] == ["l-ci", "dev-1", "ci-7", "5m", "10m", "20s"]
    assert rows[2][:4] == ["l-offer", "dev-2", "bot", "(offered)"]
    tickets = out[out.index("\nTICKET") :].splitlines()
    assert tickets[1].split() == ["TICKET", "POSITION", "HOLDER", "WAITED", "DEADLINE"]
    assert tickets[2].split()[:4] == ["t1", "1", "waiter-0", "45s"]
    # Before the events.
    assert out.index("\nLeases:\n") < out.index("\nEvents:")


def test_describe_without_leases_says_so_in_one_line_and_lists_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    idle = {**STATUS, "leasedDevices": 0, "leasesQueued": 0, "leasesExpired": 0}
    print_description(device_description(idle, {"leases": [], "tickets": []}))
    out = capsys.readouterr().out
    assert [line.split(None, 1) for line in out.splitlines() if line.startswith("Leases")] == [
        ["Leases:", "0 held | 0 waiting"]
    ]
    # From a worker before leases: the line says nothing it cannot know.
    old = {k: v for k, v in STATUS.items() if not k.startswith("lease")}
    print_description(device_description(old, {"leases": [], "tickets": []}))
    out = capsys.readouterr().out
    assert [line.split() for line in out.splitlines() if line.startswith("Leases")] == [
        ["Leases:", "-"]
    ]


def test_describe_when_the_leases_query_went_unanswered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_description(device_description(STATUS, None))
    out = capsys.readouterr().out
    # The status's figure, said as of the pool's last pass.
    assert "2 held | 1 waiting | oldest waited 30s at the last pass" in out
    assert "\nLeases:\n  (no worker answered)" in out


def test_a_browser_pool_describes_its_leases_too(capsys: pytest.CaptureFixture[str]) -> None:
    print_browser_description(
        {
            "metadata": {"name": "b1"},
            "spec": {"replicas": 2},
            "status": {**STATUS, "leasesQueued": 0, "leasesExpired": 0},
            "profiles": [],
            "events": [],
            "leases": leases_answer(waiting=0),
        }
    )
    out = capsys.readouterr().out
    assert "2 held | 0 waiting\n" in out
    assert [row[0] for row in section(out, "Leases:")] == ["LEASE", "l-ci", "l-offer"]
    assert "TICKET" not in out


def test_leases_line_counts_to_now() -> None:
    answer = leases_answer()
    then = datetime.now(UTC) + timedelta(minutes=10)
    assert leases_line(STATUS, answer, now=then) == (
        "2 held | 1 waiting | oldest waits 10m | 3 ended without their holder"
    )


class FakePools:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def _try_query(self, handle: Any, query: str, *, result_type: type = dict) -> Any:
        self.asked.append(query)
        if self.answer is None:
            return None
        return self.answer if result_type is dict else LeasesView.model_validate(self.answer)


async def test_describe_asks_for_the_leases_only_when_the_status_has_some() -> None:
    answer = leases_answer()
    pools = FakePools(answer)
    idle = {"leasedDevices": 0, "leasesQueued": 0}
    assert await _leases_of(pools, None, idle) == {"leases": [], "tickets": []}  # type: ignore[arg-type]
    assert await _leases_of(pools, None, {"readyDevices": 3}) == {"leases": [], "tickets": []}  # type: ignore[arg-type]
    assert pools.asked == []
    got = await _leases_of(pools, None, {"leasedDevices": 0, "leasesQueued": 1})  # type: ignore[arg-type]
    assert got == answer
    assert pools.asked == [QUERY_LEASES]
    unanswered = FakePools(None)
    assert await _leases_of(unanswered, None, STATUS) is None  # type: ignore[arg-type]
    # A newer worker's fields in its leases and tickets are left out, not an error.
    newer = {
        "leases": [{**x, "somethingNew": 1} for x in answer["leases"]],
        "tickets": [{**x, "somethingNew": 1} for x in answer["tickets"]],
    }
    assert await _leases_of(FakePools(newer), None, STATUS) == answer  # type: ignore[arg-type]
