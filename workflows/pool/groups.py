"""`PoolState`'s groups added after v0.1.0: `Cost` (what the devices billed, counted by the
pool; docs/pools.md, 'Spend: what a pool costs, and a cap'), `Control` (what a person did to
its devices), `Rollout` (drift), and the `PendingReset`s of `PoolState.resets`. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import Field

from devicepool.api.base import CamelModel
from devicepool.workflows.shared.protocol import AccountCap

if TYPE_CHECKING:
    from devicepool.activities.settings import Billing

__all__ = ["BILLED_HOURS_KEPT", "MAX_DAY_BILLED", "Control", "Cost", "PendingReset", "Rollout"]

# The hours of billing a pool keeps for `devicepool cost --since` (a week).
BILLED_HOURS_KEPT = 168
# The devices a pool keeps what they billed today for (per running minute, a daily cap).
MAX_DAY_BILLED = 2000


class Cost(CamelModel):
    # The account's spendCap (worker config), as its ledger last told it (None: never).
    account_cap: AccountCap | None = None
    # What the pool's devices billed so far (dollars), and at what hourly rate
    # since when: each pass adds the time since at the rate it saw last.
    to_date: float = 0.0
    rate: float = 0.0
    since: datetime | None = None
    # How many devices billed since `since`, and what they billed by the hour
    # (hour start -> [device-hours, dollars]) for the last `BILLED_HOURS_KEPT` hours.
    devices: int = 0
    device_hours: float = 0.0
    billed_hours: dict[datetime, list[float]] = Field(default_factory=dict)

    # Per running minute with a daily cap (`Billing` `perMinute`, `daily_cap` set; else all
    # empty): the devices running since `since`, each one's price of an hour and the cap,
    # and what each billed in the UTC day `day` (at most the cap).
    running: list[str] = Field(default_factory=list)
    price_each: float = 0.0
    daily_cap: float | None = None
    day: date | None = None
    day_billed: dict[str, float] = Field(default_factory=dict)

    def accrue(
        self,
        now: datetime,
        devices: int,
        price_per_hour: float,
        *,
        running: Sequence[str] = (),
        billing: Billing | None = None,
    ) -> None:
        """Add what the pool billed since the last pass, hour by hour, at the devices and rate
        seen then (they cannot change without a pass); bill on with `devices` from now (by
        the hour), or `running` (per running minute, to the daily cap)."""
        start = self.since
        if start is not None and now > start:
            rate = self.rate / self.devices if self.devices else 0.0
            while start < now:
                hour = start.replace(minute=0, second=0, microsecond=0)
                end = min(now, hour + timedelta(hours=1))
                device_hours = self.devices * (end - start).total_seconds() / 3600
                if self.daily_cap is None:
                    dollars = device_hours * rate
                else:
                    dollars = self._capped(hour, (end - start).total_seconds() / 3600)
                bucket = self.billed_hours.setdefault(hour, [0.0, 0.0])
                bucket[0] += device_hours
                bucket[1] += dollars
                self.device_hours += device_hours
                self.to_date += dollars
                start = end
            for hour in sorted(self.billed_hours)[:-BILLED_HOURS_KEPT]:
                del self.billed_hours[hour]
        self.since = now
        per_minute = billing is not None and billing.model == "perMinute"
        if not per_minute or billing is None or billing.daily_cap is None:
            billing_now = len(set(running)) if per_minute else devices
            self.running, self.price_each, self.daily_cap = [], 0.0, None
            self.day, self.day_billed = None, {}
            self.devices, self.rate = billing_now, billing_now * price_per_hour
            return
        self.running, self.price_each = sorted(set(running)), price_per_hour
        self.daily_cap = billing.daily_cap
        self._day_of(now.date())
        if len(self.day_billed) > MAX_DAY_BILLED:
            # Bounded carried state (a pool replacing all day): a phone not running now
            # starts again from nothing if it runs again today, which counts more, not less.
            self.day_billed = {d: v for d, v in self.day_billed.items() if d in self.running}
        uncapped = [d for d in self.running if self.day_billed.get(d, 0.0) < self.daily_cap]
        self.devices, self.rate = len(self.running), len(uncapped) * price_per_hour

    def _day_of(self, day: date) -> None:
        """The daily cap's day is `day`: a new one starts every device's day at nothing."""
        if self.day != day:
            self.day, self.day_billed = day, {}

    def _capped(self, hour: datetime, hours: float) -> float:
        """Dollars the running devices billed over `hours` of `hour`, each to its daily cap."""
        cap = self.daily_cap or 0.0
        self._day_of(hour.date())
        dollars = 0.0
        for device in self.running:
            spent = self.day_billed.get(device, 0.0)
            added = min(self.price_each * hours, max(0.0, cap - spent))
            self.day_billed[device] = spent + added
            dollars += added
        return dollars


class Control(CamelModel):
    """What a person did to the pool's devices (`control.py`): device id -> protected until
    (None: until unprotected); devices to replace once idle; remediation paused."""

    protected: dict[str, datetime | None] = Field(default_factory=dict)
    retiring: list[str] = Field(default_factory=list)
    remediation_paused: bool = False


class Rollout(CamelModel):
    """Drift (`spec.rollout`): the drifted devices being replaced now, the template hash of
    devices without the label, and the devices that left before their replacement (until
    gone). The rules: docs/pools.md, 'One device by hand, and lifetime'."""

    rolling: list[str] = Field(default_factory=list)
    unlabelled_hash: str | None = None
    left_first: list[str] = Field(default_factory=list)


class PendingReset(CamelModel):
    """A used device cleared before it is leased again (`onRelease: reset`): leased by no
    one until its reset is asked; `failures`: resets that failed (replaced past a few)."""

    device: str
    failures: int = 0
