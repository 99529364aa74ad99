"""The lease client cut short, against the in-process pools of `test_leases_client`: a
cancel or a timeout while an ask (a signal) or a renew (an update: the SDK raises
`WorkflowUpdateRPCTimeoutOrCancelledError` for a cancel, applied or not) is in flight
leaves nothing held and reaches the caller as the cancel it is; a renew cancelled at the
gate is never sent; a queued lease's renewals keep its end under a pool clock that is not
ours; what the Python API is given is checked as the CLI checks it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.v1beta1 import LeaseSpec
from devicepool.client import BadInput, _lease_calls, _lease_keeper, _lease_wait
from devicepool.client._leases import default_holder
from devicepool.client.cli import main
from tests.client.test_leases_client import LeasePool, Temporal, client_of


@pytest.fixture(autouse=True)
def _quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devicepool.client._lease_wait.POLL_SECONDS", 0.01)


class Slow(LeasePool):
    """A pool whose worker applies an update (or the server a signal), then is `slow[name]`
    seconds answering it: a cancel meanwhile is raised as the SDK raises it; `timeout`
    ends the wait as the update's RPC timeout would. Its clock is ours plus `skew`."""

    def __init__(self, *devices: str, rules: LeaseSpec | None = None) -> None:
        super().__init__("p", list(devices), rules)
        self.slow: dict[str, float] = {}
        self.timeout = False
        self.skew = timedelta(0)
        self.applied: dict[str, asyncio.Event] = {}

    def landed(self, name: str) -> asyncio.Event:
        """Set once the pool applied an update `name` (clear it to wait for the next)."""
        return self.applied.setdefault(name, asyncio.Event())

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skew

    async def signal(self, name: str, arg: Any, **options: Any) -> None:
        await super().signal(name, arg, **options)
        self.landed(name).set()
        await asyncio.sleep(self.slow.get(name, 0.0))

    async def execute_update(self, name: str, arg: Any, **options: Any) -> Any:
        answer = await super().execute_update(name, arg, **options)
        self.landed(name).set()
        delay = self.slow.get(name, 0.0)
        if delay:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError as err:
                raise WorkflowUpdateRPCTimeoutOrCancelledError() from err
            if self.timeout:
                self.timeout = False
                raise WorkflowUpdateRPCTimeoutOrCancelledError()
        return answer


async def test_a_cancel_during_the_ask_leaves_nothing_held() -> None:
    pool = Slow("d-1")
    pool.slow["lease_ask"] = 0.15
    client = client_of(pool)
    entered = False

    async def user() -> None:
        nonlocal entered
        async with client.lease("p"):
            entered = True

    task = asyncio.ensure_future(user())
    await pool.landed("lease_ask").wait()
    assert pool.book.leases  # granted at the pool, the signal's call not yet back
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not entered and pool.book.leases == []
    assert pool.book.ended[-1].reason == "Released"


async def test_a_timeout_around_an_ask_in_flight_is_a_timeout_and_nothing_held() -> None:
    pool = Slow("d-1")
    pool.slow["lease_ask"] = 0.15
    client = client_of(pool)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05), client.lease("p"):
            pass
    assert pool.book.leases == []


async def test_a_cancel_during_a_queued_ask_drops_its_ticket() -> None:
    pool = Slow("d-1")
    client = client_of(pool)
    await client.acquire_lease("p")
    pool.slow["lease_ask"] = 0.15
    pool.landed("lease_ask").clear()
    task = asyncio.ensure_future(client.acquire_lease("p", wait=30))
    await pool.landed("lease_ask").wait()
    assert pool.book.tickets
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.book.tickets == [] and len(pool.book.leases) == 1


async def test_a_renew_cancelled_before_it_was_sent_is_not_sent_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_calls, "UPDATES_IN_FLIGHT", 1)
    pool = Slow("d-1", "d-2")
    client = client_of(pool)
    one, two = await client.acquire_lease("p"), await client.acquire_lease("p")
    pool.slow["renew"] = 0.1
    first = asyncio.ensure_future(client.renew_lease("p", one))  # in flight: the gate is full
    await pool.landed("renew").wait()
    second = asyncio.ensure_future(client.renew_lease("p", two))  # waits at the gate
    await asyncio.sleep(0.01)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    await first
    assert pool.asked.count("renew") == 1


async def test_a_cancel_during_a_background_renew_ends_the_holder_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_keeper, "MIN_RENEW_SECONDS", 0.05)
    pool = Slow("d-1", rules=LeaseSpec(idle_timeout="300ms"))  # renewed every 0.1 s
    pool.slow["renew"] = 0.3
    client = client_of(pool)

    async def user() -> None:
        async with client.lease("p", duration=20):
            await asyncio.sleep(60)

    task = asyncio.ensure_future(user())
    await pool.landed("renew").wait()  # in flight: applied, its answer on its way
    begun = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert time.monotonic() - begun < 1
    assert pool.book.leases == [] and pool.book.ended[-1].reason == "Released"


@pytest.mark.parametrize("skew", [10, -10])
async def test_a_claimed_lease_s_first_renew_keeps_its_end_under_clock_skew(
    skew: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_lease_keeper, "MIN_RENEW_SECONDS", 0.05)
    pool = Slow("d-1", rules=LeaseSpec(idle_timeout="300ms"))
    pool.skew = timedelta(seconds=skew)
    client = client_of(pool)
    first = await client.acquire_lease("p")
    inside = asyncio.Event()
    ends: list[datetime] = []

    async def user() -> None:
        async with client.lease("p", duration=20, wait=10) as lease:
            held = pool.book.lease(lease.id)
            assert held is not None and lease.waited_seconds > 0
            ends.append(held.expires_at)
            pool.landed("renew").clear()
            await pool.landed("renew").wait()
            ends.append(held.expires_at)
            inside.set()

    pool.landed("lease_ask").clear()
    task = asyncio.ensure_future(user())
    await pool.landed("lease_ask").wait()
    await client.release_lease("p", first)
    await asyncio.wait_for(task, 5)
    assert inside.is_set()
    assert abs((ends[1] - ends[0]).total_seconds()) < 0.05


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"duration": 1e20}, "duration: must be at most "),
        ({"wait": 1e20}, "wait: must be at most "),
        ({"duration": timedelta(days=10**6)}, "duration: must be at most "),
        ({"holder": "a\nb"}, "holder: must be one line of printable characters"),
    ],
)
async def test_what_the_python_api_is_given_is_checked_as_the_cli_checks_it(
    given: dict[str, Any], said: str
) -> None:
    pool = LeasePool("p", ["d-1"])
    with pytest.raises(BadInput) as err:
        await client_of(pool).acquire_lease("p", **given)
    assert str(err.value).startswith(said) and pool.asked == []


async def test_an_empty_holder_is_the_default_one() -> None:
    pool = LeasePool("p", ["d-1"])
    lease = await client_of(pool).acquire_lease("p", holder=" ")
    assert lease.holder == default_holder()


def test_a_ctrl_c_before_the_lease_is_printed_releases_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `lease -o json` reads the connect info after the grant; a Ctrl-C meanwhile loses the
    # id it never printed: the lease is given back.
    pool = Slow("d-1")
    pool.slow["lease_connect"] = 5.0

    def lease_connect(arg: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # asyncio.run cancels the command's task

    monkeypatch.setattr(pool, "lease_connect", lease_connect, raising=False)

    async def connect(**_: Any) -> Temporal:
        return Temporal(pool)

    monkeypatch.setattr("devicepool.connect.connect", connect)
    monkeypatch.setattr("devicepool.client._connect.encrypts", lambda _: True)
    begun = time.monotonic()
    code = main(["lease", "p", "-o", "json"])
    assert code == 130  # as a shell says a Ctrl-C
    assert time.monotonic() - begun < 2 and capsys.readouterr().out == ""
    assert pool.book.leases == [] and pool.book.ended[-1].reason == "Released"


class ClaimWindows(LeasePool):
    """A pool behind a Temporal that, once an offer is claimed, turns the next reads away
    (`busy_reads` s: the query buffer full), or turns claims away (`busy_claims`)."""

    def __init__(self, *devices: str) -> None:
        super().__init__("p", list(devices))
        self.busy_reads = 0.0
        self.reads_busy_until = 0.0
        self.busy_claims = False

    async def query(self, name: str, arg: Any = None, **options: Any) -> Any:
        if name == "lease_ticket" and time.monotonic() < self.reads_busy_until:
            raise RPCError("consistent query buffer is full", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
        return await super().query(name, arg, **options)

    async def signal(self, name: str, arg: Any, **options: Any) -> None:
        claim = name == "lease_ask" and self.book.offer_for(arg.ask) is not None
        if claim and self.busy_claims:
            raise RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
        await super().signal(name, arg, **options)
        if claim:
            self.reads_busy_until = time.monotonic() + self.busy_reads


async def test_a_lease_claimed_as_the_wait_ends_is_the_caller_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Offered at the end of the wait, claimed; the reads after the claim turned away past the
    # wait's end: the lease is the caller's, never given back as "none came free".
    monkeypatch.setattr(_lease_wait, "ANSWER_SECONDS", 0.1)  # (10 s, past at the wait's end)
    monkeypatch.setattr(_lease_wait, "CLAIMED_READ_SECONDS", 1.0)
    pool = ClaimWindows("d-1")
    pool.busy_reads = 0.3
    client = client_of(pool)
    first = await client.acquire_lease("p")
    waiting = asyncio.ensure_future(client.acquire_lease("p", wait=0.5))
    await asyncio.sleep(0.45)
    await client.release_lease("p", first)  # offered to the waiter near its deadline
    got = await asyncio.wait_for(waiting, 5)
    held = pool.book.lease(got.id)
    assert held is not None and held.claimed


async def test_a_claim_turned_away_keeps_the_wait_going(monkeypatch: pytest.MonkeyPatch) -> None:
    # Temporal turning the claim away for its whole budget: the offer ends unclaimed (or is
    # claimed at a later read), and the wait goes on; never `TemporalBusy` with time left.
    monkeypatch.setattr(_lease_wait, "CLAIM_SEND_SECONDS", 0.05)
    monkeypatch.setattr(_lease_calls, "BACKOFF_FIRST", 0.001)
    monkeypatch.setattr(_lease_calls, "BACKOFF_MOST", 0.002)
    pool = ClaimWindows("d-1")
    pool.busy_claims = True
    client = client_of(pool)
    first = await client.acquire_lease("p")
    waiting = asyncio.ensure_future(client.acquire_lease("p", wait=30))
    await asyncio.sleep(0.05)
    await client.release_lease("p", first)
    await asyncio.sleep(0.3)  # its claims turned away meanwhile
    assert not waiting.done()
    pool.busy_claims = False
    got = await asyncio.wait_for(waiting, 5)
    held = pool.book.lease(got.id)
    assert held is not None and held.claimed
