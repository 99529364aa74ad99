"""Running a provider call inside an activity: liveness heartbeats, and finishing through a cancel.

`heartbeating()` beats every `HEARTBEAT_EVERY` while the body waits on the provider, so
an attempt that died with its worker is retried elsewhere within `HEARTBEAT_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from temporalio import activity

from devicepool.activities.models import HEARTBEAT_EVERY

__all__ = ["finish_even_if_cancelled", "heartbeating"]

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


async def finish_even_if_cancelled(call: Coroutine[Any, Any, T]) -> T:
    """Await a provider call to its end, heartbeating, even if the activity is cancelled.

    For creates: a pool being deleted cancels its batches and then sweeps the
    provider. A create already on its way must land before that sweep (or not
    at all), never after it as an orphan; so a cancel lets it finish, and the
    activity completes with its device for the batch to report.
    """
    task = asyncio.ensure_future(call)
    try:
        async with heartbeating():
            return await asyncio.shield(task)
    except asyncio.CancelledError:
        # Handled: the call goes on to its end, and nothing after it takes this
        # task for one still being cancelled (`heartbeating()` asks).
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
        return await task
