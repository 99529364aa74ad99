"""`PoolClient`'s leases against an in-process pool whose updates and queries are a real
`LeaseBook` (the pool's checks as `reconciler/lease_checks.py` makes them): what the client
checks locally, how it maps the pool's refusals, and how it waits, claims, gives up,
renews and releases. The same round trip on a live pool: tests/workflows/test_leases_client.py.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.v1beta1 import LeaseSpec
from devicepool.client import BadInput, PoolClient, _lease_keeper, _lease_wait
from devicepool.client import _leases as leases_module
from devicepool.client._leases import Lease, default_holder, parse_selector, renew_every, seconds_of
from devicepool.client.errors import (
    EXIT_BAD_INPUT,
    EXIT_NOT_GRANTED,
    EXIT_REFUSED,
    DevicePoolError,
    LeaseGone,
    LeaseNotGranted,
    LeaseRefused,
)
from devicepool.workflows.reconciler.lease_checks import (
    LEASE_GONE,
    LEASE_NOT_GRANTED,
    LEASE_REFUSED,
)
from devicepool.workflows.reconciler.lease_messages import (
    LeaseAnswer,
    LeasesView,
    ReleaseAnswer,
    ended_answer,
    ended_message,
    granted,
)
from devicepool.workflows.reconciler.lease_records import Candidate, EndReason, NotGranted, Queued
from devicepool.workflows.reconciler.leases import CLAIM_WINDOW, LeaseBook


def refused(message: str, kind: str) -> WorkflowUpdateFailedError:
    return WorkflowUpdateFailedError(ApplicationError(message, type=kind, non_retryable=True))


class LeasePool:
    """One pool's workflow handle: its lease book, devices, spec; what it was asked."""

    def __init__(
        self,
        name: str,
        devices: list[str],
        rules: LeaseSpec | None = None,
        *,
        kind: str = "devicepool",
    ) -> None:
        self.name, self.rules, self.id = name, rules or LeaseSpec(), f"{kind}/{name}"
        self.devices = [Candidate(d, {"device": d, "region": "us-west"}) for d in devices]
        self.book = LeaseBook()
        self.asked: list[str] = []
        self.deleting = False
        self.ids = (f"id{n}" for n in itertools.count(1))
        self.made: dict[str, str] = {}  # what each `lease` update (by its id) made

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def describe(self) -> Any:
        return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING)

    async def query(self, name: str, arg: Any = None, **_: Any) -> Any:
        self.asked.append(name)
        if name == "spec":
            return {"spec": {"leases": self.rules.to_json_dict()}, "metadata": {"name": self.name}}
        if name == "leases":
            return LeasesView(leases=self.book.leases, tickets=self.book.tickets)
        return self.ticket_answer(arg.ticket)

    def ticket_answer(self, ticket: str) -> LeaseAnswer:
        book = self.book
        if (offer := book.offer_for(ticket)) is not None:
            said = granted(self.name, offer)
            return LeaseAnswer(granted=said, ticket=ticket, offered=not offer.claimed)
        if (position := book.position(ticket)) is not None:
            return LeaseAnswer(ticket=ticket, position=position)
        ended = book.ended_as(ticket)
        return ended_answer(ended) if ended else LeaseAnswer(ended=LEASE_GONE)

    async def execute_update(self, name: str, arg: Any, **options: Any) -> Any:
        self.asked.append(name)
        update_id = options.get("id")
        if name == "lease" and update_id in self.made:  # sent again: what the first made
            return self._made_again(self.made[update_id])
        answer = getattr(self, name)(arg)
        answer = await answer if inspect.isawaitable(answer) else answer
        if name == "lease" and update_id and (answer.granted or answer.ticket):
            self.made[update_id] = answer.granted.lease if answer.granted else answer.ticket
        return answer

    def _made_again(self, made: str) -> LeaseAnswer:
        held = self.book.lease(made)
        if held is not None:
            return LeaseAnswer(granted=granted(self.name, held))
        answer = self.ticket_answer(made)
        if answer.granted is not None:
            return LeaseAnswer(ticket=made, message="offered a device: claim it")
        return answer

    def lease(self, request: Any) -> LeaseAnswer:
        if self.deleting:
            raise refused(f"pool {self.name!r} is being deleted", LEASE_REFUSED)
        if request.selector.get("region", "us-west") != "us-west":
            raise refused("selector region=eu can never match", LEASE_REFUSED)
        outcome = self.book.request(
            candidates=self.devices,
            selector=request.selector,
            holder=request.holder,
            duration=timedelta(seconds=request.duration or self.rules.max_duration),
            wait=timedelta(seconds=request.wait),
            now=self.now(),
            rules=self.rules,
            new_id=lambda: next(self.ids),
        )
        if isinstance(outcome, NotGranted):
            raise refused(outcome.message, LEASE_REFUSED if outcome.full else LEASE_NOT_GRANTED)
        if isinstance(outcome, Queued):
            return LeaseAnswer(ticket=outcome.ticket.id, position=outcome.position)
        return LeaseAnswer(granted=granted(self.name, outcome))

    async def signal(self, name: str, arg: Any, **_: Any) -> None:
        self.asked.append(name)
        getattr(self, name)(arg)

    def lease_ask(self, request: Any) -> None:
        """As the pool's `Leasing.ask`: the outcome kept under the ask's id."""
        book, now = self.book, self.now()
        if book.knows(request.ask):  # sent again: the claim of an offer read
            book.claim(request.ask, now=now, rules=self.rules)
            return
        if self.deleting or request.selector.get("region", "us-west") != "us-west":
            said = "is being deleted" if self.deleting else "selector region=eu can never match"
            book.refuse(request.ask, holder="", refusal="Refused", message=said, now=now)
            return
        outcome = book.request(
            candidates=self.devices,
            selector=request.selector,
            holder=request.holder,
            duration=timedelta(seconds=request.duration or self.rules.max_duration),
            wait=timedelta(seconds=request.wait),
            now=now,
            rules=self.rules,
            new_id=lambda: next(self.ids),
            ask=request.ask,
        )
        if isinstance(outcome, NotGranted):
            why = "Refused" if outcome.full else "NotGranted"
            book.refuse(request.ask, holder="", refusal=why, message=outcome.message, now=now)

    def lease_give_back(self, request: Any) -> None:
        """As the pool's `Leasing.give_back`: a ticket dropped or a lease released, by the
        ask's id or the lease's; an id it does not know changes nothing."""
        book = self.book
        if book.cancel(request.lease, now=self.now()) is not None:
            return
        offer = book.offer_for(request.lease)
        lease_id = offer.id if offer is not None else request.lease
        if book.release(lease_id, now=self.now()) is not None:
            book.assign(
                self.devices, now=self.now(), rules=self.rules, new_id=lambda: next(self.ids)
            )

    def lease_claim(self, request: Any) -> LeaseAnswer:
        lease = self.book.claim(request.ticket, now=self.now(), rules=self.rules)
        if lease is None:
            raise refused(f"no ticket {request.ticket!r}", LEASE_GONE)
        return LeaseAnswer(granted=granted(self.name, lease))

    def renew(self, request: Any) -> LeaseAnswer:
        duration = None if request.duration is None else timedelta(seconds=request.duration)
        lease = self.book.renew(request.lease, duration=duration, now=self.now(), rules=self.rules)
        if lease is None:
            raise refused(f"no lease {request.lease!r}", LEASE_GONE)
        return LeaseAnswer(granted=granted(self.name, lease))

    def release(self, request: Any) -> ReleaseAnswer:
        book = self.book
        offer = book.offer_for(request.lease)
        if offer is not None and offer.claimed:  # a claimed ticket's id, as the pool answers it
            return ReleaseAnswer(reason=LEASE_GONE, message=f"no lease {request.lease!r}")
        if ticket := next((t for t in book.tickets if t.id == request.lease), None):
            book.tickets.remove(ticket)
            return ReleaseAnswer(reason="Cancelled")
        if not (book.lease(request.lease) or book.ended_as(request.lease)):
            raise refused(f"no lease or ticket {request.lease!r}", LEASE_GONE)
        was_held = book.lease(request.lease) is not None
        ended = book.release(request.lease, now=self.now())
        assert ended is not None
        book.assign(self.devices, now=self.now(), rules=self.rules, new_id=lambda: next(self.ids))
        message = f"{ended.device} released" if was_held else ended_message(ended)
        return ReleaseAnswer(reason=ended.reason.value, message=message)


class Missing:
    async def describe(self) -> Any:
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")


class Temporal:
    """Pools by workflow id; any other id is not found."""

    def __init__(self, *pools: LeasePool) -> None:
        self.pools = {p.id: p for p in pools}
        self.service_client = SimpleNamespace(config=SimpleNamespace(target_host="fake:7233"))

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> LeasePool | Missing:
        return self.pools.get(workflow_id) or Missing()


@pytest.fixture(autouse=True)
def _quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lease_wait, "POLL_SECONDS", 0.01)


def client_of(*pools: LeasePool) -> PoolClient:
    return PoolClient(Temporal(*pools))  # type: ignore[arg-type]


# ---------------------------------------------------------------- checked before any call


@pytest.mark.parametrize(
    ("given", "chosen"),
    [
        (None, {}),
        ({"region": "us-west"}, {"region": "us-west"}),
        ("region=us-west, device=d-1", {"region": "us-west", "device": "d-1"}),
        (
            ["region=us-west", "example.com/gpu=yes"],
            {"region": "us-west", "example.com/gpu": "yes"},
        ),
        ("device=", {"device": ""}),
    ],
)
def test_a_selector_is_a_mapping_or_k_equals_v_terms(given: Any, chosen: dict[str, str]) -> None:
    assert parse_selector(given) == chosen


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("region", "selector: must be key=value, got 'region'"),
        ("=us-west", "selector: must be key=value, got '=us-west'"),
        ("region=us west", "selector region=us west: label value must be empty or"),
        ("bad key=x", "selector bad key=x: "),
        (["a=1", "a=2"], "selector: a given twice (1 and 2)"),
        ({"a": 1}, "selector a: a label value is a string, got 1"),
    ],
)
def test_a_selector_that_is_not_k_equals_v_is_bad_input(given: Any, said: str) -> None:
    with pytest.raises(BadInput) as err:
        parse_selector(given)
    assert str(err.value).startswith(said) and err.value.exit_code == EXIT_BAD_INPUT


def test_durations_are_above_zero_and_a_wait_may_be_zero() -> None:
    assert seconds_of(timedelta(minutes=10), "duration") == 600
    assert seconds_of("1h30m", "duration") == 5400
    assert seconds_of(90, "duration") == 90
    assert seconds_of(0, "wait", zero=True) == 0
    for bad in (timedelta(seconds=-1), 0, "-5m", "10", float("nan"), float("inf"), True):
        with pytest.raises(BadInput):
            seconds_of(bad, "duration")


async def test_bad_input_is_refused_before_any_call() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    with pytest.raises(BadInput, match="duration: must be more than 0s"):
        await client.acquire_lease("p", duration=timedelta(minutes=-1))
    with pytest.raises(BadInput, match="selector: must be key=value"):
        await client.acquire_lease("p", selector="region")
    with pytest.raises(BadInput, match="holder: at most 128"):
        await client.acquire_lease("p", holder="x" * 129)
    with pytest.raises(BadInput, match="invalid pool name"):
        await client.acquire_lease("P_1")
    assert pool.asked == []


def test_the_default_holder_is_user_at_host_and_pid() -> None:
    user_host = default_holder(pid=False)
    assert "@" in user_host and default_holder().startswith(f"{user_host}:")


def test_renewals_come_at_a_third_of_the_shorter_of_idle_timeout_and_the_lease() -> None:
    assert renew_every(300, 3600) == 100
    assert renew_every(300, 60) == 20
    assert renew_every(300, 1) == 1  # never more often than once a second


# ---------------------------------------------------------------- the pool's answers


@pytest.mark.parametrize(
    ("kind", "error", "code"),
    [
        (LEASE_REFUSED, LeaseRefused, EXIT_REFUSED),
        (LEASE_NOT_GRANTED, LeaseNotGranted, EXIT_NOT_GRANTED),
        (LEASE_GONE, LeaseGone, EXIT_REFUSED),
    ],
)
def test_each_refusal_of_the_pool_is_its_own_error(kind: str, error: type, code: int) -> None:
    client = client_of()
    with pytest.raises(error) as err, leases_module.lease_errors(client, "p", None):
        raise refused("the pool's own words\nand more", kind)
    assert (str(err.value), err.value.exit_code) == ('pool "p": the pool\'s own words', code)
    with pytest.raises(BadInput), leases_module.lease_errors(client, "p", "BrowserPool"):
        raise refused("bad payload", "ValueError")  # any other refusal: bad input


async def test_granted_at_once_then_refused_and_not_granted() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    lease = await client.acquire_lease("p", duration="10m", holder="ci")
    assert (lease.pool, lease.device, lease.holder, lease.waited_seconds) == ("p", "d-1", "ci", 0)
    assert lease.expires_at - lease.granted_at == timedelta(minutes=10)
    with pytest.raises(LeaseNotGranted, match="no ready device matching the selector is free"):
        await client.acquire_lease("p")
    with pytest.raises(LeaseRefused, match='pool "p": selector region=eu can never match'):
        await client.acquire_lease("p", selector={"region": "eu"}, wait=60)
    pool.deleting = True
    with pytest.raises(LeaseRefused, match="being deleted"):
        await client.acquire_lease("p", wait=60)


async def test_a_queued_ask_is_polled_by_query_and_its_offer_claimed_by_asking_again() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    first = await client.acquire_lease("p")
    places: list[dict[str, Any]] = []
    queued = asyncio.Event()

    def progress(place: dict[str, Any]) -> None:
        places.append(place)
        queued.set()

    waiting = asyncio.ensure_future(
        client.acquire_lease("p", wait=timedelta(seconds=30), on_progress=progress)
    )
    await queued.wait()
    assert places[0]["position"] == 1 and places[0]["ahead"] == 0
    assert (await client.release_lease("p", first)).reason == "Released"
    second = await asyncio.wait_for(waiting, 5)
    assert second.device == "d-1" and second.waited_seconds > 0
    assert [x.id for x in pool.book.leases] == [second.id] and pool.book.leases[0].claimed
    # Waiting is queries: the only messages are two asks and the second's claim (the same
    # ask again: signals), and a release (an update).
    sent = [a for a in pool.asked if a not in ("leases", "lease_ticket", "spec")]
    assert sorted(sent) == ["lease_ask", "lease_ask", "lease_ask", "release"]
    held = pool.book.lease(second.id)
    assert held is not None and second.expires_at == held.expires_at  # the claim's end


async def test_a_wait_that_runs_out_drops_its_ticket() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    await client.acquire_lease("p")
    with pytest.raises(LeaseNotGranted) as err:
        await client.acquire_lease("p", wait=0.1)
    assert err.value.exit_code == EXIT_NOT_GRANTED
    assert pool.book.tickets == [] and pool.asked[-1] == "lease_give_back"


async def test_a_cancelled_wait_drops_its_ticket() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    await client.acquire_lease("p")
    queued = asyncio.Event()
    waiting = asyncio.ensure_future(
        client.acquire_lease("p", wait=30, on_progress=lambda _: queued.set())
    )
    await queued.wait()
    assert pool.book.tickets
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.book.tickets == []


async def test_giving_up_after_the_offer_gives_back_the_device_offered() -> None:
    # The ask was offered a device between the last poll and the give-up: giving back the
    # ask's id ends the offer, unused (no reset or replace spent on it).
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    first = await client.acquire_lease("p")
    asked = SimpleNamespace(ask="ask-1", selector={}, holder="h", duration=None, wait=60)
    pool.lease_ask(asked)
    pool.release(SimpleNamespace(lease=first.id))
    assert pool.book.offer_for("ask-1") is not None
    given_back = functools.partial(leases_module.give_back, client, "p", "ask-1")
    waited = _lease_wait.Waited(client, pool, "p", None, "ask-1", 0.0, None, given_back)  # type: ignore[arg-type]
    await waited.give_up()
    ended = pool.book.ended_as("ask-1")
    assert pool.book.leases == [] and ended is not None and ended.reason == "Cancelled"


async def test_renew_and_release_by_id_and_release_is_idempotent() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    lease = await client.acquire_lease("p", duration="10m")
    renewed = await client.renew_lease("p", lease.id, duration=timedelta(hours=2))
    assert renewed.expires_at == lease.granted_at + timedelta(hours=1)  # never past maxDuration
    assert (await client.release_lease("p", lease.id)).reason == "Released"
    again = await client.release_lease("p", lease)
    assert again.reason == "Released" and "ended at" in again.message
    with pytest.raises(LeaseGone) as err:
        await client.renew_lease("p", lease)
    assert err.value.exit_code == EXIT_REFUSED
    with pytest.raises(LeaseGone):
        await client.release_lease("p", "never-was")
    with pytest.raises(BadInput):
        await client.release_lease("p", " ")


async def test_the_context_manager_releases_on_an_exception() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    with pytest.raises(RuntimeError, match="the user's own"):
        async with client.lease("p", duration=timedelta(minutes=10)) as lease:
            assert isinstance(lease, Lease) and pool.book.lease(lease.id) is not None
            raise RuntimeError("the user's own")
    assert pool.book.leases == [] and pool.book.ended[-1].reason == "Released"


async def test_the_context_manager_releases_when_cancelled() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    inside = asyncio.Event()

    async def user() -> None:
        async with client.lease("p"):
            inside.set()
            await asyncio.sleep(60)

    task = asyncio.ensure_future(user())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.book.leases == [] and pool.book.ended[-1].reason == "Released"


async def test_the_context_manager_renews_the_idle_clock_but_never_past_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_keeper, "MIN_RENEW_SECONDS", 0.05)
    pool = LeasePool("p", ["d-1"], LeaseSpec(idle_timeout="300ms"))  # renewed every 0.1 s
    client = client_of(pool)
    async with client.lease("p", duration=timedelta(seconds=2)) as lease:
        await asyncio.sleep(0.5)
        held = pool.book.lease(lease.id)
        assert held is not None and pool.asked.count("renew") >= 2
        assert held.expires_at <= lease.expires_at + timedelta(milliseconds=50)
        assert (pool.now() - held.renewed_at).total_seconds() < 0.3  # not idle
        assert lease.ended is None
    assert pool.book.ended[-1].reason == "Released"


async def test_a_pool_whose_rules_went_unanswered_is_renewed_often_until_they_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its `spec` query turned away (a busy pool's query buffer), the holder does not guess
    the default 5-minute idleTimeout: the pool's is 300 ms here, and a renew every 20 s
    would let the pool give the device to another while it is in use."""
    monkeypatch.setattr(_lease_keeper, "MIN_RENEW_SECONDS", 0.05)

    class Busy(LeasePool):
        turned_away = 3

        async def query(self, name: str, arg: Any = None, **options: Any) -> Any:
            if name == "spec" and self.turned_away:
                self.turned_away -= 1
                self.asked.append(name)
                raise RPCError("query buffer is full", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
            return await super().query(name, arg, **options)

    pool = Busy("p", ["d-1"], LeaseSpec(idle_timeout="300ms"))
    client = client_of(pool)
    async with client.lease("p", duration=timedelta(seconds=60)) as lease:
        await asyncio.sleep(0.6)
        held = pool.book.lease(lease.id)
        assert held is not None and (pool.now() - held.renewed_at).total_seconds() < 0.3
        assert pool.asked.count("spec") >= 4  # asked again until it answered
    assert pool.book.ended[-1].reason == "Released"


async def test_the_context_manager_says_when_the_pool_ended_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_keeper, "MIN_RENEW_SECONDS", 0.05)
    pool = LeasePool("p", ["d-1"], LeaseSpec(idle_timeout="300ms"))
    client = client_of(pool)
    async with client.lease("p") as lease:
        pool.book.end_device("d-1", EndReason.DEVICE_LOST, now=pool.now())
        await asyncio.sleep(0.3)
        assert lease.ended is not None and "no lease" in lease.ended
    # Given back again on the way out: no error (it had ended; nothing changes).
    assert pool.asked[-1] == "lease_give_back"


async def test_leases_is_the_query_s_view() -> None:
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    lease = await client.acquire_lease("p", holder="ci")
    pool.lease(SimpleNamespace(selector={}, holder="next", duration=None, wait=60))
    view = await client.leases("p")
    assert [(x.id, x.holder) for x in view.leases] == [(lease.id, "ci")]
    assert [t.holder for t in view.tickets] == ["next"]


async def test_a_ticket_given_up_is_dropped_within_a_bound_when_no_worker_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_wait, "DROP_SECONDS", 0.1)
    pool = LeasePool("p", ["d-1"])
    client = client_of(pool)
    await client.acquire_lease("p")

    signal = pool.signal

    async def no_server(name: str, arg: Any, **options: Any) -> None:
        if name == "lease_give_back":
            await asyncio.sleep(1)  # the server out of reach (the SDK retries)
        await signal(name, arg, **options)

    monkeypatch.setattr(pool, "signal", no_server)
    with pytest.raises(LeaseNotGranted):
        await asyncio.wait_for(client.acquire_lease("p", wait=0.1), 5)
    assert len(pool.book.tickets) == 1  # left to end at its deadline


async def test_a_worker_that_does_not_answer_the_leases_query_is_one_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = LeasePool("p", ["d-1"])

    async def old_build(name: str, *_: Any, **__: Any) -> Any:
        raise WorkflowQueryFailedError("unknown queryType leases")

    monkeypatch.setattr(pool, "query", old_build)
    with pytest.raises(DevicePoolError) as err:
        await client_of(pool).leases("p")
    assert str(err.value) == 'pool "p": leases: unknown queryType leases'


class OlderPool(LeasePool):
    """A pool on a build without `lease_ask`: the signal is taken (and left unhandled), and
    `lease_ticket` knows no such ticket."""

    def lease_ask(self, request: Any) -> None:
        pass

    def lease_give_back(self, request: Any) -> None:
        pass


async def test_an_ask_the_pool_never_takes_is_said_once_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_wait, "ANSWER_SECONDS", 0.2)
    pool = OlderPool("p", ["d-1"])
    with pytest.raises(LeaseRefused, match="did not take the ask") as err:
        await client_of(pool).acquire_lease("p", wait=60)
    assert err.value.exit_code == EXIT_REFUSED
    # One ask, polled, then given back (in case it is taken later): never a loop of asks.
    assert pool.asked.count("lease_ask") == 1 and pool.asked[-1] == "lease_give_back"


class LateClaims(LeasePool):
    """A pool where the first claim of an offer comes too late: the offer ended unclaimed
    and its device went to the next ticket (`other`) before the claim landed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.late = True

    def lease_ask(self, request: Any) -> None:
        offer = self.book.offer_for(request.ask)
        if self.late and offer is not None and not offer.claimed:
            self.late = False
            self.book.reap(now=offer.renewed_at + CLAIM_WINDOW, rules=self.rules, members=None)
            other = SimpleNamespace(ask="other", selector={}, holder="o", duration=None, wait=60)
            LeasePool.lease_ask(self, other)  # queued behind? no: d-1 is free again: granted
            return  # the late claim: the pool knows the id, has no offer for it
        super().lease_ask(request)


async def test_a_claim_that_comes_too_late_is_no_lease_and_the_wait_goes_on() -> None:
    pool = LateClaims("p", ["d-1"])
    client = client_of(pool)
    first = await client.acquire_lease("p")
    waiting = asyncio.ensure_future(client.acquire_lease("p", wait=30))
    await asyncio.sleep(0.05)  # queued
    await client.release_lease("p", first)  # offered to the waiter, which claims too late
    await asyncio.sleep(0.2)
    assert not waiting.done()  # never the offer taken for a lease while `other` holds d-1
    (other,) = pool.book.leases
    assert (other.ticket, other.device) == ("other", "d-1")
    pool.lease_give_back(SimpleNamespace(lease="other", replace=False))
    got = await asyncio.wait_for(waiting, 5)  # asked again, and granted once d-1 is free
    (held,) = pool.book.leases
    assert (got.device, got.id) == ("d-1", held.id) and held.claimed


def test_asks_far_back_in_the_queue_are_looked_up_less_often() -> None:
    # Temporal answers one query at a time while a workflow task runs: hundreds of waiters
    # polling every second crowd out the few at the head, whose offers go in 30 s unread.
    unit = _lease_wait.POLL_SECONDS  # (the tests' quick polls)
    every = [_lease_wait.poll_every(p) / unit for p in (1, 10, 11, 31, 81, 500)]
    assert every == pytest.approx([1.0, 1.0, 1.0, 3.0, 8.0, 8.0])


def test_a_waiter_polls_at_half_the_time_the_queue_takes_to_bring_it_to_the_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_wait, "POLL_SECONDS", 1.0)
    pace = _lease_wait.PollPace()
    assert pace.next(101, now=0.0) == 8.0  # not yet seen to move: by its place
    # 101 -> 61 in 2 s: 20 places a second; 60 ahead: 3 s to the head, looked up in 1.5 s
    assert pace.next(61, now=2.0) == pytest.approx(1.5)
    assert pace.next(61, now=3.0) == 6.0  # stuck meanwhile: by its place again
    assert pace.next(3, now=4.0) == 1.0  # near the head: every second
    slow = _lease_wait.PollPace()
    slow.next(50, now=0.0)
    assert slow.next(49, now=10.0) == pytest.approx(4.8)  # slow: by its place, no slower
