"""Where the pool waits for its devices to change: one long `watch_devices` activity,
held by `DeviceWatch` and ordered against the pass's own listings, for one run.
Why not a timer: docs/pools.md, 'Converging, scaling, teardown'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from devicepool.activities.models import WatchDevicesResult

__all__ = ["DeviceWatch"]


class DeviceWatch:
    """The pool's running watch, if any, and the order of its listings: each takes a number
    when it starts (`begin`); one that began before the newest applied one is dropped
    (`accept`): docs/pools.md, 'Converging, scaling, teardown'."""

    def __init__(self) -> None:
        self._started = self._applied = 0
        self._task: asyncio.Task[WatchDevicesResult] | None = None
        self._number = 0  # the running watch's listing number

    def begin(self) -> int:
        self._started += 1
        return self._started

    def accept(self, number: int) -> bool:
        """Whether the listing that began as `number` may be applied (and is, from now on)."""
        if number <= self._applied:
            return False
        self._applied = number
        return True

    def ensure(self, start: Callable[[], Awaitable[WatchDevicesResult]]) -> None:
        if self._task is None:
            self._number = self.begin()
            self._task = asyncio.ensure_future(start())

    def answered(self) -> bool:
        return self._task is not None and self._task.done()

    def answer(self) -> tuple[WatchDevicesResult, bool] | None:
        """The answer of a watch that is done (then forgotten), and whether its listing is
        still news (none began after it); None if none is done. Raises what it failed with."""
        task = self._task
        if task is None or not task.done():
            return None
        self._task = None
        return task.result(), self.accept(self._number)

    def drop(self) -> None:
        """Cancel the running watch without awaiting it (its outcome is retrieved, unlogged)."""
        if self._task is not None:
            self._task.cancel()
            self._task.add_done_callback(lambda task: task.cancelled() or task.exception())
            self._task = None
