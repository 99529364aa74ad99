"""Running a provider call inside an activity: liveness heartbeats, and finishing through a cancel.

`heartbeating()` beats every `HEARTBEAT_EVERY` while the body waits on the provider, so
an attempt that died with its worker is retried elsewhere within `HEARTBEAT_TIMEOUT` (and
so a cancel, which Temporal delivers on a heartbeat's answer, is seen). A create runs in
`finish_even_if_cancelled`: cancellable while it waits in this process, finished through
a cancel once the HTTP clients mark a changing request going out (`point_of_no_return`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from temporalio import activity

from devicepool.activities.models import HEARTBEAT_EVERY

__all__ = ["finish_even_if_cancelled", "heartbeating", "point_of_no_return"]

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
    """One `finish_even_if_cancelled` call: whether it has sent a request yet."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent = False


# The create this task runs for (`finish_even_if_cancelled`); None: none.
_CREATE: ContextVar[_Create | None] = ContextVar("devicepool_create", default=None)


def point_of_no_return() -> None:
    """A request that may change what the provider holds goes out now (called by the HTTP
    clients right before they send one; outside a create, nothing).

    Up to here a create has only waited in this process (a lock, a pacer's turn) or
    read: a cancel ends it. From here it may land: a cancel lets it finish."""
    create = _CREATE.get()
    if create is not None:
        create.sent = True


async def finish_even_if_cancelled(call: Coroutine[Any, Any, T]) -> T:
    """Await a provider call to its end, heartbeating, even if the activity is cancelled
    once the call has sent a request that changes the provider (`point_of_no_return`).

    For creates: a pool being deleted cancels its batches and then sweeps the
    provider. A create already on its way must land before that sweep (or not
    at all), never after it as an orphan; so a cancel lets it finish, beating
    (a silent attempt is timed out, its batch done before it lands), and the
    activity completes with its device for the batch to report. A create still
    waiting in this process has sent nothing: a cancel ends it there, and the
    activity ends cancelled, so nothing of it reaches the provider after the cancel.
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
                if not (create.sent or task.done()):
                    task.cancel()  # still waiting here: the cancel goes in too
                    await asyncio.wait([task])
                    if task.cancelled():
                        raise
                # Handled: the call goes on to its end (or has ended), and nothing after it
                # takes this task for one still being cancelled (`heartbeating()` asks).
                if current is not None:
                    current.uncancel()
                if task.done():
                    return task.result()
