"""An ask waited for (`_leases.acquire`): its outcome read until the pool grants or ends it,
an offer claimed by sending the ask again, and the ask given back (`_leases.give_back`, the
`lease_give_back` signal) when the wait is given up.

Looked up every `POLL_SECONDS` near the head of the queue, less often further back
(`PollPace`); in the pool's queue when several of a client's asks wait (`_lease_watch`), with
the `lease_ticket` query otherwise. Polls turned away under load never pass for "none free":
the outcome is read for `ANSWER_SECONDS` at least, and a claim's for `CLAIMED_READ_SECONDS`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowHandle

from devicepool.api.names import QUERY_LEASE_TICKET, SIGNAL_LEASE_ASK
from devicepool.client import _lease_calls, _lease_watch
from devicepool.client._lease_calls import Unanswered
from devicepool.client._lease_input import RoundTrip
from devicepool.client.errors import DevicePoolError, LeaseNotGranted, LeaseRefused, TemporalBusy
from devicepool.workflows.reconciler.lease_checks import LEASE_GONE
from devicepool.workflows.reconciler.lease_messages import Granted, LeaseAnswer, LeaseAsk, TicketRef

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = [
    "ANSWER_SECONDS",
    "CLAIMED_READ_SECONDS",
    "CLAIM_SEND_SECONDS",
    "DROP_SECONDS",
    "POLL_SECONDS",
    "LeaseProgress",
    "PollPace",
    "Waited",
    "poll_every",
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


class Waited:
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
        give_back: Callable[[], Awaitable[None]],
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
        self.give_back = give_back  # the ask's id given back (`_leases.give_back`)

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
            await asyncio.wait_for(asyncio.shield(self.give_back()), DROP_SECONDS)

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
