"""The create rate limit: a sliding window of 60 virtual seconds per account.

`RateWindows` holds each account's recent accepted creates, renders the
`RateLimit-*` headers (their reset in *real* seconds, so a client sleeping on
it waits the right time at any clock speed), and keeps every accepted create's
virtual time for `GET /_emulator/creates` (and, with a state file, for the
window of the next run: see `restore`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from devicepool.emulator._clock import VirtualClock
from devicepool.emulator._problems import RATE_LIMITED, ProblemError
from devicepool.emulator.config import EmulatorConfig

RATE_WINDOW_SECONDS = 60.0


class RateWindows:
    """Per-account windows of accepted creates, `creates_per_minute` per window."""

    def __init__(self, clock: VirtualClock, config: EmulatorConfig) -> None:
        self.clock = clock
        self._config = config
        self._windows: dict[str, deque[float]] = {}
        # Every accepted create's virtual time, per account (GET /_emulator/creates).
        self._accepted_at: dict[str, list[float]] = {}

    @property
    def limit(self) -> int:
        return self._config.creates_per_minute

    def is_full(self, account: str, now: float) -> bool:
        return len(self._window(account, now)) >= self.limit

    def limited(self, account: str, now: float) -> ProblemError:
        """The 429 for a create that found the account's window full."""
        headers = self._headers(self._window(account, now), now)
        headers["Retry-After"] = headers["RateLimit-Reset"]
        return ProblemError(
            429,
            RATE_LIMITED,
            f"at most {self.limit} device creations per minute for account {account!r}",
            headers=headers,
        )

    def record(self, account: str, now: float) -> dict[str, str]:
        """Count an accepted create; returns the `RateLimit-*` headers that follow it."""
        window = self._window(account, now)
        window.append(now)
        self._accepted_at.setdefault(account, []).append(now)
        return self._headers(window, now)

    def restore(self, account: str, times: list[float]) -> None:
        """Reload an account's accepted creates (from a state file), oldest first.

        The window is rebuilt from the same times, so creates made just before a
        restart still count against it; the old ones drop out on first use.
        """
        self._accepted_at[account] = list(times)
        self._windows[account] = deque(times)

    def creates_json(self) -> dict[str, Any]:
        """Accepted-create times per account, in virtual seconds since the emulator started."""
        return {
            "windowSeconds": RATE_WINDOW_SECONDS,
            "limit": self.limit,
            "speed": self.clock.speed,
            "now": self.clock.now(),
            "accounts": {name: list(times) for name, times in sorted(self._accepted_at.items())},
        }

    def _window(self, account: str, now: float) -> deque[float]:
        window = self._windows.setdefault(account, deque())
        while window and window[0] <= now - RATE_WINDOW_SECONDS:
            window.popleft()
        return window

    def _headers(self, window: deque[float], now: float) -> dict[str, str]:
        reset = 0
        if window:
            # Real seconds until the oldest creation leaves the window, rounded up.
            until = self.clock.to_real_seconds(window[0] + RATE_WINDOW_SECONDS - now)
            reset = max(1, math.ceil(until))
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(max(0, self.limit - len(window))),
            "RateLimit-Reset": str(reset),
        }
