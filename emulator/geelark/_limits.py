"""The four kinds of limit: request windows, the two-hour lock, concurrency, plan quotas.

Documented: "Per API rate limit: 200 requests per minute, 24,000 requests per hour" (billing
endpoints have their own: `pay/wallet` 10/min, `pay/plan/info` 1/min); 40007 is "lifted in the
next minute"; 40014 locks for two hours. Our choices where the docs are silent:

- the windows are fixed UTC minutes and hours of the virtual clock ("lifted in the next
  minute"), counted per credential and endpoint;
- every authenticated call counts in both windows, refused ones included (only so can the
  hourly limit be reached at all: 200 a minute is 12,000 an hour);
- the call that takes an hour past its limit locks the credential for `lock_seconds`: that
  call and every later one, on any endpoint, answer 40014 until the lock ends; a locked call
  counts in no window;
- concurrency: more than `max_concurrent_requests` calls of one credential in flight at once
  answer 47002 (and lock nothing, although one page of the docs says "lifted after two hours").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from devicepool.emulator.geelark._envelope import (
    CONCURRENCY,
    HOURLY_LOCK,
    RATE_LIMITED,
    GeeLarkError,
)

# Documented per-minute limits of the billing endpoints.
PER_MINUTE_OVERRIDES = {"open/v1/pay/wallet": 10, "open/v1/pay/plan/info": 1}


@dataclass
class Windows:
    """Request counts per (credential, endpoint) in the current minute and hour, and locks."""

    per_minute: int
    per_hour: int
    lock_seconds: float
    # The UTC timestamp of virtual second 0: windows are UTC minutes and hours.
    offset: float = 0.0
    minute: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    hour: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    locked_until: dict[str, float] = field(default_factory=dict)
    accepted_minute: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    accepted_hour: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    in_flight: Counter[str] = field(default_factory=Counter)
    accepted: int = 0
    rate_limited: int = 0
    locked: int = 0
    locks: int = 0
    concurrency_refused: int = 0
    # The busiest any (credential, endpoint) got in one minute and one hour, accepted calls.
    max_per_minute: int = 0
    max_per_hour: int = 0

    def admit(self, who: str, path: str, now: float) -> None:
        """Count one call of `who` on `path` at virtual second `now`, or refuse it."""
        until = self.locked_until.get(who)
        if until is not None and now < until:
            self.locked += 1
            raise GeeLarkError(HOURLY_LOCK)
        key = (who, path)
        utc = now + self.offset
        minute = self._bump(self.minute, key, int(utc // 60))
        hour = self._bump(self.hour, key, int(utc // 3600))
        if hour > self.per_hour:
            self.locked_until[who] = now + self.lock_seconds
            self.locks += 1
            self.locked += 1
            raise GeeLarkError(HOURLY_LOCK)
        if minute > PER_MINUTE_OVERRIDES.get(path, self.per_minute):
            self.rate_limited += 1
            raise GeeLarkError(RATE_LIMITED)
        self.accepted += 1
        minute_ok = self._bump(self.accepted_minute, key, int(utc // 60))
        hour_ok = self._bump(self.accepted_hour, key, int(utc // 3600))
        self.max_per_minute = max(self.max_per_minute, minute_ok)
        self.max_per_hour = max(self.max_per_hour, hour_ok)

    @staticmethod
    def _bump(counts: dict[tuple[str, str], tuple[int, int]], key: tuple[str, str], at: int) -> int:
        window, seen = counts.get(key, (at, 0))
        seen = seen + 1 if window == at else 1
        counts[key] = (at, seen)
        return seen

    def enter(self, who: str, limit: int) -> None:
        """One more call of `who` in flight; 47002 past `limit` (0: no limit)."""
        if limit and self.in_flight[who] >= limit:
            self.concurrency_refused += 1
            raise GeeLarkError(CONCURRENCY)
        self.in_flight[who] += 1

    def leave(self, who: str) -> None:
        self.in_flight[who] -= 1
        if self.in_flight[who] <= 0:
            del self.in_flight[who]

    def lock_json(self, now: float) -> dict[str, float]:
        """Each credential locked now, with the virtual seconds its lock has left."""
        return {
            who: round(until - now, 3) for who, until in self.locked_until.items() if until > now
        }

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rateLimited": self.rate_limited,
            "locked": self.locked,
            "locks": self.locks,
            "concurrencyRefused": self.concurrency_refused,
            "maxPerMinute": self.max_per_minute,
            "maxPerHour": self.max_per_hour,
            "lockedNow": self.lock_json(now),
            "limits": {
                "perMinute": self.per_minute,
                "perHour": self.per_hour,
                "lockSeconds": self.lock_seconds,
                "perMinuteOverrides": dict(PER_MINUTE_OVERRIDES),
            },
        }


@dataclass
class DailyQuotas:
    """Plan quotas that reset at each UTC midnight: creates (44004) and opens (43008)."""

    creates_per_day: int
    opens_per_day: int
    day: str = ""
    creates: int = 0
    opens: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def roll(self, today: str) -> None:
        if today != self.day:
            self.day, self.creates, self.opens = today, 0, 0

    def creates_left(self) -> int:
        return max(0, self.creates_per_day - self.creates)

    def opens_left(self) -> int:
        return max(0, self.opens_per_day - self.opens)

    def to_json(self) -> dict[str, Any]:
        return {
            "day": self.day,
            "creates": self.creates,
            "createsPerDay": self.creates_per_day,
            "opens": self.opens,
            "opensPerDay": self.opens_per_day,
            "refused": dict(sorted(self.refused.items())),
        }
