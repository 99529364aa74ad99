"""Per-running-minute billing with a daily cap, and monthly rental.

Vendor pricing: $0.007 per minute a phone runs, at most $1.00 per phone per day; a
monthly-rental phone (`chargeMode` 1) runs without a per-minute charge. Our choices where the
docs are silent: a phone runs (and is billed) from the `phone/start` that took it until it is
stopped, its boot included; each UTC day's running seconds of a phone are billed as whole
minutes, rounded up; the cap applies per phone and UTC day; a monthly phone's rental is
charged once, when it is created.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


class Days:
    """UTC days of the virtual clock: which day a virtual second is in, and where it ends."""

    def __init__(self, epoch: datetime) -> None:
        self._epoch = epoch.astimezone(UTC)

    def day_of(self, t: float) -> str:
        return (self._epoch + timedelta(seconds=t)).strftime("%Y-%m-%d")

    def next_midnight(self, t: float) -> float:
        moment = self._epoch + timedelta(seconds=t)
        midnight = datetime(moment.year, moment.month, moment.day, tzinfo=UTC) + timedelta(days=1)
        return (midnight - self._epoch).total_seconds()


def seconds_by_day(intervals: Iterable[tuple[float, float]], days: Days) -> dict[str, float]:
    """Running seconds per UTC day of `intervals` (start, end), split at midnights."""
    found: dict[str, float] = {}
    for start, end in intervals:
        t = start
        while t < end:
            cut = min(end, days.next_midnight(t))
            day = days.day_of(t)
            found[day] = found.get(day, 0.0) + (cut - t)
            t = cut
    return found


@dataclass
class Bill:
    """One phone's bill: minutes run, money charged, the days the cap applied."""

    minutes: int = 0
    money: float = 0.0
    capped_days: int = 0
    rental: float = 0.0


def bill(
    running: dict[str, float], *, price: float, cap: float, per_minute: bool, rental: float
) -> Bill:
    """The bill of a phone that ran `running` seconds per day (per-minute or monthly)."""
    result = Bill(rental=rental)
    for seconds in running.values():
        minutes = math.ceil(seconds / 60 - 1e-9)
        result.minutes += minutes
        if not per_minute:
            continue
        charge = minutes * price
        if charge > cap:
            charge = cap
            result.capped_days += 1
        result.money += charge
    result.money = round(result.money + rental, 6)
    return result
