"""A parked cloud phone left powered (its removal's shutdown late or lost) against the emulator:
the orphan sweep shuts it down again, and a claim never takes it meanwhile (F17).

The emulator carries an accepted shutdown out 60 virtual seconds later
(`phone_shutdown_seconds`); `phoneShutdownsLost` makes one never happen. The sweep's
grace is counted on a clock moved by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from devicepool.activities import orphans
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.orphan_models import FindOrphansInput
from devicepool.activities.pool_runs import PoolCheck
from devicepool.activities.providers.base import provider_call
from devicepool.activities.providers.bitbrowser.models import PhoneStatus
from devicepool.activities.providers.bitbrowser.phone_marks import (
    RETIRED_PREFIX,
    parked_mark,
    pool_prefix,
    slot_mark,
)
from devicepool.activities.providers.bitbrowser.phone_parked import PARKED_GRACE_SECONDS
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from tests.activities.conftest import bitbrowser_account
from tests.activities.test_bitbrowser_phone_provider import new_device, phones_stats, ready
from tests.helpers.bitbrowser import Account
from tests.helpers.bitbrowser_client import Node

account = bitbrowser_account(speed=20.0, seed=17, phone_shutdown_seconds=60)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def provider(n1: Node, clock: Clock) -> PhoneProvider:
    made = PhoneProvider(n1.phones)
    made.parked._clock = clock  # the sweep's grace only: every other clock is real
    return made


async def sweep(provider: PhoneProvider) -> list[str]:
    """What one orphan sweep does to the adapter: its listing, then the parked check."""
    await provider.list_managed()
    return [p.phone_id for p in await provider.shut_down_parked()]


async def listed(n1: Node, prefix: str) -> list[Any]:
    return await n1.phones.list_all(mark_prefix=prefix)


async def test_a_scale_down_whose_shutdown_never_lands_is_shut_down_by_a_later_sweep(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=1)
    await provider.remove_device(made.id)  # a scale-down: parked at once, as before
    (phone,) = await listed(n1, pool_prefix("phones-a"))
    assert phone.name == parked_mark("phones-a", "reserve")
    await account.advance(120)  # never lands
    assert (await phones_stats(account))["running"] == 1
    assert await sweep(provider) == []  # first seen powered: a shutdown may be in flight
    clock.now += PARKED_GRACE_SECONDS - 1
    assert await sweep(provider) == []
    clock.now += 1
    assert await sweep(provider) == [phone.id]
    assert await sweep(provider) == []  # sent: its grace starts over
    await account.advance(61)
    stats = await phones_stats(account)
    assert (stats["running"], stats["shutdowns"]) == (0, 1)
    clock.now += PARKED_GRACE_SECONDS
    assert await sweep(provider) == [] and provider.parked.seen == {}


async def test_a_retired_phone_left_powered_is_found_by_its_own_listing(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=1)
    with provider_call(pool="phones-a", deleting=True):
        await provider.remove_device(made.id)
    (phone,) = await listed(n1, RETIRED_PREFIX)
    assert await sweep(provider) == []
    clock.now += PARKED_GRACE_SECONDS
    assert await sweep(provider) == [phone.id]
    await account.advance(61)
    assert (await phones_stats(account))["running"] == 0


async def test_the_sweep_activity_says_it_in_its_result_and_metric(
    account: Account, provider: PhoneProvider, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=1)
    await provider.remove_device(made.id)
    acts = DeviceActivities(accounts={}, proxy_pools={})
    acts._providers["bb"] = provider

    async def check(client: Any, pool: str, account: str) -> PoolCheck:
        return PoolCheck(orphaned=False, state="RUNNING")

    monkeypatch.setattr(orphans, "check_pool", check)
    env = ActivityEnvironment(client=cast(Client, object()))
    first = await env.run(acts.find_orphans, FindOrphansInput(account="bb"))
    clock.now += PARKED_GRACE_SECONDS
    second = await env.run(acts.find_orphans, FindOrphansInput(account="bb"))
    assert (first.parked_shut_down, second.parked_shut_down) == (0, 1)
    counter = acts.metrics.parked_shut_down.labels(account="bb")
    assert counter._value.get() == 1


async def test_a_claim_skips_a_reserve_profile_still_running(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    made = await provider.create_device(new_device(slot=0))
    await ready(account, provider)
    await provider.remove_device(made.id)  # its shutdown lands 60 s later
    (parked,) = await listed(n1, pool_prefix("phones-a"))
    assert parked.status == PhoneStatus.RUNNING
    again = await provider.create_device(new_device(slot=1))
    assert again.id.split(".")[0] != parked.id
    stats = await phones_stats(account)
    assert stats["created"] == 2  # a new profile, as when the reserve is empty
    await account.advance(61)  # the shutdown landed: stopped, it is claimed next
    await provider.remove_device(again.id)
    await account.advance(61)
    reused = await provider.create_device(new_device(slot=2))
    assert reused.id.split(".")[0] in {parked.id, again.id.split(".")[0]}
    assert (await phones_stats(account))["created"] == 2


async def test_a_deletion_of_five_phones_sends_every_shutdown_in_its_first_attempt(
    account: Account, provider: PhoneProvider
) -> None:
    made = [await provider.create_device(new_device(slot=s)) for s in range(5)]
    await ready(account, provider)
    with provider_call(pool="phones-a", deleting=True):
        await asyncio.gather(*(provider.remove_device(d.id) for d in made))
    stats = await phones_stats(account)
    assert (stats["shutdowns"], stats["running"]) == (5, 5)  # accepted, none landed yet
    await account.advance(61)
    assert (await phones_stats(account))["running"] == 0


async def test_a_profile_claimed_between_the_listing_and_the_shutdown_is_left_alone(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=1)
    await provider.remove_device(made.id)
    (phone,) = await listed(n1, pool_prefix("phones-a"))
    await provider.list_managed()  # seen parked and powered
    clock.now += PARKED_GRACE_SECONDS
    await provider.list_managed()
    # Another create (another process) claims it now: its slot's mark, serving.
    mark = slot_mark("phones-a", "devicepool:phones-a:g1:s9")
    await n1.phones.update(
        phone.id, {"name": mark, "remark": phone.remark.replace("reserve", "active")}
    )
    n1.recorder.calls.clear()
    assert [p.phone_id for p in await provider.shut_down_parked()] == []
    assert [p for p, _ in n1.recorder.calls if p == "/phone/shutdown"] == []
    assert (await phones_stats(account))["running"] == 1
