"""Running a provider call inside an activity: liveness heartbeats, and finishing through a cancel.

`heartbeating()` beats every `HEARTBEAT_EVERY` while the body waits on the provider, so
an attempt that died with its worker is retried elsewhere within `HEARTBEAT_TIMEOUT` (and
so a cancel, which Temporal delivers on a heartbeat's answer, is seen). A create runs in
`finish_even_if_cancelled`: it goes on through a cancel, its waits in this process and its
reads too; a cancel that came before its first write (which the HTTP clients mark,
`point_of_no_return`) ends it at the next of its waits that lets it go once its slot's
lookup found nothing (`end_if_cancelled_unsent`: after the lookup, entering a claim's lock,
before and as a write's pacer turn comes), and in any case refuses that write: cancelled,
unsent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from temporalio import activity

from devicepool.activities.models import HEARTBEAT_EVERY

__all__ = [
    "end_if_cancelled_unsent",
    "finish_even_if_cancelled",
    "heartbeating",
    "point_of_no_return",
]

T = TypeVar("T")


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs (liveness, not progress)."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY.total_seconds())

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # The beat's own end, unless this task was cancelled too (while it waited
            # for the beat to stop, or in the body): then the cancel goes on out.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise


class _Create:
    """One `finish_even_if_cancelled` call: whether it has sent a write yet, and whether
    its activity was cancelled (from then, a first write is refused)."""

    __slots__ = ("cancelled", "sent")

    def __init__(self) -> None:
        self.sent = False
        self.cancelled = False


# The create this task runs for (`finish_even_if_cancelled`); None: none.
_CREATE: ContextVar[_Create | None] = ContextVar("devicepool_create", default=None)


def end_if_cancelled_unsent() -> None:
    """End the create here (`CancelledError`) if its activity was cancelled and it has sent
    no write yet (outside a create, nothing).

    Called by an adapter's create once its slot's lookup found nothing of an earlier
    attempt (a cancelled create has nothing left to learn), again as it enters a claim's
    lock, before the reserve's listing (BitBrowser's claim lock, GeeLark's reserve lock),
    and by the HTTP clients for a write before and as its pacer turn or request budget
    comes (a refused turn passes on unspaced, GeeLark's budget counts nothing, and the
    send-by is checked after it). So a create cancelled while queued at one of these waits
    ends as that wait lets it go (nothing wakes it at the cancel: it keeps its place until
    its lock or turn comes; a BitBrowser turn it refuses goes to its pool's next, R32),
    not at its first write (R30 #1, R31 #1: each claim refused there made the next create
    list again, each refused add took a turn, and one still running past its attempt's
    20 s was timed out or refused by its GeeLark send-by, counted a failed create). A read
    already begun finishes: a retry's lookup must go on (R28)."""
    create = _CREATE.get()
    if create is not None and create.cancelled and not create.sent:
        raise asyncio.CancelledError("the create was cancelled before its first write")


def point_of_no_return() -> None:
    """A request that may change what the provider holds goes out now (called by the HTTP
    clients right before they send one; outside a create, nothing).

    Up to here a create has only waited in this process (a lock, a pacer's turn) or
    read: if its activity was cancelled, this first write is refused (`CancelledError`,
    raised here, unsent) and the create ends cancelled. From here it may land: a cancel
    lets it finish, its later writes included."""
    end_if_cancelled_unsent()
    create = _CREATE.get()
    if create is not None:
        create.sent = True


async def finish_even_if_cancelled(call: Coroutine[Any, Any, T]) -> T:
    """Await a provider call to its end, heartbeating, even if the activity is cancelled;
    a cancel that comes before the call's first write (`point_of_no_return`) refuses it.

    For creates: a pool being deleted cancels its batches and then sweeps the
    provider. A create already on its way must land before that sweep (or not
    at all), never after it as an orphan; so a cancel lets it finish, beating
    (a silent attempt is timed out, its batch done before it lands), and the
    activity completes with its device for the batch to report. A create that has
    not written yet goes on too, through its waits in this process and its reads: a
    retry waiting for its slot's lock, held by an earlier attempt of the slot that may
    have sent its add, must not end before that one (whose device it then finds and
    returns). Once that lookup found nothing it ends at its next wait that lets it go
    (`end_if_cancelled_unsent`), and its first write raises instead of going out in
    any case; the activity ends
    cancelled: nothing of a create unsent at its cancel is sent after it. The refusal is this
    process's, so it holds past the attempt's timeout at the server too.
    """
    create = _Create()
    token = _CREATE.set(create)
    try:
        task = asyncio.ensure_future(call)  # its context, copied now, holds `create`
    finally:
        _CREATE.reset(token)
    async with heartbeating():
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is None or not current.cancelling():
                    raise  # the call itself ended cancelled: its write refused
                create.cancelled = True
                # Handled: the call goes on to its end, and nothing after it takes this
                # task for one still being cancelled (`heartbeating()` asks).
                current.uncancel()
