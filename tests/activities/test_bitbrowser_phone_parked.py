"""A parked cloud phone left powered (its removal's shutdown late or lost) against the emulator:
the orphan sweep shuts a reserve-marked one down again (F17, narrowed in F19 after R24).

The emulator carries an accepted shutdown out 60 virtual seconds later
(`phone_shutdown_seconds`); `phoneShutdownsLost` makes one never happen. The sweep's
grace is counted on a clock moved by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from devicepool.activities import orphans
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.orphan_models import FindOrphansInput
from devicepool.activities.pool_runs import PoolCheck
from devicepool.activities.providers.base import provider_call
from devicepool.activities.providers.bitbrowser.errors import (
    LocalApiBusyError,
    LocalApiUnavailableError,
)
from devicepool.activities.providers.bitbrowser.models import PhoneStatus
from devicepool.activities.providers.bitbrowser.phone_marks import (
    RETIRED_PREFIX,
    parked_mark,
    pool_prefix,
    slot_mark,
)
from devicepool.activities.providers.bitbrowser.phone_parked import PARKED_GRACE_SECONDS
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from devicepool.api.errors import ErrorType
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


async def parked_with_its_shutdown_lost(
    account: Account, provider: PhoneProvider, device: Any
) -> None:
    """A phone made ready, then scaled down (parked in the reserve at once) with its
    shutdown accepted and lost: what the sweep is for."""
    made = await provider.create_device(device)
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=1)
    await provider.remove_device(made.id)


async def listed(n1: Node, prefix: str) -> list[Any]:
    return await n1.phones.list_all(mark_prefix=prefix)


async def test_a_scale_down_whose_shutdown_never_lands_is_shut_down_by_a_later_sweep(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    await parked_with_its_shutdown_lost(account, provider, new_device())
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


async def test_a_retired_phone_left_powered_is_a_known_gap_and_costs_no_listing(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    """R24 #2: the retired profiles are never listed by the sweep (they only grow). A
    retired phone whose shutdown was lost bills on: docs/providers.md says so."""
    made = await provider.create_device(new_device())
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=1)
    with provider_call(pool="phones-a", deleting=True):
        await provider.remove_device(made.id)
    assert len(await listed(n1, RETIRED_PREFIX)) == 1
    assert await sweep(provider) == []
    clock.now += PARKED_GRACE_SECONDS
    n1.recorder.calls.clear()
    assert await sweep(provider) == []
    assert [p for p, _ in n1.recorder.calls] == ["/phone/list"]  # the managed listing only
    assert (await phones_stats(account))["running"] == 1  # the known gap


async def parked_powered(
    account: Account, provider: PhoneProvider, clock: Clock, count: int
) -> list[str]:
    """`count` reserve phones whose shutdowns were lost, seen powered in that order and
    due now: their ids, oldest sighting first."""
    made = [await provider.create_device(new_device(slot=s)) for s in range(count)]
    await ready(account, provider)
    await account.faults(phoneShutdownsLost=count)
    ids: list[str] = []
    for d in made:
        await provider.remove_device(d.id)
        await provider.list_managed()
        (new,) = set(provider.parked.seen) - set(ids)
        ids.append(new)
        clock.now += 1
    clock.now += PARKED_GRACE_SECONDS
    return ids


async def test_a_refused_shutdown_does_not_stop_the_pass_and_goes_last(
    account: Account,
    provider: PhoneProvider,
    n1: Node,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R24 #1: the oldest due phone's shutdown is refused: the others are sent in the same
    pass, and the refused one waits behind them next time."""
    ids = await parked_powered(account, provider, clock, 3)
    real = n1.phones.shutdown

    async def shutdown(phone_id: str) -> None:
        if phone_id == ids[0]:
            raise LocalApiBusyError(ErrorType.INVALID_STATE, 200, "正在关闭中")
        await real(phone_id)

    n1.phones.shutdown = shutdown  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING)
    assert [p.phone_id for p in await provider.shut_down_parked()] == ids[1:]
    assert any(ids[0] in r.getMessage() and "正在" not in r.getMessage() for r in caplog.records)
    assert provider.parked.seen[ids[0]][0] == clock.now  # its turn starts over: after the others
    await account.advance(61)
    assert (await phones_stats(account))["running"] == 1


async def test_a_failed_re_read_is_passed_over_and_what_was_sent_is_said(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    ids = await parked_powered(account, provider, clock, 3)
    real = n1.phones.list_page

    async def list_page(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("seq") == provider.listings.seqs[ids[1]]:
            raise LocalApiUnavailableError(ErrorType.SERVER_ERROR, 200, "系统繁忙")
        return await real(*args, **kwargs)

    n1.phones.list_page = list_page  # type: ignore[method-assign]
    assert [p.phone_id for p in await provider.shut_down_parked()] == [ids[0], ids[2]]


async def test_the_pass_starts_no_shutdown_past_its_budget(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    """R24 #3: each phone here takes 10 s; a 15 s budget starts two, the third waits."""
    ids = await parked_powered(account, provider, clock, 3)
    real = n1.phones.shutdown

    async def shutdown(phone_id: str) -> None:
        clock.now += 10
        await real(phone_id)

    n1.phones.shutdown = shutdown  # type: ignore[method-assign]
    sent: list[Any] = []
    got = await provider.shut_down_parked(budget_seconds=15, sent=sent)
    assert [p.phone_id for p in got] == [p.phone_id for p in sent] == ids[:2]
    assert provider.parked.seen[ids[2]][0] < clock.now - PARKED_GRACE_SECONDS  # still due


async def test_a_phone_claimed_and_parked_again_gets_a_grace_of_its_own(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    """R24 #5: a claim and a park forget the first sighting: the new removal's shutdown,
    in flight, is not doubled."""
    (phone,) = await parked_powered(account, provider, clock, 1)
    again = await provider.create_device(new_device(slot=5))  # claims it (listed powered)
    assert again.id.split(".")[0] == phone
    assert provider.parked.seen == {}
    await provider.remove_device(again.id)  # parked again, a shutdown in flight
    n1.recorder.calls.clear()
    assert await sweep(provider) == []
    clock.now += PARKED_GRACE_SECONDS - 1
    assert await sweep(provider) == []
    assert [p for p, _ in n1.recorder.calls if p == "/phone/shutdown"] == []


async def test_a_due_phone_without_seq_is_said_once(
    account: Account,
    provider: PhoneProvider,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (phone,) = await parked_powered(account, provider, clock, 1)
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        await provider.list_managed()
        provider.listings.seqs.pop(phone)
        clock.now += PARKED_GRACE_SECONDS
        assert await provider.shut_down_parked() == []
    said = [r for r in caplog.records if phone in r.getMessage() and "seq" in r.getMessage()]
    assert len(said) == 1


async def test_the_sweep_activity_says_it_in_its_result_and_metric(
    account: Account, provider: PhoneProvider, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await parked_with_its_shutdown_lost(account, provider, new_device())
    acts = DeviceActivities(accounts={}, proxy_pools={})
    acts._providers["bb"] = provider

    async def check(client: Any, pool: str, account: str) -> PoolCheck:
        return PoolCheck(orphaned=False, state="RUNNING")

    monkeypatch.setattr(orphans, "check_pool", check)
    env = scan_env()
    first = await env.run(acts.find_orphans, FindOrphansInput(account="bb"))
    clock.now += PARKED_GRACE_SECONDS
    second = await env.run(acts.find_orphans, FindOrphansInput(account="bb"))
    assert (first.parked_shut_down, second.parked_shut_down) == (0, 1)
    counter = acts.metrics.parked_shut_down.labels(account="bb")
    assert counter._value.get() == 1


def scan_env(start_to_close: float = 120) -> ActivityEnvironment:
    """An attempt of `find_orphans` begun now, with the workflow's start-to-close."""
    env = ActivityEnvironment(client=cast(Client, object()))
    env.info = dataclasses.replace(
        env.info,
        started_time=datetime.now(UTC),
        start_to_close_timeout=timedelta(seconds=start_to_close),
    )
    return env


async def test_a_hanging_parked_pass_never_times_the_scan_out(
    account: Account,
    provider: PhoneProvider,
    n1: Node,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R24 #3: the pass is cut within its share of the attempt; what it sent is said."""
    ids = await parked_powered(account, provider, clock, 2)
    real = n1.phones.shutdown

    async def shutdown(phone_id: str) -> None:
        if phone_id == ids[1]:
            await asyncio.sleep(3600)  # a pacer queue that never reaches the sweep
        await real(phone_id)

    n1.phones.shutdown = shutdown  # type: ignore[method-assign]
    acts = DeviceActivities(accounts={}, proxy_pools={})
    acts._providers["bb"] = provider

    async def check(client: Any, pool: str, account: str) -> PoolCheck:
        return PoolCheck(orphaned=False, state="RUNNING")

    monkeypatch.setattr(orphans, "check_pool", check)
    began = time.monotonic()
    result = await scan_env(start_to_close=4).run(acts.find_orphans, FindOrphansInput(account="bb"))
    assert time.monotonic() - began < 4 * 0.6
    assert result.parked_shut_down == 1


async def test_a_claim_takes_a_reserve_profile_still_running_a_known_limit(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    """R24 #4: a claim takes a reserve profile still listed powered (no new profile while
    its shutdown is in flight). The known limit (docs/providers.md): that shutdown may land
    after the claim, leaving the claimed phone off; its pool's health then sees it off."""
    made = await provider.create_device(new_device(slot=0))
    await ready(account, provider)
    await provider.remove_device(made.id)  # its shutdown lands 60 s later
    (parked,) = await listed(n1, pool_prefix("phones-a"))
    assert parked.status == PhoneStatus.RUNNING
    again = await provider.create_device(new_device(slot=1))
    assert again.id.split(".")[0] == parked.id
    assert (await phones_stats(account))["created"] == 1


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
    await parked_with_its_shutdown_lost(account, provider, new_device())
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


async def test_a_phone_the_sweep_just_shut_down_is_not_claimed_while_that_shutdown_lands(
    account: Account, provider: PhoneProvider, n1: Node, clock: Clock
) -> None:
    """R25 #1: the sweep sends a lost shutdown again; a create right after must not take
    that phone (listed running, it would get no power-on and go off under its new slot
    mark when the shutdown lands): it makes a new profile, and the old one is off."""
    await parked_with_its_shutdown_lost(account, provider, new_device(slot=0))
    (parked,) = await listed(n1, pool_prefix("phones-a"))
    await account.advance(120)  # never lands
    assert await sweep(provider) == []
    clock.now += PARKED_GRACE_SECONDS
    assert await sweep(provider) == [parked.id]  # sent again, lands 60 s later
    again = await provider.create_device(new_device(slot=1))
    assert again.id.split(".")[0] != parked.id
    await account.advance(61)
    by_id = {p.id: p for p in await listed(n1, pool_prefix("phones-a"))}
    assert by_id[parked.id].status != PhoneStatus.RUNNING
    assert by_id[parked.id].name == parked_mark("phones-a", "reserve")
    # Past the hold, it is claimed again like any reserve profile.
    clock.now += PARKED_GRACE_SECONDS
    third = await provider.create_device(new_device(slot=2))
    assert third.id.split(".")[0] == parked.id
