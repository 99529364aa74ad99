"""`PhonePacer`: one cloud-phone call at a time, the next `interval` after the last answer.

The vendor allows 1 cloud-phone request a second (all `/phone/*` calls of the
client; what happens past it is not documented). One pacer per BitBrowser
*account* in a process, shared by every `CloudPhones` of that account (every
node logged into it), lets one call through at a time, in the order they
asked (an `asyncio.Lock` is first come, first served), and the next one no
sooner than `interval` after the previous call's answer (or failure).

Why from the answer and not from the start: the budget is counted where the
requests arrive, and the way there is not the same length each time (a cold
handler, a loaded machine). A request has arrived before it is answered, so
counting from the answer puts at least `interval` between two arrivals
whatever the way costs; counting from the start would need a margin as large
as the worst delay. The price is the call's own latency on each turn.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

__all__ = ["DEFAULT_PHONE_INTERVAL", "PhonePacer"]

# A hair over the second: a window that counts an arrival exactly 1 s old still sees nothing.
DEFAULT_PHONE_INTERVAL = 1.05


class PhonePacer:
    """One call at a time, `interval` seconds between an answer and the next call. Share it."""

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

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """`async with pacer.turn():` one call; the next turn starts `interval` after it ends.

        A caller cancelled while it waits gives its turn up (nothing is reserved).
        """
        async with self._lock:
            now = self._clock()
            while now < self._next:
                delay = self._next - now
                await self._sleep(delay)
                self.waited_seconds += delay
                now = self._clock()
            self.calls += 1
            try:
                yield
            finally:
                self._next = max(self._next, self._clock() + self.interval)

    def hold(self, seconds: float) -> None:
        """Push the next turn at least `seconds` from now (the API said: too many, come back)."""
        if math.isfinite(seconds) and seconds > 0:
            self._next = max(self._next, self._clock() + seconds)
