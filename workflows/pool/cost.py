"""What a pool's devices billed, counted by the pool itself (`Cost`, in `PoolState.cost`),
and the account's spendCap as its ledger last told it. Pure. How it is counted:
docs/pools.md, 'Spend: what a pool costs, and a cap'.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from devicepool.api.base import CamelModel
from devicepool.workflows.shared.protocol import AccountCap

__all__ = ["BILLED_HOURS_KEPT", "Cost"]

# The hours of billing a pool keeps for `devicepool cost --since` (a week).
BILLED_HOURS_KEPT = 168


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

    def accrue(self, now: datetime, devices: int, price_per_hour: float) -> None:
        """Add what the pool billed since the last pass (the devices and rate seen then),
        hour by hour; bill on with `devices` at `price_per_hour`. Between passes the devices
        did not change, or a pass would have run."""
        start = self.since
        if start is not None and now > start:
            rate = self.rate / self.devices if self.devices else 0.0
            while start < now:
                hour = start.replace(minute=0, second=0, microsecond=0)
                end = min(now, hour + timedelta(hours=1))
                device_hours = self.devices * (end - start).total_seconds() / 3600
                bucket = self.billed_hours.setdefault(hour, [0.0, 0.0])
                bucket[0] += device_hours
                bucket[1] += device_hours * rate
                self.device_hours += device_hours
                self.to_date += device_hours * rate
                start = end
            for hour in sorted(self.billed_hours)[:-BILLED_HOURS_KEPT]:
                del self.billed_hours[hour]
        self.devices, self.rate = devices, devices * price_per_hour
        self.since = now
