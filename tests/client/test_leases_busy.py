"""The lease client under load, against the in-process pools of `test_leases_client`: what
Temporal turns away for now (a rate limit, its 10 updates in flight per workflow, its
query buffer of one, a run closing into the next, an update aborted by the server) is
tried again while the caller's budget lasts, each ask under one id and each update under
one id; asks and give-backs are signals (no update in flight); no more than
`UPDATES_IN_FLIGHT` renews and releases go out at once per pool from one client; and a
budget that runs out is one `TemporalBusy` naming the cause, never `TemporalUnreachable`.
The same on the dev server, 50 at once: tests/workflows/test_leases_under_load.py."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.client import PoolClient, _lease_calls, _lease_wait
from devicepool.client._lease_calls import turned_away
from devicepool.client._lease_watch import place_in
from devicepool.client.cli import main
from devicepool.client.errors import (
    EXIT_RUNTIME,
    LeaseNotGranted,
    TemporalBusy,
    TemporalUnreachable,
)
from devicepool.workflows.reconciler.lease_checks import LEASE_BUSY, LEASE_NOT_GRANTED
from devicepool.workflows.reconciler.lease_messages import LeasesView
from tests.client.test_leases_client import LeasePool, Temporal, client_of, refused

IN_FLIGHT = RPCError(
    "limit on number of concurrent in-flight updates has been reached (10)",
    RPCStatusCode.RESOURCE_EXHAUSTED,
    b"",
)
CLOSING = RPCError(
    "workflow operation can not be applied because workflow is closing",
    RPCStatusCode.RESOURCE_EXHAUSTED,
    b"",
)
ABORTED = RPCError("workflow update was aborted", RPCStatusCode.UNAVAILABLE, b"")
# The update's workflow task failed before it was accepted (a starved worker's deadlock limit,
# an eviction): seen in CI under load as WorkflowNotReady.
NOT_READY = RPCError(
    "Unable to perform workflow execution update due to unexpected workflow task failure.",
    RPCStatusCode.FAILED_PRECONDITION,
    b"",
)
BUFFER_FULL = RPCError("consistent query buffer is full", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
QUERY_TIMED_OUT = RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")
QUERY_DEADLINE = RPCError("Deadline exceeded", RPCStatusCode.DEADLINE_EXCEEDED, b"")
UNPROCESSED = WorkflowUpdateFailedError(
    ApplicationError(
        "Workflow Update is rejected because it wasn't processed by worker.",
        type="UnprocessedUpdate",
        non_retryable=True,
    )
)
HANDING_OVER = WorkflowUpdateFailedError(
    ApplicationError("pool 'p' is handing over to a new run; send it again", type=LEASE_BUSY)
)
DOWN = RPCError("tcp connect error: Connection refused", RPCStatusCode.UNAVAILABLE, b"")
RATE_LIMITED = RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devicepool.client._lease_wait.POLL_SECONDS", 0.01)
    monkeypatch.setattr(_lease_calls, "BACKOFF_FIRST", 0.001)
    monkeypatch.setattr(_lease_calls, "BACKOFF_MOST", 0.002)


class Busy(LeasePool):
    """A pool behind a Temporal that turns away the first `refused` updates (and the first
    `unanswered` queries) with `error`; it records each update's name and id, and the most
    updates it ever had in flight at once."""

    def __init__(self, *devices: str, refused: int = 0, error: RPCError = IN_FLIGHT) -> None:
        super().__init__("p", list(devices))
        self.refused, self.error = refused, error
        self.unanswered, self.query_error = 0, BUFFER_FULL
        self.sent: list[tuple[str, str]] = []
        self.in_flight = self.most_in_flight = 0
        self.delay = 0.002  # an update in flight: admitted, waiting for a workflow task

    async def execute_update(self, name: str, arg: Any, **options: Any) -> Any:
        self.sent.append((name, options["id"]))
        if self.refused > 0:
            self.refused -= 1
            raise self.error
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            return await super().execute_update(name, arg, **options)
        finally:
            self.in_flight -= 1

    async def signal(self, name: str, arg: Any, **options: Any) -> None:
        self.sent.append((name, getattr(arg, "ask", None) or arg.lease))
        if self.refused > 0:
            self.refused -= 1
            raise self.error
        await asyncio.sleep(self.delay)
        await super().signal(name, arg, **options)

    async def query(self, name: str, arg: Any = None, **options: Any) -> Any:
        if name in ("leases", "lease_ticket") and self.unanswered > 0:
            self.unanswered -= 1
            raise self.query_error
        return await super().query(name, arg, **options)


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (IN_FLIGHT, "limit on number of concurrent in-flight updates has been reached (10)"),
        (CLOSING, "workflow operation can not be applied because workflow is closing"),
        (BUFFER_FULL, "consistent query buffer is full"),
        (ABORTED, "workflow update was aborted"),
        (NOT_READY, NOT_READY.message),
        (RPCError("some other precondition", RPCStatusCode.FAILED_PRECONDITION, b""), None),
        (UNPROCESSED, "Workflow Update is rejected because it wasn't processed by worker."),
        (HANDING_OVER, "pool 'p' is handing over to a new run; send it again"),
        (refused("none free", LEASE_NOT_GRANTED), None),
        (DOWN, None),
        (RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""), None),
        (RuntimeError("not an RPC error"), None),
    ],
)
def test_what_temporal_turns_away_for_now(error: BaseException, why: str | None) -> None:
    assert turned_away(error) == why


@pytest.mark.parametrize("error", [RATE_LIMITED, CLOSING])
async def test_an_ask_turned_away_is_sent_again_under_the_same_id(error: RPCError) -> None:
    pool = Busy("d-1", refused=3, error=error)
    client = client_of(pool)
    lease = await client.acquire_lease("p", wait=10)
    assert [name for name, _ in pool.sent] == ["lease_ask"] * 4
    assert len({ask for _, ask in pool.sent}) == 1  # one outcome, however many tries
    assert [x.id for x in pool.book.leases] == [lease.id]
    # A new call is a new ask: its own id.
    with pytest.raises(LeaseNotGranted):
        await client.acquire_lease("p")
    assert len({ask for name, ask in pool.sent if name == "lease_ask"}) == 2


@pytest.mark.parametrize(
    "error", [IN_FLIGHT, CLOSING, ABORTED, NOT_READY, UNPROCESSED, HANDING_OVER]
)
async def test_a_renew_or_release_turned_away_is_sent_again_under_the_same_id(
    error: RPCError,
) -> None:
    pool = Busy("d-1", error=error)
    client = client_of(pool)
    lease = await client.acquire_lease("p")
    pool.refused = 2
    await client.renew_lease("p", lease)
    pool.refused = 2
    await client.release_lease("p", lease)
    ids = [update_id for name, update_id in pool.sent if name in ("renew", "release")]
    assert len(ids) == 6 and len(set(ids)) == 2  # renew thrice, release thrice


async def test_a_budget_that_runs_out_is_one_error_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = Busy("d-1", refused=10**6, error=RATE_LIMITED)
    client = client_of(pool)
    begun = time.monotonic()
    with pytest.raises(TemporalBusy) as err:
        await client.acquire_lease("p", wait=0.05)  # the lease's own wait is its budget
    assert 0.05 <= time.monotonic() - begun < 2
    assert str(err.value).startswith('pool "p": the lease_ask signal was turned away for 0.')
    assert str(err.value).endswith(": namespace rate limit exceeded")
    assert err.value.exit_code == EXIT_RUNTIME and not isinstance(err.value, TemporalUnreachable)
    monkeypatch.setattr(_lease_calls, "BUSY_SECONDS", 0.05)  # a release's budget
    pool.error = IN_FLIGHT
    with pytest.raises(TemporalBusy, match="the release update was turned away"):
        await client.release_lease("p", "id1")
    assert pool.book.leases == [] and pool.book.tickets == []


async def test_temporal_out_of_reach_is_not_tried_again() -> None:
    pool = Busy("d-1", refused=1, error=DOWN)
    with pytest.raises(TemporalUnreachable):
        await client_of(pool).acquire_lease("p", wait=10)
    # Not sent again; given back, in case it arrived before the connection broke.
    assert [name for name, _ in pool.sent] == ["lease_ask", "lease_give_back"]


@pytest.mark.parametrize("error", [BUFFER_FULL, QUERY_TIMED_OUT, QUERY_DEADLINE])
async def test_a_poll_turned_away_is_asked_again_while_the_wait_lasts(error: RPCError) -> None:
    pool = Busy("d-1")
    client = client_of(pool)
    first = await client.acquire_lease("p")
    pool.unanswered, pool.query_error = 5, error
    waiting = asyncio.ensure_future(client.acquire_lease("p", wait=10))
    await asyncio.sleep(0.02)
    await client.release_lease("p", first)
    second = await asyncio.wait_for(waiting, 5)
    assert second.device == "d-1" and pool.unanswered == 0


async def test_a_wait_whose_polls_all_go_unanswered_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_wait, "ANSWER_SECONDS", 0.1)  # (10 s of unanswered polls)
    pool = Busy("d-1")
    client = client_of(pool)
    await client.acquire_lease("p")
    pool.unanswered = 10**6
    with pytest.raises(LeaseNotGranted) as err:
        await client.acquire_lease("p", wait=0.05)
    assert str(err.value) == (
        'pool "p": no ready device matching the selector came free'
        " (the last poll went unanswered: Temporal: consistent query buffer is full)"
    )
    assert pool.book.tickets == []  # dropped on the way out


async def test_fifty_at_once_ask_and_give_back_by_signal_with_no_update_in_flight() -> None:
    pool = Busy("d-1", "d-2", "d-3")
    client = client_of(pool)
    holders: set[str] = set()

    async def user(i: int) -> str:
        async with client.lease("p", wait=30, holder=f"u{i}") as lease:
            assert lease.device not in holders
            holders.add(lease.device)
            await asyncio.sleep(0.001)
            holders.discard(lease.device)
        return lease.id

    granted = await asyncio.wait_for(asyncio.gather(*(user(i) for i in range(50))), 30)
    assert len(set(granted)) == 50
    assert pool.most_in_flight == 0  # Temporal's 10 updates a workflow: none used
    assert {name for name, _ in pool.sent} == {"lease_ask", "lease_give_back"}
    assert pool.book.leases == [] and pool.book.tickets == []


def test_one_client_on_two_event_loops_gates_each_apart() -> None:
    # The CLI runs each command in its own `asyncio.run`: a gate is one loop's.
    pool = Busy("d-1", "d-2")
    client: PoolClient = client_of(pool)

    async def burst() -> None:
        async def one() -> None:
            async with client.lease("p", wait=10):
                await asyncio.sleep(0.001)

        await asyncio.gather(*(one() for _ in range(10)))  # past 8: some wait at the gate

    asyncio.run(burst())
    asyncio.run(burst())
    assert pool.book.leases == [] and len(pool.book.ended) == 20


async def test_the_waiters_of_one_client_share_one_look_at_the_queue() -> None:
    pool = Busy("d-1")
    client = client_of(pool)
    first = await client.acquire_lease("p")
    waiting = [asyncio.ensure_future(client.acquire_lease("p", wait=10)) for _ in range(20)]
    await asyncio.sleep(0.1)  # some 10 polls each
    looks = pool.asked.count("leases")
    assert 0 < looks < 40  # not one query a waiter each poll (some 200)
    # Its own ticket each asked once, right after its ask (a grant at once is read so).
    assert pool.asked.count("lease_ticket") <= 20
    await client.release_lease("p", first)
    granted = await asyncio.wait_for(waiting[0], 5)  # first come, first served
    assert granted.device == "d-1" and len(pool.book.tickets) == 19
    # And the one offered, once gone from the queue, and once more after its claim.
    assert pool.asked.count("lease_ticket") <= 22
    for other in waiting[1:]:
        other.cancel()
    await asyncio.gather(*waiting[1:], return_exceptions=True)
    assert pool.book.tickets == []


async def test_a_lone_waiter_asks_for_its_own_ticket() -> None:
    # The view lists every lease of the pool: for one ticket, its own answer is smaller.
    pool = Busy("d-1")
    client = client_of(pool)
    first = await client.acquire_lease("p")
    waiting = asyncio.ensure_future(client.acquire_lease("p", wait=10))
    await asyncio.sleep(0.05)
    await client.release_lease("p", first)
    await asyncio.wait_for(waiting, 5)
    assert "lease_ticket" in pool.asked and "leases" not in pool.asked


def test_a_ticket_s_place_is_read_in_the_queue_whatever_a_newer_worker_adds() -> None:
    pool = LeasePool("p", ["d-1"])
    held = pool.lease(SimpleNamespace(selector={}, holder="a", duration=None, wait=0))
    ahead = pool.lease(SimpleNamespace(selector={}, holder="b", duration=None, wait=60))
    behind = pool.lease(SimpleNamespace(selector={}, holder="c", duration=None, wait=60))
    view = LeasesView(leases=pool.book.leases, tickets=pool.book.tickets)
    assert (place_in(view, ahead.ticket), place_in(view, behind.ticket)) == (1, 2)
    # The JSON a newer worker answers: fields this client's models would refuse.
    newer = view.model_dump(mode="json", by_alias=True)
    for item in newer["tickets"] + newer["leases"]:
        item["somethingNew"] = 1
    assert place_in(newer, behind.ticket) == 2
    pool.release(SimpleNamespace(lease=held.granted.lease))  # offered to `ahead`
    view = LeasesView(leases=pool.book.leases, tickets=pool.book.tickets)
    assert (place_in(view, ahead.ticket), place_in(view, behind.ticket)) == (None, 1)
    for odd in (None, {}, {"tickets": "x"}, {"tickets": [1, {"id": None}]}):
        assert place_in(odd, ahead.ticket) is None


async def test_the_leases_of_a_newer_worker_are_read_without_its_new_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    lease = await client.acquire_lease("p", holder="ci")
    pool.lease(SimpleNamespace(selector={}, holder="next", duration=None, wait=60))
    newer = LeasesView(leases=pool.book.leases, tickets=pool.book.tickets).model_dump(
        mode="json", by_alias=True
    )
    for item in newer["tickets"] + newer["leases"]:
        item["somethingNew"] = {"a": 1}
    newer["alsoNew"] = True

    async def newer_worker(name: str, *_: Any, **__: Any) -> Any:
        return newer

    monkeypatch.setattr(pool, "query", newer_worker)
    view = await client.leases("p")
    assert [(x.id, x.holder) for x in view.leases] == [(lease.id, "ci")]
    assert [t.holder for t in view.tickets] == ["next"]


def test_the_cli_says_a_busy_pool_in_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = Temporal(Busy("d-1", refused=10**6))

    async def connect(**_: Any) -> Temporal:
        return fake

    monkeypatch.setattr("devicepool.connect.connect", connect)
    monkeypatch.setattr(_lease_calls, "BUSY_SECONDS", 0.05)
    code = main(["release", "p", "some-lease"])
    out, err = capsys.readouterr()
    assert (code, out) == (EXIT_RUNTIME, "")
    assert err.startswith('error: pool "p": the release update was turned away for 0.')
    assert err.endswith("in-flight updates has been reached (10)\n") and err.count("\n") == 1
