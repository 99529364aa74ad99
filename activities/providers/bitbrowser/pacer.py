"""`PhonePacer`: one cloud-phone call at a time, the next `interval` after the last answer.

One per BitBrowser account in a process, shared by its nodes and pools. Who goes
next: replacements first (first come, first served), then the pools round-robin,
one call each (a turn given and not used goes to its pool's next); whom a call
serves is its `providers.base.provider_call` (`turn(call)` to say it directly),
calls outside any being one pool, `""`. Why counted from the
answer, and why one process: docs/providers.md, "BitBrowser's Local API".
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from devicepool.activities.providers.base import ProviderCall, current_call

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
        self._busy = False
        self._replacements: deque[asyncio.Future[None]] = deque()
        # pool -> its waiting calls; the dict's order is the round-robin's
        self._pools: dict[str, deque[asyncio.Future[None]]] = {}
        self._next = -math.inf
        self.calls = 0
        # turns given, by pool (replacements under their pool too), for tests and metrics
        self.turns: Counter[str] = Counter()
        self.replacement_turns = 0

    def __repr__(self) -> str:
        return f"PhonePacer(interval={self.interval:g})"

    @property
    def waiting(self) -> int:
        """Calls waiting for a turn."""
        return len(self._replacements) + sum(len(q) for q in self._pools.values())

    @asynccontextmanager
    async def turn(
        self, call: ProviderCall | None = None, *, refuse: Callable[[], None] | None = None
    ) -> AsyncIterator[None]:
        """`async with pacer.turn():` one call; the next turn starts `interval` after it ends.

        A caller cancelled while it waits gives its turn up (nothing is reserved). `refuse`,
        run once the turn is this caller's (and again after its spacing wait), may raise:
        the call is not made, the turn passes on at once, and the next is not spaced (a
        cancelled create's write, `heartbeats.end_if_cancelled_unsent`). It is not run
        while the caller is queued, so a refused caller keeps its place until its turn; the
        turn, unused, goes to its own pool's next waiter before the round moves on (a
        deleted pool's sweep queued behind its cancelled creates waits one round, R32 #1).
        """
        call = current_call() if call is None else call
        await self._acquire(call)
        refused = False
        try:
            try:
                if refuse is not None:
                    refuse()
                now = self._clock()
                while now < self._next:
                    await self._sleep(self._next - now)
                    now = self._clock()
                if refuse is not None:
                    refuse()
            except BaseException:
                refused = True
                raise
            self.calls += 1
            self.turns[call.pool] += 1
            self.replacement_turns += call.replacement
            yield
        finally:
            if not refused:
                self._next = max(self._next, self._clock() + self.interval)
            self._release(call if refused else None)

    def hold(self, seconds: float) -> None:
        """Push the next turn at least `seconds` from now (the API said: too many, come back)."""
        if math.isfinite(seconds) and seconds > 0:
            self._next = max(self._next, self._clock() + seconds)

    async def _acquire(self, call: ProviderCall) -> None:
        if not self._busy and not self.waiting:
            self._busy = True
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if call.replacement:
            queue = self._replacements
        else:
            queue = self._pools.setdefault(call.pool, deque())
        queue.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(call)  # given the turn, then cancelled: the next one has it
            else:
                self._forget(call, granted)
            raise

    def _forget(self, call: ProviderCall, granted: asyncio.Future[None]) -> None:
        queue = self._replacements if call.replacement else self._pools.get(call.pool)
        if queue is not None and granted in queue:
            queue.remove(granted)
            if not queue and not call.replacement:
                del self._pools[call.pool]

    def _release(self, unused: ProviderCall | None = None) -> None:
        """The turn goes to the next waiting call, or back to whoever comes first. A turn
        `unused` made no call with (refused, or its caller cancelled) goes to a waiting
        replacement, else, a pool's, to that pool's next, the pool moved to the end of the
        round: its call, when one is made, still takes its one turn a round."""
        while (granted := self._next_waiting(unused)) is not None:
            if not granted.done():
                granted.set_result(None)
                return
        self._busy = False

    def _next_waiting(self, unused: ProviderCall | None) -> asyncio.Future[None] | None:
        if self._replacements:
            return self._replacements.popleft()
        if unused is not None and not unused.replacement and unused.pool in self._pools:
            # To the end of the round (again, unless the unused turn was taken on an idle
            # pacer, which moves no pool): its call, when made, is its one turn a round.
            own = self._pools.pop(unused.pool)
            granted = own.popleft()
            if own:
                self._pools[unused.pool] = own
            return granted
        pool = next(iter(self._pools), None)
        if pool is None:
            return None
        queue = self._pools.pop(pool)
        granted = queue.popleft()
        if queue:
            self._pools[pool] = queue  # to the end of the round
        return granted
