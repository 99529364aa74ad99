"""The engine's activities on an `api: bitbrowser` account: whom each call serves reaches the
account's pacer (pool, replacement), and a pool's teardown retires what it kept.

`DeviceActivities` builds the adapter itself (`providers.registry`) and talks to the
in-process BitBrowser emulator; activities run in `ActivityEnvironment`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import (
    CreateDeviceInput,
    DeviceTemplate,
    ListDevicesInput,
    TerminateDeviceInput,
    TerminatePoolInput,
)
from devicepool.activities.providers.bitbrowser import PhonePacer, PhoneProvider
from devicepool.activities.providers.bitbrowser.phone_provider import ANDROID_ONLY
from tests.activities.conftest import bitbrowser_account
from tests.helpers.bitbrowser import Account
from tests.helpers.phones import phone_activities

SPEED = 5.0


account = bitbrowser_account(speed=SPEED, seed=3)


@pytest.fixture
async def acts(account: Account) -> AsyncIterator[DeviceActivities]:
    activities = phone_activities(account, interval=0.25)
    yield activities
    await activities.aclose()


def pacer(acts: DeviceActivities) -> PhonePacer:
    provider = acts._provider("phones")
    assert isinstance(provider, PhoneProvider)
    return provider.phones.pacer


def create(
    pool: str, slot: int, *, replacement: bool = False, platform: str = "android"
) -> CreateDeviceInput:
    return CreateDeviceInput(
        account="phones",
        pool=pool,
        template=DeviceTemplate(platform=platform, region="r-1", os_version="14", proxy_pool="gw"),
        name=f"{pool}-{slot}",
        idempotency_key=f"devicepool:{pool}:g1:s{slot}",
        replacement=replacement,
    )


async def test_each_call_takes_its_turn_as_its_pool_and_a_replacement_first(
    acts: DeviceActivities,
) -> None:
    env = ActivityEnvironment()
    turns = pacer(acts)
    await env.run(acts.create_device, create("pa", 0))
    # one listing of the pool (the mark's look-up and its reserve: none), the add, the power-on
    assert (turns.turns["pa"], turns.replacement_turns) == (3, 0)
    made = await env.run(acts.create_device, create("pb", 0, replacement=True))
    assert (turns.turns["pb"], turns.replacement_turns) == (3, 3)
    await env.run(acts.list_devices, ListDevicesInput(account="phones", pool="pa"))
    assert turns.turns["pa"] == 4 and turns.replacement_turns == 3
    # An unhealthy device's removal is a replacement's first step; a scale-down is not.
    await env.run(
        acts.terminate_device,
        TerminateDeviceInput(account="phones", device_id=made.device.id, pool="pb"),
    )
    assert turns.replacement_turns > 3 and set(turns.turns) == {"pa", "pb"}


async def test_an_ios_create_fails_for_good_naming_android_only(acts: DeviceActivities) -> None:
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(acts.create_device, create("pi", 0, platform="ios"))
    assert caught.value.non_retryable and ANDROID_ONLY in str(caught.value)
    assert pacer(acts).calls == 0


async def test_a_pool_teardown_shuts_every_phone_down_and_retires_the_profiles(
    account: Account, acts: DeviceActivities
) -> None:
    env = ActivityEnvironment()
    for slot in range(2):
        await env.run(acts.create_device, create("pt", slot))
    await account.advance(61)
    done = await env.run(acts.terminate_pool, TerminatePoolInput(account="phones", pool="pt"))
    assert (done.terminated, done.remaining) == (2, 0)
    phones = (await account.stats())["phones"]
    assert (phones["running"], phones["profiles"], phones["shutdowns"]) == (0, 2, 2)
    await asyncio.sleep(1.2 / SPEED)  # a second (virtual) after the adapter's last call
    listed = await account.ok("/phone/list", {"page": 0, "pageSize": 100})
    assert sorted(" dp.state=retired " in f" {p['remark']} " for p in listed["list"]) == [
        True,
        True,
    ]


async def test_a_pool_teardown_retires_a_phone_read_offline_without_a_fresh_start(
    account: Account, acts: DeviceActivities
) -> None:
    """Second review of issue 37, defect 2, through terminate_pool. Before: the removal
    of a phone its listing read offline fresh-started it (`recover`, one of the month's
    few) to park it in reserve, seconds before release_pool retired it (recovers == 1).
    terminate_pool says it deletes the pool (`provider_call(deleting=True)`)."""
    env = ActivityEnvironment()
    made = await env.run(acts.create_device, create("pt", 0))
    await account.advance(61)
    await account.control(f"phones/{made.device.id.rpartition('.')[0]}/offline")
    listed = await env.run(acts.list_devices, ListDevicesInput(account="phones", pool="pt"))
    assert [d.status for d in listed.devices] == ["offline"]
    done = await env.run(acts.terminate_pool, TerminatePoolInput(account="phones", pool="pt"))
    assert (done.terminated, done.remaining, done.retired) == (1, 0, 1)
    phones = (await account.stats())["phones"]
    assert (phones["recovers"], phones["running"], phones["shutdowns"]) == (0, 0, 1)


async def test_a_retired_phone_is_retired_never_parked_and_served_again(
    account: Account, acts: DeviceActivities
) -> None:
    # Past lifetime.maxAge, a person's `replace --when-idle`, a rollout's drift: the pool
    # removes it only if idle, as a scale-down, but says it retires it. Before, it was
    # parked in reserve and the replacement's create took it back as a new device (same
    # identity, data, any ban). Now retired: no fresh start spent, a new profile added.
    env = ActivityEnvironment()
    made = await env.run(acts.create_device, create("pr", 0))
    await account.advance(61)
    retire = TerminateDeviceInput(
        account="phones",
        device_id=made.device.id,
        pool="pr",
        only_if_idle=True,
        reserve_keep=2,
        retiring=True,
    )
    done = await env.run(acts.terminate_device, retire)
    assert done.skipped is None and not done.already_gone
    phones = (await account.stats())["phones"]
    assert (phones["recovers"], phones["running"], phones["shutdowns"]) == (0, 0, 1)
    await asyncio.sleep(1.2 / SPEED)
    (listed,) = (await account.ok("/phone/list", {"page": 0, "pageSize": 100}))["list"]
    assert " dp.state=retired " in f" {listed['remark']} " and listed["name"].startswith("dvr-")
    await asyncio.sleep(1.2 / SPEED)  # that listing's turn of the budget
    again = await env.run(acts.create_device, create("pr", 1))
    assert again.device.id.rpartition(".")[0] != made.device.id.rpartition(".")[0]
    assert (await account.stats())["phones"]["created"] == 2
