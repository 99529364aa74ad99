"""What a pool counts as billed under its account's billing model (`Cost.accrue`,
`running_devices`, `Billing`): by the hour for every device that exists (the default), per
running minute with a daily cap per device (GeeLark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devicepool.activities import models as am
from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.activities.providers.geelark.words import phone_status
from devicepool.activities.settings import Billing
from devicepool.workflows.pool.messages import PoolCost
from devicepool.workflows.pool.state import (
    MAX_DAY_BILLED,
    Cost,
    billed_devices,
    running_devices,
)

NOW = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
PER_MINUTE = Billing(model="perMinute", daily_cap=1.0)  # $0.007 a minute: $0.42 an hour


def device(name: str, status: str) -> DeviceInfo:
    return DeviceInfo(id=name, status=status, region="us", created_at=NOW)


def test_per_minute_counts_running_devices_only() -> None:
    """A phone shut down (offline), expired (failed) or gone bills nothing per minute; one
    booting or running does. Every one but a terminated device bills by the hour."""
    devices = [
        device("a", am.READY),
        device("b", am.PROVISIONING),
        device("c", am.OFFLINE),
        device("d", am.FAILED),
        device("e", am.BUSY),
    ]
    leaving = [device("f", am.TERMINATED), device("g", am.READY)]
    assert running_devices(devices, leaving) == ["a", "b", "e", "g"]
    assert billed_devices(devices, leaving) == 6


def test_a_running_device_bills_to_its_daily_cap_then_nothing_until_midnight() -> None:
    cost = Cost()
    cost.accrue(NOW - timedelta(hours=1), 2, 0.42, running=["a", "b"], billing=PER_MINUTE)
    assert cost.rate == pytest.approx(0.84)
    # 21:00 -> 23:30: 2.5 h at $0.42 would be $1.05 a device; each stops at $1.00.
    cost.accrue(NOW + timedelta(minutes=90), 2, 0.42, running=["a", "b"], billing=PER_MINUTE)
    assert cost.to_date == pytest.approx(2.0)
    assert cost.device_hours == pytest.approx(5.0)  # hours run, capped or not
    assert cost.rate == 0.0  # both capped for the rest of the day
    # Past UTC midnight the cap starts again: 23:30 -> 00:30 bills the half hour after it.
    cost.accrue(NOW + timedelta(minutes=150), 2, 0.42, running=["a", "b"], billing=PER_MINUTE)
    assert cost.to_date == pytest.approx(2.0 + 2 * 0.21)
    assert cost.rate == pytest.approx(0.84)
    # By the hour: 23:00 billed what was left under the cap ($0.16 each), 00:00 half an hour.
    hours = {h.hour: [round(x, 4) for x in v] for h, v in cost.billed_hours.items()}
    assert hours == {21: [2.0, 0.84], 22: [2.0, 0.84], 23: [2.0, 0.32], 0: [1.0, 0.42]}


def test_a_device_stopped_and_started_again_keeps_its_day_spent() -> None:
    cost = Cost()
    start = NOW - timedelta(hours=12)  # 10:00
    cost.accrue(start, 1, 0.42, running=["a"], billing=PER_MINUTE)
    cost.accrue(start + timedelta(hours=2), 0, 0.42, running=[], billing=PER_MINUTE)  # $0.84
    cost.accrue(start + timedelta(hours=5), 1, 0.42, running=["a"], billing=PER_MINUTE)
    cost.accrue(start + timedelta(hours=6), 1, 0.42, running=["a"], billing=PER_MINUTE)
    assert cost.to_date == pytest.approx(1.0)  # $0.84 + $0.16 to the cap, not + $0.42


def test_hourly_billing_is_unchanged_without_a_model() -> None:
    """No billing given (every pool before it, every REST account): what it always was."""
    cost, same = Cost(), Cost()
    cost.accrue(NOW, 3, 0.10)
    cost.accrue(NOW + timedelta(hours=30), 3, 0.10)
    same.accrue(NOW, 3, 0.10, running=["a"], billing=Billing())
    same.accrue(NOW + timedelta(hours=30), 3, 0.10, running=["a"], billing=Billing())
    assert cost.to_date == pytest.approx(9.0) and cost == same
    assert "dayBilled" not in cost.model_dump(by_alias=True, exclude_defaults=True)


def test_a_billing_model_reaches_the_pool_as_its_accounts() -> None:
    settings = PoolSettings(account_prices={"g": 0.42}, account_billing={"g": PER_MINUTE})
    assert settings.billing_of("g") == PER_MINUTE
    assert settings.billing_of("other") == Billing()  # hourly, at pricePerHour
    # Carried in a pool's state and read by an older build: the field defaults.
    assert PoolSettings.model_validate({}).account_billing == {}


def test_cost_between_passes_bills_on_at_the_rate_not_past_the_cap() -> None:
    """`devicepool cost` adds what billed since the pool's last pass: device-hours for every
    device running, dollars at the pool's rate (a phone at its daily cap adds none)."""
    capped = PoolCost(
        account="g",
        price_per_hour=0.42,
        hourly_cost=0.0,  # both phones at the cap
        cost_to_date=2.0,
        device_hours_to_date=5.0,
        counted_until=NOW,
        billing_devices=2,
    )
    assert capped.totals(NOW + timedelta(hours=1)) == pytest.approx((7.0, 2.0))
    hourly = capped.model_copy(update={"hourly_cost": 0.84})
    assert hourly.totals(NOW + timedelta(hours=1)) == pytest.approx((7.0, 2.84))


def test_what_devices_billed_today_is_bounded() -> None:
    """A pool that replaces phones all day keeps at most `MAX_DAY_BILLED` of them: past it,
    only the running ones (one stopped and started again bills from nothing: more, not less)."""
    cost = Cost()
    start = NOW - timedelta(hours=20)
    for i in range(MAX_DAY_BILLED + 2):
        cost.accrue(start + timedelta(seconds=i), 1, 0.42, running=[f"d{i}"], billing=PER_MINUTE)
    assert len(cost.day_billed) <= MAX_DAY_BILLED
    assert cost.to_date == pytest.approx(0.42 * (MAX_DAY_BILLED + 1) / 3600)  # all billed


@pytest.mark.parametrize("code", [9, None, "x"])
def test_a_geelark_status_unknown_to_devicepool_bills_as_running(code: object) -> None:
    """A new GeeLark status code, or an item without one, reads `offline` (the health check
    replaces it in time), but may be a phone powered on: per running minute counts it as
    running until then (over-counted, never under). A phone shut down (2) still bills
    nothing."""
    unknown, why = phone_status(code)
    shut_down, said = phone_status(2)
    devices = [
        DeviceInfo(id="new", status=unknown, reason=why, created_at=NOW),
        DeviceInfo(id="off", status=shut_down, reason=said, created_at=NOW),
    ]
    assert unknown == am.OFFLINE == shut_down
    assert running_devices(devices, []) == ["new"]
