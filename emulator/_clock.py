"""The emulator's virtual clock: real time times `speed`, plus explicit jumps."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


class VirtualClock:
    """Virtual seconds since the emulator started; never goes backwards.

    Changing the speed re-anchors the clock so that the time already elapsed is
    kept; `advance` jumps forward. Timestamps are rendered relative to the real
    UTC time at which the clock was created.
    """

    def __init__(self, *, speed: float, real: Callable[[], float] = time.monotonic) -> None:
        self._real = real
        self._speed = float(speed)
        self._anchor_real = real()
        self._anchor_virtual = 0.0
        now = datetime.now(UTC)
        self._epoch = now.replace(microsecond=now.microsecond - now.microsecond % 1000)

    @property
    def speed(self) -> float:
        return self._speed

    def now(self) -> float:
        return self._anchor_virtual + (self._real() - self._anchor_real) * self._speed

    def set_speed(self, speed: float) -> None:
        if not speed > 0:
            raise ValueError("speed must be > 0")
        current = self.now()
        self._anchor_real = self._real()
        self._anchor_virtual = current
        self._speed = float(speed)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock cannot go backwards")
        self._anchor_virtual += seconds

    def to_real_seconds(self, virtual_seconds: float) -> float:
        return virtual_seconds / self._speed

    def isoformat(self, t: float) -> str:
        moment = self._epoch + timedelta(seconds=t)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
