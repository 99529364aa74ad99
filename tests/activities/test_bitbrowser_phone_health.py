"""A cloud phone's `/phone/running` answer as the health check sees it: kept only so long.

A listing reads `running` for a few phones (each read is a turn of the
account's one request a second) and keeps each answer `probe_seconds`. An answer
older than that is not read: the listing's word stands until the phone is read
again. Phones last read not running are read first, so one still offline keeps
reading offline. The health check's fresh read (its deadline, a change it
confirms) reads every suspect again: nothing is removed on an old answer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities
from devicepool.activities.device_models import OFFLINE, READY
from devicepool.activities.models import DeviceInfo, ListDevicesInput
from devicepool.activities.providers.base import current_call, provider_call
from devicepool.activities.providers.bitbrowser.phone_marks import (
    MARK_PREFIX,
    Remark,
    parse_device_id,
    pool_prefix,
)
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from tests.activities.conftest import bitbrowser_account
from tests.activities.test_bitbrowser_phone_provider import SPEED, new_device, phones_stats
from tests.activities.test_health_reads import POOL as HEALTH_POOL
from tests.activities.test_health_reads import (
    health_env,
    health_input,
    make_devices,
    pool_still_runs,  # noqa: F401  (autouse fixture: the pool runs)
    worker_process,
)
from tests.helpers.bitbrowser import Account
from tests.helpers.bitbrowser_client import Node
from tests.helpers.emulator import Emulator

POOL = "phones-a"
PHONES = 8


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


account = bitbrowser_account(speed=SPEED, seed=5)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def phones(
    account: Account, n1: Node, clock: Clock
) -> tuple[PhoneProvider, list[str], list[str]]:
    """A pool of `PHONES` running phones, every answer read once (at the fake clock)."""
    provider = PhoneProvider(n1.phones, probe_seconds=100.0, clock=clock)
    for slot in range(PHONES):
        await provider.create_device(new_device(slot=slot))
    await account.advance(61)
    listed = await provider.list_pool(POOL)
    order = [d.id for d in listed]  # the listing's order: who is read first at a tie
    return provider, order, [(parse_device_id(i) or ("", 0))[0] for i in order]


async def _statuses(provider: PhoneProvider) -> dict[str, str]:
    return {d.id: d.status for d in await provider.list_pool(POOL)}


def _reads(n1: Node) -> list[str]:
    return [body["id"] for body in n1.recorder.bodies("/phone/running")]


async def _one_gone_offline(
    account: Account, n1: Node, clock: Clock
) -> tuple[PhoneProvider, DeviceInfo, str]:
    """One phone of the pool, booted, then offline for 200 s of the fake clock (its last
    answer, running, is old): the provider, the device and its phone id."""
    provider = PhoneProvider(n1.phones, probe_seconds=100.0, clock=clock)
    made = await provider.create_device(new_device())
    await account.advance(61)
    phone_id = (parse_device_id(made.id) or ("", 0))[0]
    await account.control(f"phones/{phone_id}/offline")
    clock.now += 200
    return provider, made, phone_id


async def _six_running_read_long_ago(
    account: Account, n1: Node
) -> tuple[PhoneProvider, list[DeviceInfo]]:
    """Six phones of the pool running, listed once, their `running` answers old now."""
    provider = PhoneProvider(n1.phones)
    made = [await provider.create_device(new_device(slot=s)) for s in range(6)]
    await account.advance(61)
    await provider.list_pool(POOL)
    await account.advance(60)
    return provider, made


def _fresh_flags(acts: DeviceActivities) -> list[bool]:
    """From now on, for each listing of the default account's pool: asked fresh or not."""
    provider = acts._provider("default")
    real = provider.list_pool
    calls: list[bool] = []

    async def seen(*args: Any, **kwargs: Any) -> Any:
        calls.append(current_call().fresh)
        return await real(*args, **kwargs)

    provider.list_pool = seen  # type: ignore[method-assign]
    return calls


async def test_an_old_offline_answer_keeps_a_phone_offline_until_a_fresh_read(
    account: Account, n1: Node, clock: Clock, phones: tuple[PhoneProvider, list[str], list[str]]
) -> None:
    """Issue 37 item 4, as the review of its fix refined it: an answer past its keep time
    may keep a phone out of service (offline), never be why a healthy one goes. A
    plain listing shows it offline until the phone is read again; the health check's
    fresh read, the one it removes on, reads it and finds it back."""
    provider, devices, phone_ids = phones
    last = phone_ids[-1]
    await account.control(f"phones/{last}/offline")
    provider.reads.probes_per_listing = PHONES
    clock.now += 200  # every answer old: all read again
    assert (await _statuses(provider))[devices[-1]] == OFFLINE
    await account.control(f"phones/{last}/online")
    clock.now += 200  # that answer is old now
    provider.reads.probes_per_listing = 0  # and no read on this listing
    assert (await _statuses(provider))[devices[-1]] == OFFLINE
    before = len(_reads(n1))
    with provider_call(fresh=True):
        assert (await _statuses(provider))[devices[-1]] == READY
    assert _reads(n1)[before:] == [last]


async def test_phones_still_offline_keep_reading_offline_when_their_answers_expire_together(
    account: Account, n1: Node, clock: Clock, phones: tuple[PhoneProvider, list[str], list[str]]
) -> None:
    """Review of issue 37 item 4, defect 1. Before: four phones read offline at once saw
    their answers expire together; a listing re-read three and showed the fourth
    READY on the listing's word. Its status swung at every keep time: the pool's
    fingerprint changed, the health check's confirm read (every suspect) ran again,
    ~K calls a minute while remediation was held, and the phone became a READY
    scale-down candidate. Now it stays offline, and a listing reads at most its few."""
    provider, devices, phone_ids = phones
    for phone_id in phone_ids[-4:]:
        await account.control(f"phones/{phone_id}/offline")
    with provider_call(fresh=True):
        provider.reads.probes_per_listing = PHONES
        clock.now += 200
        seen = await _statuses(provider)
    assert [seen[d] for d in devices[-4:]] == [OFFLINE] * 4
    provider.reads.probes_per_listing = 3  # the default
    for _ in range(6):  # three minutes of the pool's watch, answers just past their keep
        clock.now += 101
        before = len(_reads(n1))
        seen = await _statuses(provider)
        assert [seen[d] for d in devices[-4:]] == [OFFLINE] * 4
        assert [seen[d] for d in devices[:-4]] == [READY] * (PHONES - 4)
        assert len(_reads(n1)) - before <= 3


async def test_a_scale_down_reads_a_phone_last_read_offline_before_it_parks_it(
    account: Account, n1: Node, clock: Clock
) -> None:
    """Review defect 1's side effect. Before: an expired offline answer read READY, so the
    scale-down's idle check (`get_device`, no read) passed a broken phone and its
    removal read nothing: parked into reserve without a fresh start, powered on
    broken at the next scale-up. Now the idle check sees it offline, and a removal
    of a phone last read not running reads it first."""
    provider, made, phone_id = await _one_gone_offline(account, n1, clock)
    (listed,) = await provider.list_pool(POOL)
    assert listed.status == OFFLINE
    clock.now += 200  # that answer is old now
    with provider_call(pool="", replacement=False):
        assert (await provider.get_device(made.id)).info.status == OFFLINE
        await provider.remove_device(made.id)
    stats = await phones_stats(account)
    assert (stats["recovers"], stats["running"]) == (1, 0)
    assert _reads(n1)[-1] == phone_id


async def test_a_deleted_pools_phone_last_read_offline_is_retired_unread_and_unrepaired(
    account: Account, n1: Node, clock: Clock
) -> None:
    """Second review of issue 37, defect 2. Before: terminate_pool's removal of a phone
    last read offline read it (`/phone/running`) and fresh-started it (`recover`, one of
    the month's few) to park it in reserve, seconds before release_pool retired it: ~2
    calls a phone on the account's 1 request/s, and a fresh start, for nothing. Now a
    removal for a deletion (`provider_call(deleting=True)`, terminate_pool's) shuts it
    down and retires it."""
    provider, made, _ = await _one_gone_offline(account, n1, clock)
    assert (await provider.list_pool(POOL))[0].status == OFFLINE
    clock.now += 200
    before = len(n1.recorder.calls)
    with provider_call(pool=POOL, deleting=True):
        await provider.remove_device(made.id)
        assert await provider.release_pool(POOL) == 1
    paths = [path for path, _ in n1.recorder.calls[before:]]
    stats = await phones_stats(account)
    assert (stats["recovers"], stats["running"]) == (0, 0), paths
    assert not any(path.endswith("/phone/running") for path in paths), paths
    (phone,) = await n1.phones.list_all()
    assert Remark.parse(phone.remark).state == "retired"  # type: ignore[union-attr]


async def test_a_scale_down_of_a_phone_back_since_its_old_offline_answer_keeps_it_as_is(
    account: Account, n1: Node, clock: Clock
) -> None:
    """The other side: the phone came back; the removal's read finds it running and
    spends no fresh start (a month's quota) on it."""
    provider, made, phone_id = await _one_gone_offline(account, n1, clock)
    assert (await provider.list_pool(POOL))[0].status == OFFLINE
    await account.control(f"phones/{phone_id}/online")
    clock.now += 200
    with provider_call(pool=POOL, replacement=False):
        await provider.remove_device(made.id)
    stats = await phones_stats(account)
    assert (stats["recovers"], stats["running"]) == (0, 0)


async def test_a_phone_read_not_running_is_read_first_and_stays_offline_while_it_is(
    account: Account, n1: Node, clock: Clock, phones: tuple[PhoneProvider, list[str], list[str]]
) -> None:
    provider, devices, phone_ids = phones
    provider.reads.probes_per_listing = PHONES
    await account.control(f"phones/{phone_ids[-1]}/offline")
    clock.now += 200
    assert (await _statuses(provider))[devices[-1]] == OFFLINE
    provider.reads.probes_per_listing = 1
    for _ in range(4):
        clock.now += 150  # every answer old at each listing: the suspect goes first
        before = len(_reads(n1))
        assert (await _statuses(provider))[devices[-1]] == OFFLINE
        assert _reads(n1)[before:] == [phone_ids[-1]]
    await account.control(f"phones/{phone_ids[-1]}/online")
    clock.now += 150
    assert (await _statuses(provider))[devices[-1]] == READY


async def test_a_fresh_read_reads_every_suspect_again(
    account: Account, n1: Node, clock: Clock, phones: tuple[PhoneProvider, list[str], list[str]]
) -> None:
    """Before: the health check's read at its deadline went through the same listing,
    which read at most three phones: a phone back for a minute was removed on its old
    answer."""
    provider, devices, phone_ids = phones
    provider.reads.probes_per_listing = PHONES
    for phone_id in phone_ids[-3:]:
        await account.control(f"phones/{phone_id}/offline")
    clock.now += 200
    seen = await _statuses(provider)
    assert [seen[d] for d in devices[-3:]] == [OFFLINE] * 3
    for phone_id in phone_ids[-3:-1]:
        await account.control(f"phones/{phone_id}/online")  # two are back
    provider.reads.probes_per_listing = 1
    clock.now += 10  # well within the keep time
    assert [(await _statuses(provider))[d] for d in devices[-3:]] == [OFFLINE] * 3
    before = len(_reads(n1))
    with provider_call(fresh=True):
        fresh = await _statuses(provider)
    assert [fresh[d] for d in devices[-3:]] == [READY, READY, OFFLINE]
    assert sorted(_reads(n1)[before:]) == sorted(phone_ids[-3:])  # the suspects, no more


async def test_the_health_checks_fresh_read_is_made_as_fresh(emulator: Emulator) -> None:
    """`watch_health`'s read at a deadline (`once`, `until`) tells the provider so."""
    acts: DeviceActivities = worker_process(emulator)
    try:
        await make_devices(acts, 1)
        calls = _fresh_flags(acts)
        await health_env().run(acts.watch_health, health_input(once=True))
        assert calls == [True]
        await ActivityEnvironment().run(
            acts.list_devices, ListDevicesInput(account="default", pool=HEALTH_POOL)
        )
        assert calls == [True, False]  # the pool's own listings keep their few reads
    finally:
        await acts.aclose()


async def test_a_change_on_the_health_checks_own_plain_read_is_read_fresh_before_it_is_answered(
    emulator: Emulator,
) -> None:
    """The check acts on what it is answered (a device whose clock ran out goes, when a
    pause ends), and a plain read may show a phone offline on an old answer. Before:
    a change seen on the watch's own periodic read was answered as read (not fresh),
    so only a change on the pool's shared listing was read again."""
    acts: DeviceActivities = worker_process(emulator)
    try:
        victim, _ = await make_devices(acts, 2)
        (await emulator.control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
        calls = _fresh_flags(acts)
        health = health_input(poll_seconds=0.05, max_seconds=5, own_read_seconds=10.0)
        found = await health_env().run(acts.watch_health, health)
        assert [s.id for s in found.suspects] == [victim]
        assert calls == [False, True]
    finally:
        await acts.aclose()


# ------------------------------------------------------------ retired profiles


async def test_retired_profiles_leave_the_pools_and_the_accounts_listings(
    account: Account, n1: Node
) -> None:
    """The API has no delete: a retired profile stays for good. Named under the pool's
    prefix, every listing of the pool (and the account's, the orphan sweep's) paged
    through them: one second more per 100 at one request a second."""
    provider = PhoneProvider(n1.phones)
    made = [await provider.create_device(new_device(slot=s)) for s in range(3)]
    await account.advance(61)
    with provider_call(pool=POOL, reserve_keep=1):
        for device in made:
            await provider.remove_device(device.id)
    # What the pool's own listing filter (`name`, fuzzy) answers: its live profiles only.
    live = await n1.phones.list_all(mark_prefix=pool_prefix(POOL))
    assert [Remark.parse(p.remark).state for p in live] == ["reserve"]  # type: ignore[union-attr]
    assert len(await n1.phones.list_all(mark_prefix=MARK_PREFIX)) == 1
    everything = await n1.phones.list_all()
    states = sorted(Remark.parse(p.remark).state for p in everything)  # type: ignore[union-attr]
    assert states == ["reserve", "retired", "retired"]
    # A deleted pool still says how many profiles the account keeps under its name.
    assert await provider.release_pool(POOL) == 3
    assert await provider.release_pool(POOL) == 3  # a retry after a lost answer
    assert await n1.phones.list_all(mark_prefix=pool_prefix(POOL)) == []
    assert await provider.list_pool(POOL) == []
    assert (await phones_stats(account))["profiles"] == 3


# ------------------------------------------------------------ scale-down cost


async def test_a_scale_down_costs_at_most_two_requests_a_phone(account: Account, n1: Node) -> None:
    """What `terminate_device` does for a scale-down (`only_if_idle`): an idle check
    (`get_device`), then `remove_device`, for every phone at once. Before: a look-up
    by `seq` for each, a `running` read for each, often a second look-up, then the
    shutdown and the re-mark: 4-5 requests a phone (`bench/cloud_phones.py`)."""
    provider, made = await _six_running_read_long_ago(account, n1)
    before = len(n1.recorder.calls)

    async def scale_down(device_id: str) -> None:
        with provider_call(pool=POOL, replacement=False):
            info = (await provider.get_device(device_id)).info
            assert info.status == READY
            await provider.remove_device(device_id)

    await asyncio.gather(*(scale_down(d.id) for d in made))
    paths = [p for p, _ in n1.recorder.calls[before:]]
    assert paths.count("/phone/shutdown") == 6 and paths.count("/phone/profile/update") == 6
    assert len(paths) <= 2 * 6 + 1, paths
    stats = await phones_stats(account)
    assert stats["running"] == 0


@pytest.mark.parametrize("keep", [10, 2])
async def test_a_scale_down_keeping_a_reserve_still_costs_two_requests_a_phone(
    account: Account, n1: Node, keep: int
) -> None:
    """Review defect 3. With `spec.reserve.keep` set, each removal counted the pool's
    reserve in a listing of its own (under the pool's park lock, so never shared):
    6 phones scaled down took 19 calls (bound 13). The terminate activity names no
    pool (`pool=""`), as here: the adapter finds it."""
    provider, made = await _six_running_read_long_ago(account, n1)
    before = len(n1.recorder.calls)

    async def scale_down(device_id: str) -> None:
        with provider_call(pool="", replacement=False, reserve_keep=keep):
            assert (await provider.get_device(device_id)).info.status == READY
            await provider.remove_device(device_id)

    await asyncio.gather(*(scale_down(d.id) for d in made))
    paths = [p for p, _ in n1.recorder.calls[before:]]
    assert len(paths) <= 2 * 6 + 1, paths
    states = Counter(
        Remark.parse(p.remark).state  # type: ignore[union-attr]
        for p in await n1.phones.list_all()
    )
    assert (states["reserve"], states["retired"]) == (min(keep, 6), 6 - min(keep, 6))
    assert (await phones_stats(account))["running"] == 0


async def test_a_phone_scaled_down_while_read_offline_is_still_fresh_started(
    account: Account, n1: Node, clock: Clock
) -> None:
    provider, made, _ = await _one_gone_offline(account, n1, clock)
    (listed,) = await provider.list_pool(POOL)
    assert listed.status == OFFLINE  # read for this listing, and kept
    with provider_call(pool=POOL, replacement=False):
        await provider.remove_device(made.id)
    stats = await phones_stats(account)
    assert (stats["recovers"], stats["running"]) == (1, 0)
