"""Leases from the user's side: `PoolClient.lease`, `acquire_lease`, `renew_lease`,
`release_lease` and `leases`, over one pool's updates and queries (docs/leases.md).

A `lease` update grants at once or answers a ticket; a waiting ticket is looked up every
`POLL_SECONDS` in the pool's queue (the `leases` query, one for all of a client's waiters:
`_lease_watch`; no history, no update) and claimed with `lease_claim` once the pool offers
it a device. Giving up (the wait ran out, a cancel) drops the ticket, or releases the
device offered meanwhile; a `lease` cut short in flight is sent again under its id and
what it made given back (`_take_back`). The context manager renews in the background (`_lease_keeper`),
to keep the idle clock, never past the lease's end. What is checked before any call:
`_lease_input`; how calls go out under load: `_lease_calls`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import WorkflowHandle

from devicepool.api.names import (
    QUERY_LEASE_TICKET,
    UPDATE_LEASE,
    UPDATE_LEASE_CLAIM,
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
from devicepool.client._temporal_errors import NoWorkerInTime
from devicepool.client._validation import validate_name
from devicepool.client.errors import (
    DevicePoolError,
    LeaseGone,
    LeaseNotGranted,
    LeaseRefused,
)
from devicepool.workflows.reconciler.lease_messages import (
    Granted,
    LeaseAnswer,
    LeaseRequest,
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

# How often a queued ticket is looked up (a query: no history), well inside the claim window.
POLL_SECONDS = 1.0
# A ticket given up is dropped within this, or left to end at its deadline (no worker answers).
DROP_SECONDS = 10.0

T = TypeVar("T")

# Called with each place in the queue a wait sees: {"ticket", "position", "ahead"}.
LeaseProgress = Callable[[dict[str, Any]], None]

# How a ticket can end while waited for, and what the wait then does.
_TIMED_OUT, _POOL_DELETED = "TimedOut", "PoolDeleted"


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
        # Tried again while it is turned away, as long as the wait lasts; one update id for
        # all the tries: a retry answers what the first try made, never a second grant.
        update_id = f"{UPDATE_LEASE}-{uuid.uuid4()}"
        asked = RoundTrip()
        try:
            answer = await _lease_calls.update(
                pools,
                handle,
                name,
                kind,
                UPDATE_LEASE,
                request,
                until=deadline,
                update_id=update_id,
                on_sent=asked.start,
            )
        except (asyncio.CancelledError, NoWorkerInTime) as err:
            if asked.tried:  # applied, maybe: what it made is given back
                await _take_back(pools, handle, name, kind, request, update_id, err)
            raise
        asked.done()
        if answer.granted is not None:
            return granted_lease(pools, answer.granted, kind_name, request.duration, asked)
        if answer.ticket is None:  # a worker's handler run without its validator: not granted
            raise LeaseNotGranted(f"{pools._side(kind).shown(name)}: {answer.message}")
        waited = _Waited(pools, handle, name, kind, answer.ticket, deadline, on_progress)
        granted = await waited.granted()
        if granted is not None:
            return granted_lease(pools, granted, kind_name, request.duration, waited.asked)
        # The ticket ended with time left (its offer went unclaimed, its device was lost):
        # in the queue again, at its end, for what is left of the wait.
        left = deadline - time.monotonic()
        if left <= 0:
            raise waited.not_granted()
        request = request.model_copy(update={"wait": left})


async def _take_back(
    pools: PoolClient,
    handle: WorkflowHandle[Any, Any],
    name: str,
    kind: str | None,
    request: LeaseRequest,
    update_id: str,
    err: BaseException,
) -> None:
    """A `lease` cut short (a cancel, or no answer within its RPC timeout) may have been
    applied all the same, or be applied once a worker takes it: sent again under its id, it
    answers what it made (or makes it now), which is given back: a device nobody knows the
    lease of is held by nobody. Shielded: a second cancel must not leave it held; bounded
    (`DROP_SECONDS`): with no worker, what it may make meanwhile ends at its idle timeout."""

    async def undo() -> None:
        try:
            answer = await _lease_calls.update(
                pools,
                handle,
                name,
                kind,
                UPDATE_LEASE,
                request,
                until=time.monotonic() + DROP_SECONDS,
                update_id=update_id,
            )
        except (LeaseNotGranted, LeaseRefused):
            return  # nothing made
        if answer.granted is not None:
            await release(pools, name, answer.granted.lease, kind=kind)
        elif answer.ticket is not None:
            await _Waited(pools, handle, name, kind, answer.ticket, 0.0, None)._drop()

    try:
        await asyncio.wait_for(asyncio.shield(undo()), DROP_SECONDS)
    except (DevicePoolError, TimeoutError) as failed:
        said = str(failed) or f"no answer within {DROP_SECONDS:.0f}s"
        err.add_note(
            f"a lease it may have made under holder {request.holder!r} was not given back:"
            f" {said} (it ends at its idle timeout)"
        )


class _Waited:
    """One ticket waited for: polled, claimed when offered, dropped when given up."""

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
        self.over = False  # the ticket ended at the pool: nothing to drop
        self.unanswered: str | None = None  # why the last poll went unanswered
        self.looked = time.monotonic()  # the pool's queue is looked at again after this
        self.queue: _lease_watch.Look | None = None  # this client's look at it (`granted`)
        self.asked = RoundTrip()  # the claim's round trip (`granted_lease`)

    def not_granted(self) -> LeaseNotGranted:
        said = self.said
        if self.unanswered is not None:
            said = f"{said} (the last poll went unanswered: {self.unanswered})"
        return LeaseNotGranted(f"{self.pools._side(self.kind).shown(self.name)}: {said}")

    async def granted(self) -> Granted | None:
        """The lease claimed; None when the ticket ended otherwise with time left."""
        try:
            with _lease_watch.waiting(self.pools, self.handle) as self.queue:
                return await self._poll()
        except BaseException:
            # Given up (the wait ran out, a cancel, an error): the place in the queue, or
            # the device offered meanwhile, goes to the next one now rather than at its
            # deadline. Shielded: a second cancel must not leave it held (and is not
            # swallowed); bounded: with no worker to take it, it ends at its deadline anyway.
            if not self.over:
                with contextlib.suppress(DevicePoolError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._drop()), DROP_SECONDS)
            raise

    async def _poll(self) -> Granted | None:
        while True:
            answer = await self._ask()
            if answer is not None and answer.granted is not None:  # offered: claim it now
                claimed = await self._claim()
                if claimed is not None:
                    return claimed
                # Withdrawn meanwhile: the next poll says why.
            elif answer is not None and answer.position is not None:
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
            if time.monotonic() >= self.deadline:
                raise self.not_granted()
            await asyncio.sleep(min(POLL_SECONDS, max(0.0, self.deadline - time.monotonic())))

    def _ended(self, answer: LeaseAnswer) -> None:
        """A ticket that ended at the pool: refused (deleted), not granted (its wait ran out),
        or (returns) asked again by the caller while the wait lasts."""
        self.said = answer.message or f"ticket {self.ticket} ended: {answer.ended}"
        self.over = True
        if answer.ended == _POOL_DELETED:
            raise LeaseRefused(f"{self.pools._side(self.kind).shown(self.name)}: {self.said}")
        if answer.ended == _TIMED_OUT:
            raise self.not_granted()

    async def _ask(self) -> LeaseAnswer | None:
        """The ticket's state; None when the pool could not answer now (no worker in time,
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
        return await self._ask_ticket()  # offered (claim it), or ended: how

    async def _ask_ticket(self) -> LeaseAnswer | None:
        """The ticket's own state (`lease_ticket`); None when the pool could not answer."""
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

    async def _claim(self) -> Granted | None:
        self.asked = RoundTrip()
        try:
            answer = await _lease_calls.update(
                self.pools,
                self.handle,
                self.name,
                self.kind,
                UPDATE_LEASE_CLAIM,
                TicketRef(ticket=self.ticket),
                on_sent=self.asked.start,
            )
        except LeaseGone:
            return None
        self.asked.done()
        return answer.granted

    async def _drop(self) -> None:
        """Release the ticket; if the pool offered it a device meanwhile (the ticket is a
        lease now), release that lease: the pool answers a ticket claimed (a claim cut
        short after the pool applied it) as no lease (`LeaseGone`, an error or a reason)."""
        with contextlib.suppress(LeaseGone):
            dropped = await release(self.pools, self.name, self.ticket, kind=self.kind)
            if dropped.reason != LEASE_GONE:
                return
        answer = await self._ask_ticket()
        if answer is not None and answer.granted is not None:
            await release(self.pools, self.name, answer.granted.lease, kind=self.kind)


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
            await asyncio.wait_for(asyncio.shield(release(pools, name, lease)), DROP_SECONDS)
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
    """`PoolClient.lease`: acquire, renew in the background, release on the way out
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
    with contextlib.suppress(LeaseGone):  # ended already (and forgotten): nothing held
        await asyncio.shield(release(pools, name, lease))  # a cancel now must not leave it held


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel the renewals and let them end (a cancel of our own still reaches us)."""
    task.cancel()
    await asyncio.wait([task])


async def _release_on_error(pools: PoolClient, name: str, lease: Lease) -> DevicePoolError | None:
    """Release while an exception (or a cancel) is on its way out: its failure is returned, not
    raised in the exception's place (a second cancel still is: the release goes on, shielded)."""
    try:
        await asyncio.shield(release(pools, name, lease))
    except LeaseGone:
        return None
    except DevicePoolError as err:
        return err
    return None
