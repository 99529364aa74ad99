"""Leases from the user's side: `PoolClient.lease`, `acquire_lease`, `renew_lease`,
`release_lease` and `leases`, over one pool's signals, updates and queries (docs/leases.md).

A lease is asked for by signal (`lease_ask`, under an id of the client's own) and its
outcome read with the `lease_ticket` query: granted, waiting (looked up every
`POLL_SECONDS`, in the pool's queue when several of a client's asks wait: `_lease_watch`),
or ended (refused, none free). Neither takes one of the 10 updates Temporal lets a
workflow have in flight, so any number of clients can ask at once (bench/leases.py).
Giving up (the wait ran out, a cancel, an ask cut short in flight) gives the ask back by
signal (`lease_give_back`): its ticket, or the device granted meanwhile. The context
manager renews in the background (`_lease_keeper`, the `renew` update), to keep the idle
clock, never past the lease's end, and gives the lease back by signal on the way out;
`release_lease` is the `release` update (it answers how the lease ended). What is checked
before any call: `_lease_input`; how calls go out under load: `_lease_calls`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import WorkflowHandle

from devicepool.api.names import (
    QUERY_LEASE_TICKET,
    SIGNAL_LEASE_ASK,
    SIGNAL_LEASE_GIVE_BACK,
    UPDATE_RELEASE,
)
from devicepool.client import _lease_calls, _lease_watch
from devicepool.client._lease_calls import Unanswered, lease_errors
from devicepool.client._lease_calls import handle_of as _handle
from devicepool.client._lease_input import (
    Lease,
    RoundTrip,
    default_holder,
    granted_lease,
    lease_request,
    parse_selector,
    seconds_of,
)
from devicepool.client._lease_input import lease_id as _lease_id
from devicepool.client._lease_keeper import Keeper, renew, renew_every
from devicepool.client._lease_watch import view
from devicepool.client._validation import validate_name
from devicepool.client.errors import (
    DevicePoolError,
    LeaseNotGranted,
    LeaseRefused,
    TemporalBusy,
)
from devicepool.workflows.reconciler.lease_messages import (
    Granted,
    LeaseAnswer,
    LeaseAsk,
    ReleaseAnswer,
    ReleaseRequest,
    TicketRef,
)
from devicepool.workflows.reconciler.leasing import LEASE_GONE

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = [
    "POLL_SECONDS",
    "Lease",
    "LeaseProgress",
    "acquire",
    "default_holder",
    "give_back",
    "held",
    "lease_errors",
    "lease_request",
    "or_given_back",
    "parse_selector",
    "release",
    "renew",
    "renew_every",
    "seconds_of",
    "view",
]

# How often a waiting ask is looked up (a query: no history), near the head of the queue;
# further back, less often (`poll_every`): Temporal answers one query at a time while a
# workflow task runs and turns the others away, so hundreds of waiters polling every second
# crowd out the few whose offer is due (an offer unread for 30 s goes to the next ticket).
POLL_SECONDS = 1.0
# At most this many times `POLL_SECONDS` far back in the queue; a pause of `POLL_SECONDS`
# for every `PLACES_A_POLL` places ahead (offers go to the head, some 10 a second on a busy
# pool).
POLL_MOST = 8
PLACES_A_POLL = 10
# An ask given up is given back within this, or left to end at its deadline (a ticket) or
# its idle timeout (a lease granted meanwhile) when Temporal does not take the signal.
DROP_SECONDS = 10.0
# However short the wait (0 too), an ask's outcome is read for at least this long while the
# polls go unanswered (a worker restarting, the query buffer full under load).
ANSWER_SECONDS = 10.0
# An offer's claim (the ask sent again) is tried this long while Temporal turns it away: well
# inside the pool's 30 s to claim an offer.
CLAIM_SEND_SECONDS = 10.0
# A claim sent, its outcome is read this long while the polls go unanswered, the wait's end
# past or not (the device is on its way); then it is given back.
CLAIMED_READ_SECONDS = 30.0

T = TypeVar("T")

# Called with each place in the queue a wait sees: {"ticket", "position", "ahead"}.
LeaseProgress = Callable[[dict[str, Any]], None]

# How a ticket can end while waited for, and what the wait then does.
_TIMED_OUT, _POOL_DELETED, _REFUSED, _NOT_GRANTED = (
    "TimedOut",
    "PoolDeleted",
    "Refused",
    "NotGranted",
)


def poll_every(position: int) -> float:
    """The pause before an ask waiting at `position` is looked up again, before the queue
    was seen to move: `POLL_SECONDS` near the head, up to `POLL_MOST` times it far back (8 s:
    well inside the 30 s to claim an offer, a few polls turned away included)."""
    further = max(0, position - 1) / PLACES_A_POLL
    return POLL_SECONDS * min(POLL_MOST, max(1.0, further))


class PollPace:
    """When a waiting ask is looked up next: at half the time the queue, as it was seen to
    move, takes to bring it to the head (an offer is read soon after it is made, and a
    waiter far back asks seldom), between `POLL_SECONDS` and `POLL_MOST` times it;
    `poll_every` until it was seen to move."""

    def __init__(self) -> None:
        self.seen: tuple[int, float] | None = None  # (position, when: time.monotonic())

    def next(self, position: int, now: float) -> float:
        before, self.seen = self.seen, (position, now)
        if before is None or position >= before[0] or now <= before[1]:
            return poll_every(position)
        a_second = (before[0] - position) / (now - before[1])  # places the queue moves
        to_head = (position - 1) / a_second
        paced = min(POLL_SECONDS * POLL_MOST, max(POLL_SECONDS, to_head / 2))
        # Never slower than by place: a slow queue's head, or a selector a freed device
        # matches far back (offers go to the oldest ticket that matches, not to the head).
        return min(paced, poll_every(position))


async def acquire(
    pools: PoolClient,
    name: str,
    *,
    kind: str | None = None,
    selector: Mapping[str, str] | str | Sequence[str] | None = None,
    duration: timedelta | float | str | None = None,
    wait: timedelta | float | str | None = None,
    holder: str | None = None,
    on_progress: LeaseProgress | None = None,
) -> Lease:
    """A device of the pool, granted now or within `wait` (`LeaseNotGranted` if not)."""
    request = lease_request(selector=selector, duration=duration, wait=wait, holder=holder)
    validate_name(name)
    kind_name = pools._side(kind).kind.name
    handle = await pools._running(name, kind)
    deadline = time.monotonic() + request.wait
    while True:
        # A new id for each ask: an id the pool knows changes nothing when sent again.
        ask = LeaseAsk(ask=f"ask-{uuid.uuid4().hex}", **request.model_dump())
        waited = _Waited(pools, handle, name, kind, ask.ask, deadline, on_progress)
        waited.request = ask
        try:
            await _lease_calls.signal(
                pools,
                handle,
                name,
                kind,
                SIGNAL_LEASE_ASK,
                ask,
                until=deadline,  # the lease's own wait is its budget
                on_sent=waited.sent,
            )
        except TemporalBusy:
            raise  # every try turned away: none arrived, nothing to give back
        except BaseException:
            if waited.tried:  # it may have arrived: what it made is given back
                await waited.give_up()
            raise
        granted = await waited.granted()
        if granted is not None:
            return granted_lease(pools, granted, kind_name, request.duration, waited.asked)
        # The ask ended with time left (its lease ended before its holder heard of it, the
        # pool forgot it): asked again, at the end of the queue, for what is left of the wait.
        left = deadline - time.monotonic()
        if left <= 0:
            raise waited.not_granted()
        request = request.model_copy(update={"wait": left})


class _Waited:
    """One ask waited for: its ticket polled (a query: no history) until it is granted or
    ended, and given back when given up."""

    def __init__(
        self,
        pools: PoolClient,
        handle: WorkflowHandle[Any, Any],
        name: str,
        kind: str | None,
        ticket: str,
        deadline: float,
        on_progress: LeaseProgress | None,
    ) -> None:
        self.pools, self.handle, self.name, self.kind = pools, handle, name, kind
        self.ticket, self.deadline, self.on_progress = ticket, deadline, on_progress
        self.said = "no ready device matching the selector came free"
        self.over = False  # the ask ended at the pool: nothing to give back
        self.tried = False  # the ask was sent (it may have arrived)
        self.unanswered: str | None = None  # why the last poll went unanswered
        # However short the wait, the ask's outcome is read for this long: polls turned
        # away under load must not pass for "none free" while the pool granted one.
        self.answer_by = time.monotonic() + ANSWER_SECONDS
        self.looked = time.monotonic()  # the pool's queue is looked at again after this
        self.queue: _lease_watch.Look | None = None  # this client's look at it (`granted`)
        # Our clock around the grant: from the ask sent, or the last poll that saw it
        # waiting, to the poll that saw it granted (`granted_lease`: the pool's clock).
        self.asked = RoundTrip()
        self.request: LeaseAsk | None = None  # the ask (sent again: the claim of an offer)
        self.seen = False  # the pool answered the ask at least once (it knows it)
        self.claimed = ""  # the offer this ask claimed (sent again for it)
        self.pace = PollPace()

    def sent(self) -> None:
        self.tried = True
        self.asked.start()

    def not_granted(self) -> LeaseNotGranted:
        said = self.said
        if self.unanswered is not None:
            said = f"{said} (the last poll went unanswered: {self.unanswered})"
        return LeaseNotGranted(f"{self.pools._side(self.kind).shown(self.name)}: {said}")

    async def granted(self) -> Granted | None:
        """The lease granted; None when the ask ended otherwise with time left."""
        try:
            with _lease_watch.waiting(self.pools, self.handle) as self.queue:
                return await self._poll()
        except BaseException:
            # Given up (the wait ran out, a cancel, an error): the place in the queue, or
            # the device granted meanwhile, goes to the next one now rather than at its
            # deadline or idle timeout.
            if not self.over:
                await self.give_up()
            raise

    async def give_up(self) -> None:
        """Give the ask back (its ticket, or the lease it was granted meanwhile). Shielded:
        a second cancel must not leave it held (and is not swallowed); bounded: with no
        Temporal to take it, the ticket ends at its deadline and a lease at its idle
        timeout. A signal that arrives after this one (a cut-short send the server still
        took) is such a lease."""
        with contextlib.suppress(DevicePoolError, TimeoutError):
            await asyncio.wait_for(
                asyncio.shield(give_back(self.pools, self.name, self.ticket, kind=self.kind)),
                DROP_SECONDS,
            )

    async def _poll(self) -> Granted | None:
        while True:
            polled = datetime.now(UTC)
            answer = self._known(await self._ask())
            now = time.monotonic()
            if answer is not None and answer.granted is not None and not answer.offered:
                self.asked.done()
                return answer.granted  # granted at once, or an offer claimed
            if answer is not None and answer.granted is not None:
                if answer.granted.lease != self.claimed:  # offered: claimed, then read again
                    await self._claim(answer.granted.lease)
                    continue
                # Claimed, and offered still: read again at the next poll.
            every = POLL_SECONDS
            if answer is not None and answer.position is not None:
                self.asked.sent = polled  # granted after this poll was read, if at all
                every = self.pace.next(answer.position, now)
                if self.on_progress is not None:
                    self.on_progress(
                        {
                            "ticket": self.ticket,
                            "position": answer.position,
                            "ahead": answer.position - 1,
                        }
                    )
            elif answer is not None and answer.ended is not None:
                self._ended(answer)
                return None
            # A claim sent is a device on its way: the wait's end no longer applies, only
            # how long its outcome is read while the polls go unanswered.
            if now >= self.deadline and not self.claimed:
                if answer is not None or now >= self.answer_by:
                    raise self.not_granted()
            elif self.claimed and answer is None and now >= self.answer_by:
                raise self.not_granted()
            pause = max(self.deadline, self.answer_by) - now
            await asyncio.sleep(min(every, max(0.0, pause)))

    def _known(self, answer: LeaseAnswer | None) -> LeaseAnswer | None:
        """The answer, or None while the pool does not know the ask yet: a query sees every
        signal sent before it, so a pool that never knew it ignores it (a worker on a build
        without `lease_ask`): said after `ANSWER_SECONDS`, never asked again in a loop."""
        if answer is None or answer.ended != LEASE_GONE or self.seen:
            self.seen = self.seen or answer is not None
            return answer
        if time.monotonic() >= self.answer_by:
            raise LeaseRefused(
                f"{self.pools._side(self.kind).shown(self.name)}: the pool did not take the"
                f" ask {self.ticket} in {ANSWER_SECONDS:.0f}s (is its worker a build without"
                " lease_ask? devicepool upgrade)"
            )
        self.unanswered = f"the pool does not know the ask {self.ticket} yet"
        return None

    async def _claim(self, lease: str) -> None:
        """Claim the offer `lease` to the ask's ticket by sending the ask again (the pool
        claims it for an asker that read it; an asker that died is not waited for past 30 s),
        within `CLAIM_SEND_SECONDS` (Temporal turning it away). Whether it took is read next:
        the lease claimed (its end as the claim set it), or the offer's end (it came too late:
        `Unclaimed`, the device lost, the pool deleted), never the offer taken for a lease."""
        assert self.request is not None
        self.asked.start()
        sent = time.monotonic()
        try:
            await _lease_calls.signal(
                self.pools,
                self.handle,
                self.name,
                self.kind,
                SIGNAL_LEASE_ASK,
                self.request,
                until=sent + CLAIM_SEND_SECONDS,
            )
        except TemporalBusy as busy:  # not sent: claimed again at the next read, if offered
            self.unanswered = str(busy)
            return
        self.claimed = lease
        self.answer_by = max(self.answer_by, time.monotonic() + CLAIMED_READ_SECONDS)

    def _ended(self, answer: LeaseAnswer) -> None:
        """An ask that ended at the pool: refused (no device can ever match, the queue is
        full, the pool is deleted), not granted (none free, or its wait ran out), or
        (returns) asked again by the caller while the wait lasts."""
        self.said = answer.message or f"ticket {self.ticket} ended: {answer.ended}"
        self.over = True
        if answer.ended in (_REFUSED, _POOL_DELETED):
            raise LeaseRefused(f"{self.pools._side(self.kind).shown(self.name)}: {self.said}")
        if answer.ended in (_TIMED_OUT, _NOT_GRANTED):
            raise self.not_granted()

    async def _ask(self) -> LeaseAnswer | None:
        """The ask's state; None when the pool could not answer now (no worker in time,
        a worker restarting, Temporal's query buffer full): asked again at the next poll.
        Its place read in the look at the queue this client's waiters share, when several
        wait; asked of the ticket itself otherwise, and once it left the queue."""
        if self.queue is None or not self.queue.shared:
            return await self._ask_ticket()
        seen = await _lease_watch.look(
            self.pools, self.handle, self.name, self.kind, after=self.looked
        )
        self.looked = seen.at
        if seen.view is None:
            self.unanswered = seen.why
            return None
        place = _lease_watch.place_in(seen.view, self.ticket)
        if place is not None:  # still waiting
            self.unanswered = None
            return LeaseAnswer(ticket=self.ticket, position=place)
        return await self._ask_ticket()  # granted, or ended: how

    async def _ask_ticket(self) -> LeaseAnswer | None:
        """The ask's own state (`lease_ticket`); None when the pool could not answer."""
        try:
            answer = await _lease_calls.query(
                self.pools,
                self.handle,
                self.name,
                self.kind,
                QUERY_LEASE_TICKET,
                TicketRef(ticket=self.ticket),
                result_type=LeaseAnswer,
            )
        except Unanswered as err:
            self.unanswered = err.why
            return None
        self.unanswered = None
        return answer if isinstance(answer, LeaseAnswer) else LeaseAnswer.model_validate(answer)


async def give_back(
    pools: PoolClient,
    name: str,
    lease: Lease | str,
    *,
    replace: bool = False,
    kind: str | None = None,
) -> None:
    """Give the lease (or the ask, whatever it made) back by signal: nothing answered, and
    never turned away for Temporal's limit on updates in flight. Sent twice, or for what
    ended already, it changes nothing."""
    kind = kind or (lease.kind if isinstance(lease, Lease) else None)
    handle = _handle(pools, name, kind)
    request = ReleaseRequest(lease=_lease_id(lease), replace=replace)
    await _lease_calls.signal(pools, handle, name, kind, SIGNAL_LEASE_GIVE_BACK, request)


async def release(
    pools: PoolClient,
    name: str,
    lease: Lease | str,
    *,
    replace: bool = False,
    kind: str | None = None,
) -> ReleaseAnswer:
    """Give the lease back (or drop a ticket). Idempotent: a lease that ended already
    answers how it ended (`reason`); `LeaseGone` only for an id the pool does not know."""
    kind = kind or (lease.kind if isinstance(lease, Lease) else None)
    some_id = _lease_id(lease)
    handle = _handle(pools, name, kind)
    request = ReleaseRequest(lease=some_id, replace=replace)
    answer: ReleaseAnswer = await _lease_calls.update(
        pools, handle, name, kind, UPDATE_RELEASE, request, result_type=ReleaseAnswer
    )
    return answer


async def or_given_back(pools: PoolClient, name: str, lease: Lease, step: Awaitable[T]) -> T:
    """`step`'s answer, while `lease` is held and no one was told its id yet (the CLI's
    `lease -o json` reading its connect info before it prints it): a cancel meanwhile (a
    Ctrl-C) gives the lease back, shielded and bounded, and is raised as the cancel."""
    try:
        return await step
    except BaseException as err:
        cancel = isinstance(err, asyncio.CancelledError)
        if not (cancel or _lease_calls.cancelling()):
            raise
        with contextlib.suppress(DevicePoolError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(give_back(pools, name, lease)), DROP_SECONDS)
        if cancel:
            raise
        raise asyncio.CancelledError() from err  # the SDK's word for it (`cancelling`)


# ---------------------------------------------------------------- the context manager


@contextlib.asynccontextmanager
async def held(
    pools: PoolClient,
    name: str,
    *,
    kind: str | None = None,
    selector: Mapping[str, str] | str | Sequence[str] | None = None,
    duration: timedelta | float | str | None = None,
    wait: timedelta | float | str | None = None,
    holder: str | None = None,
) -> AsyncIterator[Lease]:
    """`PoolClient.lease`: acquire, renew in the background, give back on the way out
    (an exception or a cancel too)."""
    lease = await acquire(
        pools, name, kind=kind, selector=selector, duration=duration, wait=wait, holder=holder
    )
    keeper = Keeper(pools, name, lease)
    if lease._clock is not None:
        keeper.offset = lease._clock
    renewing = asyncio.create_task(keeper.run(), name=f"renew lease {lease.id}")
    try:
        yield lease
    except BaseException as err:
        await _stop(renewing)
        failed = await _release_on_error(pools, name, lease)
        if failed is not None:
            err.add_note(f"and the lease was not released: {failed} (it ends at its idle timeout)")
        raise
    await _stop(renewing)
    await asyncio.shield(give_back(pools, name, lease))  # a cancel now must not leave it held


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel the renewals and let them end (a cancel of our own still reaches us)."""
    task.cancel()
    await asyncio.wait([task])


async def _release_on_error(pools: PoolClient, name: str, lease: Lease) -> DevicePoolError | None:
    """Give back while an exception (or a cancel) is on its way out: its failure is returned,
    not raised in the exception's place (a second cancel still is: it goes on, shielded)."""
    try:
        await asyncio.shield(give_back(pools, name, lease))
    except DevicePoolError as err:
        return err
    return None
