"""What GeeLark bills, as a pool counts it and as the emulator bills it.

The adapter runs phones on the GeeLark emulator in process (its clock moved by the test); a
pool's `Cost` is fed what `list_pool` shows at each step, at the emulator's virtual time, as a
pass would be. Per running minute with a daily cap per phone (`billing: {perMinute, dailyCap}`),
a phone shut down bills nothing; no phone is rented monthly (`chargeMode` 0 always).
Ground truth: `GET /_emulator/stats` (docs/geelark-emulator.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from devicepool.activities.metrics import Metrics
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice
from devicepool.activities.providers.geelark import EndpointPacer, GeeLarkApi, GeeLarkProvider
from devicepool.activities.providers.registry import build_provider
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import AccountSettings, Billing
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from devicepool.workflows.pool.state import Cost, billed_devices, running_devices
from tests.helpers.geelark import BASE, Team, team

POOL = "billed"
TEMPLATE = DeviceTemplate(platform="android", region="us", os_version="15")
LABELS = {LABEL_POOL: POOL, LABEL_MANAGED_BY: MANAGED_BY}
PRICE, CAP = 0.007, 1.0
PER_MINUTE = Billing(model="perMinute", daily_cap=CAP)
STEP = 60.0  # virtual seconds between two passes
# Per phone: the emulator bills from the start call and rounds each day up to whole minutes;
# a pool counts from the pass that sees it running to the pass that sees it stopped. So the
# two agree within two steps' worth of minutes a phone.
TOLERANCE_MINUTES = 2 * STEP / 60


def _new(key: str) -> NewDevice:
    return NewDevice(template=TEMPLATE, name=key, labels=LABELS, idempotency_key=key)


@pytest.fixture
async def t() -> AsyncIterator[Team]:
    async with team(boot_seconds=20.0, price_per_minute=PRICE, daily_cap=CAP) as made:
        # The runs below take under 4 virtual hours: none crosses a UTC midnight (where both
        # would start the cap again), so what they assert holds at any time of day.
        now = _now(made)
        if (now + timedelta(hours=4)).date() != now.date():
            midnight = datetime.combine(now.date() + timedelta(days=1), time(), tzinfo=UTC)
            await made.advance((midnight - now).total_seconds() + 60)
        yield made


def _provider(t: Team, **kwargs: Any) -> GeeLarkProvider:
    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    api = GeeLarkApi(
        base_url=BASE,
        app_id=DEFAULT_APP_ID,
        api_key=DEFAULT_API_KEY,
        transport=t.transport,
        pacer=EndpointPacer(clock=t.emulator.clock.now),  # the emulator's minutes
    )
    return GeeLarkProvider(api, sleep=sleep, confirm_seconds=5.0, **kwargs)


def _now(t: Team) -> datetime:
    return t.emulator.clock.epoch + timedelta(seconds=t.emulator.clock.now())


async def _pass(t: Team, provider: GeeLarkProvider, cost: Cost) -> None:
    devices = await provider.list_pool(POOL)
    cost.accrue(
        _now(t),
        billed_devices(devices, []),
        PRICE * 60,
        running=running_devices(devices, []),
        billing=PER_MINUTE,
    )


async def test_a_pools_cost_agrees_with_what_geelark_billed(t: Team) -> None:
    """Three phones: one runs 60 minutes and is then shut down by the provider (it exists, it
    bills nothing more), two run 200 minutes and reach the $1.00 daily cap at ~143."""
    provider = _provider(t)
    made = [await provider.create_device(_new(f"{POOL}:1:g1:s{i}")) for i in range(3)]
    cost = Cost()
    await _pass(t, provider, cost)
    stopped = made[0].id.partition(".")[0]
    for minute in range(1, 201):
        await t.advance(STEP)
        if minute == 60:
            answer = await t.http.post(f"/_emulator/phones/{stopped}/stop")
            assert answer.status_code == 200, answer.text
        await _pass(t, provider, cost)
    stats = await t.stats()
    assert stats["phones"]["total"] == 3 and stats["phones"]["running"] == 2
    assert stats["billing"]["capAppliedDays"] == 2
    billed = stats["billing"]["byPhone"]
    assert billed[stopped]["money"] == pytest.approx(60 * PRICE, abs=TOLERANCE_MINUTES * PRICE)
    # Both capped: the emulator and the pool each bill $1.00 a capped phone for the day.
    assert stats["moneyBilled"] == pytest.approx(2 * CAP + billed[stopped]["money"])
    assert cost.to_date == pytest.approx(stats["moneyBilled"], abs=3 * TOLERANCE_MINUTES * PRICE)
    assert cost.device_hours * 60 == pytest.approx(
        stats["minutesBilled"], abs=3 * TOLERANCE_MINUTES
    )
    assert cost.rate == 0.0  # the two running phones are capped for the rest of the day
    await provider.aclose()


async def test_the_adapter_never_rents_a_phone_monthly(t: Team) -> None:
    """Phones are added per running minute (`chargeMode` 0), never as a monthly rental: a pool
    replaces phones, and each would rent a month its cost and spend cap never count."""
    account = AccountSettings(
        name="g",
        api="geelark",
        base_url=BASE,
        app_id=DEFAULT_APP_ID,
        api_key=SecretStr(DEFAULT_API_KEY),
        price_per_hour=0.42,
        billing=Billing(model="perMinute", daily_cap=1.0),
    )
    provider = build_provider(
        account, transport=t.transport, metrics=Metrics(), scrubber=Scrubber()
    )
    await provider.create_device(_new(f"{POOL}:1:g1:s0"))
    await t.advance(3600)
    stats = await t.stats()
    assert stats["phones"]["total"] == 1 and stats["billing"]["rental"] == 0
    # What it billed is its running minutes, no month.
    assert stats["moneyBilled"] == pytest.approx(stats["minutesBilled"] * PRICE)
    await provider.aclose()
