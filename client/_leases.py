"""Leases from the user's side: `PoolClient.lease`, `acquire_lease`, `renew_lease`,
`release_lease` and `leases`, over one pool's signals, updates and queries (docs/leases.md).

A lease is asked for by signal (`lease_ask`, under an id of the client's own) and its
outcome read with the `lease_ticket` query: granted, waiting (looked up every
`POLL_SECONDS`: `_lease_wait`; in the pool's queue when several of a client's asks wait:
`_lease_watch`), or ended (refused, none free). Neither takes one of the 10 updates
Temporal lets a workflow have in flight, so any number of clients can ask at once
(bench/leases.py).
Giving up (the wait ran out, a cancel, an ask cut short in flight) gives the ask back by
signal (`lease_give_back`): its ticket, or the device granted meanwhile. The context
manager renews in the background (`_lease_keeper`, the `renew` update), to keep the idle
clock, never past the lease's end, and gives the lease back by signal on the way out;
`release_lease` is the `release` update (it answers how the lease ended). What is checked
before any call: `_lease_input`; how calls go out under load: `_lease_calls`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from devicepool.api.names import SIGNAL_LEASE_ASK, SIGNAL_LEASE_GIVE_BACK, UPDATE_RELEASE
from devicepool.client import _lease_calls, _lease_wait
from devicepool.client._lease_calls import handle_of as _handle
from devicepool.client._lease_calls import lease_errors
from devicepool.client._lease_input import (
    Lease,
    default_holder,
    granted_lease,
    lease_request,
    parse_selector,
    seconds_of,
)
from devicepool.client._lease_input import lease_id as _lease_id
from devicepool.client._lease_keeper import Keeper, renew, renew_every
from devicepool.client._lease_wait import LeaseProgress, Waited
from devicepool.client._lease_watch import view
from devicepool.client._validation import validate_name
from devicepool.client.errors import DevicePoolError, TemporalBusy
from devicepool.workflows.reconciler.lease_messages import LeaseAsk, ReleaseAnswer, ReleaseRequest

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = [
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

T = TypeVar("T")


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
        given_back = functools.partial(give_back, pools, name, ask.ask, kind=kind)
        waited = Waited(pools, handle, name, kind, ask.ask, deadline, on_progress, given_back)
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
            await asyncio.wait_for(
                asyncio.shield(give_back(pools, name, lease)), _lease_wait.DROP_SECONDS
            )
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
