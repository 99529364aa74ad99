"""The cloud-phone request budget: at most N `/phone/*` requests in any 1-second window.

The docs say "1 request per second" and nothing of what happens past it, nor
whether the budget is one desktop client's or the account's: the scope
(`account`, default, or `node`) and what a request past it gets (`refuse`,
`http429`, `delay`) are configuration. Every request received is also metered
(`max_per_second`: the most requests seen in any 1-second window, refused ones
included), which is what "never more than 1 request per second" is checked on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_SECONDS = 1.0


@dataclass
class PhoneRate:
    requests: int = 0
    rate_limited: int = 0
    max_per_second: int = 0
    _slots: dict[str, deque[float]] = field(default_factory=dict)
    _arrivals: dict[str, deque[float]] = field(default_factory=dict)

    def windows(self) -> dict[str, dict[str, list[float]]]:
        """The sliding windows, for the account's file (processes of one account share them)."""
        return {
            "slots": {scope: list(times) for scope, times in self._slots.items()},
            "arrivals": {scope: list(times) for scope, times in self._arrivals.items()},
        }

    def restore_windows(self, saved: dict[str, dict[str, list[float]]]) -> None:
        self._slots = {scope: deque(times) for scope, times in saved["slots"].items()}
        self._arrivals = {scope: deque(times) for scope, times in saved["arrivals"].items()}

    def arrive(self, scope: str, now: float) -> None:
        """Meter one request as it arrives, before it is admitted or refused."""
        self.requests += 1
        arrivals = self._arrivals.setdefault(scope, deque())
        _drop_before(arrivals, now)
        arrivals.append(now)
        self.max_per_second = max(self.max_per_second, len(arrivals))

    def admit(self, scope: str, now: float, limit: int, *, wait: bool) -> float | None:
        """Take a slot: 0 (now), the virtual seconds to wait for one (`wait`), or None (refused)."""
        slots = self._slots.setdefault(scope, deque())
        _drop_before(slots, now)
        if len(slots) < limit:
            slots.append(now)
            return 0.0
        if not wait:
            self.rate_limited += 1
            return None
        # Slots may lie in the future (queued requests): the next one opens a window after
        # the limit-th latest.
        at = max(now, slots[-limit] + WINDOW_SECONDS)
        slots.append(at)
        return at - now


def _drop_before(times: deque[float], now: float) -> None:
    while times and times[0] <= now - WINDOW_SECONDS:
        times.popleft()
