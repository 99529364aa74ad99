"""The request limits of one GeeLark key, kept by this process: `EndpointPacer` and `Breaker`.

GeeLark allows 200 requests a minute and 24,000 an hour *per endpoint* per key; an hour's
overrun locks the key for two hours (40014). `EndpointPacer` keeps both windows per endpoint
(sliding, counted from each request's send, plus a margin) and makes a call wait its turn,
or refuses it at once (`GeeLarkRateLimitedError`) when the wait is longer than a call should
hold an activity. `Breaker` stops every call of the key until the lock is over, so no retry
runs into a longer lock. Both are per process: two worker processes on one key each keep
their own count (docs/providers.md, "GeeLark's Open API", says what would share them).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from devicepool.activities.providers.geelark.errors import (
    GeeLarkError,
    GeeLarkRateLimitedError,
    locked_error,
)
from devicepool.api.errors import ErrorType

__all__ = ["HOUR_LIMIT", "LOCK_MINUTES", "MINUTE_LIMIT", "Breaker", "EndpointPacer"]

MINUTE_LIMIT = 200
HOUR_LIMIT = 24_000
LOCK_MINUTES = 120
# A call waits for a window's room at most this long; longer, it is refused with the wait as
# its `retry_after` (an activity's own timeout is 10 s for a read: it must not spend it here).
MAX_WAIT_SECONDS = 5.0


class EndpointPacer:
    """Per endpoint: at most `per_minute` sends in any `minute` seconds and `per_hour` in any
    60 `minute`s (`minute`: 60 s; shorter only against a sped-up emulator). Share one per key."""

    def __init__(
        self,
        *,
        per_minute: int = MINUTE_LIMIT,
        per_hour: int = HOUR_LIMIT,
        minute: float = 60.0,
        margin: float = 1.0,
        max_wait: float = MAX_WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not (minute > 0 and math.isfinite(minute)) or per_minute < 1 or per_hour < 1:
            raise ValueError("a GeeLark pacer needs positive limits and a positive minute")
        self.per_minute, self.per_hour = per_minute, per_hour
        self.minute, self.hour = minute, 60 * minute
        self.margin, self.max_wait = margin, max_wait
        self._clock, self._sleep = clock, sleep
        self._sent: dict[str, deque[float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._held: dict[str, float] = {}  # endpoint -> no send before (the API said so)
        self.calls = 0

    def __repr__(self) -> str:
        return f"EndpointPacer(per_minute={self.per_minute}, per_hour={self.per_hour})"

    def count(self, endpoint: str, window: float) -> int:
        """Sends to `endpoint` in the last `window` seconds."""
        now = self._clock()
        return sum(1 for at in self._sent.get(endpoint, ()) if at > now - window)

    def hold(self, endpoint: str, seconds: float) -> None:
        """No send to `endpoint` for `seconds` (a 40007: "lifted in the next minute")."""
        if math.isfinite(seconds) and seconds > 0:
            until = self._clock() + seconds
            self._held[endpoint] = max(self._held.get(endpoint, -math.inf), until)

    def _wait(self, endpoint: str, now: float) -> float:
        sent = self._sent.setdefault(endpoint, deque())
        while sent and sent[0] <= now - self.hour - self.margin:
            sent.popleft()
        wait = self._held.get(endpoint, -math.inf) - now
        if len(sent) >= self.per_hour:
            wait = max(wait, sent[-self.per_hour] + self.hour + self.margin - now)
        if len(sent) >= self.per_minute:
            wait = max(wait, sent[-self.per_minute] + self.minute + self.margin - now)
        return max(0.0, wait)

    async def turn(
        self,
        endpoint: str,
        *,
        max_wait: float | None = None,
        refuse: Callable[[], None] | None = None,
    ) -> None:
        """Wait until `endpoint` has room in both windows, and count this send. A wait longer
        than `max_wait` (at most the pacer's own) is refused at once, the wait its delay.
        `refuse`, run as the endpoint's turn comes and after each wait, may raise: nothing
        counted (a cancelled create's write, `heartbeats.end_if_cancelled_unsent`). It is
        not run while the caller waits for the endpoint's lock or sleeps out the budget."""
        limit = self.max_wait if max_wait is None else min(self.max_wait, max_wait)
        lock = self._locks.setdefault(endpoint, asyncio.Lock())
        async with lock:  # first come, first served per endpoint
            while True:
                if refuse is not None:
                    refuse()
                if (wait := self._wait(endpoint, self._clock())) <= 0:
                    break
                if wait > limit:
                    raise GeeLarkRateLimitedError(
                        ErrorType.RATE_LIMITED,
                        None,
                        f"POST {endpoint}: this worker's GeeLark request budget for the"
                        f" endpoint is spent ({self.per_minute}/min, {self.per_hour}/h)",
                        wait,
                    )
                await self._sleep(wait)
            self._sent[endpoint].append(self._clock())
            self.calls += 1


class Breaker:
    """Open for `LOCK_MINUTES` (in the pacer's minutes) after a 40014: every call of the key
    is refused here, with the time it reopens, and never sent."""

    def __init__(
        self,
        *,
        lock_seconds: float = LOCK_MINUTES * 60.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.lock_seconds = lock_seconds
        self._now = now
        self.reopens_at: datetime | None = None
        self.trips = 0

    def __repr__(self) -> str:
        return f"Breaker(reopens_at={self.reopens_at!r})"

    def check(self, call: str) -> None:
        """Raise `GeeLarkLockedError` while the key is locked."""
        now = self._now()
        if self.reopens_at is not None:
            if now < self.reopens_at:
                raise locked_error(call, self.reopens_at, now=now)
            self.reopens_at = None

    def trip(self, call: str, *, code: int, msg: str) -> GeeLarkError:
        """The key was locked just now: hold every call until the lock is over."""
        now = self._now()
        until = now + timedelta(seconds=self.lock_seconds)
        self.reopens_at = until if self.reopens_at is None else max(self.reopens_at, until)
        self.trips += 1
        return locked_error(call, self.reopens_at, now=now, code=code, msg=msg)
