"""Waiting on a condition, not on a clock: one loop, one failure message.

`eventually` (async) and `wait_until` (sync) call `check` until it returns
something truthy and return that; past `timeout` seconds they raise
AssertionError("timed out after Ns waiting for WHAT (last: ...)") with the
last value seen. For `eventually`, exceptions of the types in `retry_on` count
as a falsy answer (kept as the last value); any other exception ends the wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


def _timed_out(timeout: float, what: str, last: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 30,
    what: str = "condition",
    every: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Await `check()` every `every` s until it is truthy (and return it) or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except retry_on as err:
            last = err
        else:
            if last:
                return last
        await asyncio.sleep(every)
    raise _timed_out(timeout, what, last)


def wait_until(
    check: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    every: float = 0.5,
) -> Any:
    """`eventually` for synchronous code: call `check()` every `every` s (blocking)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise _timed_out(timeout, what, last)
