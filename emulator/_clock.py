"""The emulator's virtual clock: real time times `speed`, plus explicit jumps.

Also the clock's control plane (`GET`/`POST /_emulator/clock`): its JSON shape
and the validation of a change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from devicepool.emulator._bodies import is_number
from devicepool.emulator._problems import invalid


class VirtualClock:
    """Virtual seconds since the emulator started; never goes backwards.

    Changing the speed re-anchors the clock so that the time already elapsed is
    kept; `advance` jumps forward. Timestamps are rendered relative to `epoch`,
    by default the real UTC time at which the clock was created. A clock
    restored from a state file starts at `start` virtual seconds with the
    `epoch` it had, so every timestamp it rendered before renders the same.
    """

    def __init__(
        self,
        *,
        speed: float,
        real: Callable[[], float] = time.monotonic,
        start: float = 0.0,
        epoch: datetime | None = None,
    ) -> None:
        self._real = real
        self._speed = float(speed)
        self._anchor_real = real()
        self._anchor_virtual = float(start)
        if epoch is None:
            now = datetime.now(UTC)
            epoch = now.replace(microsecond=now.microsecond - now.microsecond % 1000)
        self._epoch = epoch

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def epoch(self) -> datetime:
        """The real UTC moment that virtual second 0 stands for."""
        return self._epoch

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


def clock_record(clock: VirtualClock) -> dict[str, Any]:
    """The clock as a JSON state file keeps it: `clock_from` runs it on from there."""
    return {"virtual": clock.now(), "wall": time.time(), "epoch": clock.epoch.isoformat()}


def clock_from(
    saved: dict[str, Any] | None, speed: float, *, at_least: float = 0.0
) -> VirtualClock:
    """A new clock, or the saved one (a state file's `clock_record`) run on by the wall time
    since it was written, to `at_least` virtual seconds."""
    if saved is None:
        return VirtualClock(speed=speed)
    clock = saved["clock"]
    since = max(0.0, time.time() - clock["wall"])
    return VirtualClock(
        speed=speed,
        start=max(at_least, clock["virtual"] + since * speed),
        epoch=datetime.fromisoformat(clock["epoch"]),
    )


def clock_json(clock: VirtualClock) -> dict[str, Any]:
    return {"now": clock.isoformat(clock.now()), "speed": clock.speed}


def set_clock(clock: VirtualClock, body: Any) -> dict[str, Any]:
    """Apply a `{"speed": ..., "advanceSeconds": ...}` body; nothing changes if it is invalid."""
    if not isinstance(body, dict) or set(body) - {"speed", "advanceSeconds"}:
        raise invalid('clock body is {"speed": number} and/or {"advanceSeconds": number}')
    speed, advance = body.get("speed"), body.get("advanceSeconds")
    if speed is not None and (not is_number(speed) or speed <= 0):
        raise invalid("speed must be a number > 0")
    if advance is not None and (not is_number(advance) or advance < 0):
        raise invalid("advanceSeconds must be a number >= 0")
    if speed is not None:
        clock.set_speed(speed)
    if advance is not None:
        clock.advance(advance)
    return clock_json(clock)
