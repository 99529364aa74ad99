"""`PhonePacer`: at most one cloud-phone call per interval, for every caller that shares it.

The vendor allows 1 cloud-phone request a second (all `/phone/*` calls of the
client; what happens past it is not documented). One pacer per BitBrowser
*account* in a process, shared by every `CloudPhones` of that account (every
node logged into it), spaces the calls' starts at least `interval` apart, in
the order they asked (an `asyncio.Lock` is first come, first served). The
default interval is 1.1 s: the budget is counted where the answers are made,
and a call's way there is not the same length each time.

It is a process-local guard, not the account's budget: two worker processes
with a pacer each make two calls a second. Sharing the budget across workers
and pools (fairly, replacements first) is the ledger's job (issue 30), which
hands each call its turn; this class only makes sure one process never
exceeds it on its own.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

__all__ = ["DEFAULT_PHONE_INTERVAL", "PhonePacer"]

DEFAULT_PHONE_INTERVAL = 1.1


class PhonePacer:
    """Spaces call starts `interval` seconds apart. Asyncio-safe; share it per account."""

    def __init__(
        self,
        *,
        interval: float = DEFAULT_PHONE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not interval > 0 or not math.isfinite(interval):
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        self.interval = interval
        self._clock = clock
        self._sleep = sleep
        self._lock = asyncio.Lock()
        self._next = -math.inf
        self.calls = 0
        self.waited_seconds = 0.0

    def __repr__(self) -> str:
        return f"PhonePacer(interval={self.interval:g})"

    async def turn(self) -> None:
        """Wait for this caller's turn; the next one comes `interval` seconds later.

        A caller cancelled while it waits gives its turn up (nothing is reserved).
        """
        async with self._lock:
            now = self._clock()
            while now < self._next:
                delay = self._next - now
                await self._sleep(delay)
                self.waited_seconds += delay
                now = self._clock()
            self._next = now + self.interval
            self.calls += 1

    def hold(self, seconds: float) -> None:
        """Push the next turn at least `seconds` from now (the API said: too many, come back)."""
        if math.isfinite(seconds) and seconds > 0:
            self._next = max(self._next, self._clock() + seconds)
