"""Contract tests: the `bitbrowser` adapter (DevicePool on cloud phones) against the emulator.

The emulator runs 5 times faster than real time (its budget of 1 request per
virtual second is one per 0.2 s); the adapter paces at 0.25 s. Boots are
skipped with the emulator's clock. The emulator's stats are the ground truth:
profiles made (`created`), power-ons, shutdowns, recovers, the budget.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import SecretStr

from devicepool.activities.device_models import OFFLINE, PROVISIONING, READY
from devicepool.activities.errors import InvalidArgumentError, NotFoundError, ProviderError
from devicepool.activities.models import DeviceTemplate, template_hash
from devicepool.activities.providers.base import NewDevice, provider_call
from devicepool.activities.providers.bitbrowser import PhonePacer
from devicepool.activities.providers.bitbrowser.phone_marks import (
    Remark,
    parse_device_id,
    pool_prefix,
    slot_mark,
)
from devicepool.activities.providers.bitbrowser.phone_provider import ANDROID_ONLY, PhoneProvider
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_SLOT, LABEL_TEMPLATE_HASH
from tests.activities.conftest import LostAnswer, bitbrowser_account
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.bitbrowser_client import PHONE_PACE, Node, node

SPEED = 20.0
PACE = PHONE_PACE
REGION = "d69bcf13db844d1cb81e779f64161223"
PROXY_PASSWORD = "phone-proxy-pass-Qv7"
TEMPLATE = DeviceTemplate(platform="android", region=REGION, os_version="13", proxy_pool="gw")


def new_device(
    pool: str = "phones-a", slot: int = 0, template: DeviceTemplate = TEMPLATE
) -> NewDevice:
    return NewDevice(
        template=template,
        name=f"{pool}-{slot}",
        labels={
            LABEL_SLOT: str(slot),
            LABEL_POOL: pool,
            LABEL_MANAGED_BY: "devicepool",
            LABEL_TEMPLATE_HASH: template_hash(template),
        },
        idempotency_key=f"devicepool:{pool}:g1:s{slot}",
        proxy=ResolvedProxy(
            pool="gw",
            type="socks5",
            host="gw.proxy.test",
            port=1080,
            username=f"user-session-{slot}",
            password=SecretStr(PROXY_PASSWORD),
        ),
    )


account = bitbrowser_account(speed=SPEED, seed=5, phone_recovers_per_month=1)


@pytest.fixture
def provider(n1: Node) -> PhoneProvider:
    return PhoneProvider(n1.phones)


async def phones_stats(account: Account) -> dict[str, Any]:
    return dict((await account.stats())["phones"])


async def two_in_reserve(account: Account, provider: PhoneProvider) -> None:
    """Two phones of `phones-a` created, booted and removed: two profiles in its reserve."""
    made = [await provider.create_device(new_device(slot=s)) for s in range(2)]
    await ready(account, provider)
    for device in made:
        await provider.remove_device(device.id)


async def ready(account: Account, provider: PhoneProvider, pool: str = "phones-a") -> list[Any]:
    await account.advance(61)  # a boot from off takes about a minute
    return await provider.list_pool(pool)


async def test_a_create_boots_a_marked_profile_that_lists_ready_with_its_labels(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    new = new_device()
    made = await provider.create_device(new)
    assert made.status == PROVISIONING and parse_device_id(made.id) is not None
    phone_id, incarnation = parse_device_id(made.id) or ("", 0)
    assert incarnation == 1
    (listed,) = await ready(account, provider)
    assert (listed.id, listed.status, listed.region) == (made.id, READY, REGION)
    assert listed.labels == dict(new.labels)
    (phone,) = await n1.phones.find_by_mark(slot_mark("phones-a", new.idempotency_key))
    assert phone.id == phone_id and phone.name.startswith(pool_prefix("phones-a"))
    remark = Remark.parse(phone.remark)
    assert remark is not None and (remark.state, remark.pool) == ("active", "phones-a")
    stats = await phones_stats(account)
    assert (stats["created"], stats["powerOns"], stats["running"]) == (1, 1, 1)
    assert (await provider.get_device(made.id)).platform == "android"
    assert await provider.list_pool("phones-b") == []


async def test_a_retry_after_a_lost_add_answer_finds_the_mark_and_rents_nothing_more(
    account: Account, lost_answer: LostAnswer
) -> None:
    client = node(account, timeout=0.5, pacer=PhonePacer(interval=PACE))
    provider = PhoneProvider(client.phones)
    client.recorder.before, lost = lost_answer("/phone/profile/add", "name")
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.create_device(new_device())
        assert caught.value.retryable  # the activity tries again, same key
        again = await provider.create_device(new_device())
    finally:
        await client.aclose()
    assert lost == [slot_mark("phones-a", new_device().idempotency_key)]
    stats = await phones_stats(account)
    assert stats["created"] == 1 and stats["powerOns"] == 1
    assert again.id.endswith(".1") and again.status == PROVISIONING
    # The retry looked its mark up before anything else, and added nothing.
    paths = [p for p, _ in client.recorder.calls]
    after_loss = paths[paths.index("/phone/profile/add") + 1 :]
    assert after_loss[0] == "/phone/list" and "/phone/profile/add" not in after_loss


async def test_the_same_slot_created_twice_is_one_device(
    account: Account, provider: PhoneProvider
) -> None:
    first = await provider.create_device(new_device())
    second = await provider.create_device(new_device())
    assert first.id == second.id
    assert (await phones_stats(account))["created"] == 1


async def test_two_attempts_of_one_slot_at_once_rent_one_profile(
    account: Account, provider: PhoneProvider
) -> None:
    # A retry started while the first attempt still runs (its answer late, not lost):
    # the second looks the mark up only after the first's add was answered.
    first, second = await asyncio.gather(
        provider.create_device(new_device()), provider.create_device(new_device())
    )
    assert first.id == second.id
    assert (await phones_stats(account))["created"] == 1
    assert provider._slots == {}  # nothing kept once nobody creates the slot


async def test_creates_waiting_for_the_budget_share_one_listing_of_their_pool(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    # A batch of 4 creates at once: one listing serves every mark's look-up and the
    # reserve (none), then 4 adds and 4 power-ons; not 4 look-ups and a reserve listing.
    made = await asyncio.gather(*(provider.create_device(new_device(slot=s)) for s in range(4)))
    assert len({d.id for d in made}) == 4
    paths = [p for p, _ in n1.recorder.calls]
    assert paths.count("/phone/list") == 1, paths
    assert paths.count("/phone/profile/add") == 4 and paths.count("/phone/openphone") == 4
    # Each joined a listing sent after it asked: run again, every slot finds its own.
    again = await asyncio.gather(*(provider.create_device(new_device(slot=s)) for s in range(4)))
    assert [d.id for d in again] == [d.id for d in made]
    assert (await phones_stats(account))["created"] == 4


async def test_a_create_never_joins_a_listing_already_sent(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    """A listing is joined only until its first call is sent: a create asking after that
    lists again, and so sees what landed meanwhile (here, the slot's profile, as an earlier
    attempt's add answered late, from another process). Joining the sent listing, it
    would miss that profile and add a second one for the slot."""
    slot = new_device(slot=7)
    mark = slot_mark("phones-a", slot.idempotency_key)
    created: list[asyncio.Future[Any]] = []
    seen: list[str] = []

    async def meanwhile(path: str, body: Any) -> None:
        seen.append(path)
        if len(seen) == 1:  # the listing begun by list_pool, sent: the create asks now
            created.append(asyncio.ensure_future(provider.create_device(slot)))
            for _ in range(20):
                await asyncio.sleep(0)
        elif len(seen) == 2:  # the next call after it: the slot's profile lands first
            await account.advance(2)  # past the emulator's 1-a-second window
            remark = Remark("active", 1, 0.0, dict(slot.labels)).text()
            await account.ok(
                "/phone/profile/add",
                {
                    "regionId": REGION,
                    "computeType": 1,
                    "name": mark,
                    "remark": remark,
                    "host": "gw.proxy.test",
                    "port": 1080,
                    "proxyUserName": "late",
                    "proxyPassword": PROXY_PASSWORD,
                },
            )
            await account.advance(2)

    n1.recorder.before = meanwhile
    await provider.list_pool("phones-a")
    made = await created[0]
    n1.recorder.before = None
    assert seen[:2] == ["/phone/list", "/phone/list"], seen
    assert (await phones_stats(account))["created"] == 1  # the late one, not a second
    (phone,) = await n1.phones.find_by_mark(mark)
    assert made.id == f"{phone.id}.1"


async def test_creates_at_once_never_claim_one_reserve_profile_twice(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    await two_in_reserve(account, provider)
    # Every claim reads the reserve anew (no kept list): a listing the creates shared,
    # begun before the first claim, still shows the claimed profile in reserve.
    provider.reserve_seconds = 0
    taken = await asyncio.gather(
        *(provider.create_device(new_device(slot=s)) for s in range(10, 15))
    )
    phones = [parse_device_id(d.id)[0] for d in taken]  # type: ignore[index]
    assert len(set(phones)) == 5, phones  # five slots, five profiles
    stats = await phones_stats(account)
    assert stats["created"] == 5  # two from the reserve, three added
    marks = [p.name for p in await n1.phones.list_all(mark_prefix=pool_prefix("phones-a"))]
    assert len(set(marks)) == 5


async def test_a_large_pools_create_looks_its_mark_up_alone(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    await provider.create_device(new_device(slot=0))
    provider.listings.sizes["phones-a"] = 100  # as after listing a pool of 100 profiles (one page+)
    n1.recorder.calls.clear()
    await provider.create_device(new_device(slot=1))
    lists = [b for p, b in n1.recorder.calls if p == "/phone/list"]
    assert lists[0]["name"] == slot_mark("phones-a", new_device(slot=1).idempotency_key)


async def test_remove_shuts_the_phone_down_and_keeps_the_profile_in_reserve(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    await provider.remove_device(made.id)
    stats = await phones_stats(account)
    assert (stats["profiles"], stats["running"], stats["shutdowns"]) == (1, 0, 1)
    assert stats["recovers"] == 0  # it was healthy: no fresh start
    assert await provider.list_pool("phones-a") == []
    (phone,) = await n1.phones.list_all(mark_prefix=pool_prefix("phones-a"))
    remark = Remark.parse(phone.remark)
    assert remark is not None and remark.state == "reserve"
    assert phone.name == pool_prefix("phones-a") + "reserve"
    with pytest.raises(NotFoundError):
        await provider.remove_device(made.id)  # a retried remove: already gone
    with pytest.raises(NotFoundError):
        await provider.get_device(made.id)
    items, not_found = await provider.read_statuses([made.id])
    assert items == [] and not_found == [made.id]


async def test_after_a_restart_a_removal_finds_its_phone_in_its_pools_listing(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    made = await provider.create_device(new_device())
    await provider.create_device(new_device(pool="phones-b"))
    await ready(account, provider)
    restarted = PhoneProvider(n1.phones)  # a node worker started again: no seq known
    n1.recorder.calls.clear()
    with provider_call(pool="phones-a"):
        await restarted.remove_device(made.id)
    lists = [b for p, b in n1.recorder.calls if p == "/phone/list"]
    # One listing of that pool, not of every pool's profiles ("dvp-").
    assert lists and all(b.get("name") == pool_prefix("phones-a") for b in lists), lists
    assert (await phones_stats(account))["running"] == 1  # phones-b's phone still on


async def test_reserve_keep_retires_what_scale_down_takes_past_it(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    # spec.reserve.keep: 1 -> of three phones scaled away, one is kept in reserve and
    # two are retired; every one is shut down (billing stops) either way.
    made = [await provider.create_device(new_device(slot=i)) for i in range(3)]
    await ready(account, provider)
    with provider_call(pool="phones-a", reserve_keep=1):
        # All at once, as a scale-down removes them: still only one kept.
        await asyncio.gather(*(provider.remove_device(device.id) for device in made))
    stats = await phones_stats(account)
    assert (stats["profiles"], stats["running"], stats["shutdowns"]) == (3, 0, 3)
    states = sorted(
        Remark.parse(p.remark).state  # type: ignore[union-attr]
        for p in await n1.phones.list_all()  # retired ones are out of the pool's prefix
    )
    assert states == ["reserve", "retired", "retired"]
    # A retired profile is never powered on again: a scale-up takes the one in reserve, then adds.
    await provider.create_device(new_device(slot=0))
    await provider.create_device(new_device(slot=1))
    assert (await phones_stats(account))["created"] == 4


async def test_a_create_powers_a_reserve_profile_on_before_it_adds_one(
    account: Account, provider: PhoneProvider
) -> None:
    first = await provider.create_device(new_device(slot=0))
    await ready(account, provider)
    await provider.remove_device(first.id)
    other_template = TEMPLATE.model_copy(update={"os_version": "14"})
    again = await provider.create_device(new_device(slot=1))
    phone_id, incarnation = parse_device_id(again.id) or ("", 0)
    assert phone_id == parse_device_id(first.id)[0] and incarnation == 2  # type: ignore[index]
    stats = await phones_stats(account)
    assert (stats["created"], stats["powerOns"]) == (1, 2)
    (listed,) = await ready(account, provider)
    assert (listed.id, listed.status, listed.labels[LABEL_SLOT]) == (again.id, READY, "1")
    # Another template never takes that profile: it adds its own.
    await provider.create_device(new_device(slot=2, template=other_template))
    assert (await phones_stats(account))["created"] == 2
    items, not_found = await provider.read_statuses([first.id, again.id])
    assert [i.id for i in items] == [again.id] and not_found == [first.id]


async def test_an_offline_phone_is_shut_down_fresh_started_and_kept(
    account: Account, provider: PhoneProvider
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    phone_id = (parse_device_id(made.id) or ("", 0))[0]
    await account.control(f"phones/{phone_id}/offline")
    provider.reads.probe_seconds = 0  # read `running` again now
    (listed,) = await provider.list_pool("phones-a")
    assert listed.status == OFFLINE
    with provider_call(pool="phones-a", replacement=True):  # the health check's removal
        await provider.remove_device(made.id)
    stats = await phones_stats(account)
    assert (stats["recovers"], stats["running"], stats["offline"]) == (1, 0, 0)
    replacement = await provider.create_device(new_device(slot=1))
    (listed,) = await ready(account, provider)
    assert listed.id == replacement.id and listed.status == READY
    assert (await phones_stats(account))["created"] == 1


async def test_an_offline_phone_past_its_recover_quota_is_retired_not_reused(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    made = await provider.create_device(new_device())
    await ready(account, provider)
    phone_id = (parse_device_id(made.id) or ("", 0))[0]
    await n1.phones.recover(phone_id)  # the month's one fresh start, used up
    await account.advance(61)
    await account.control(f"phones/{phone_id}/offline")
    provider.reads.probe_seconds = 0
    with provider_call(pool="phones-a", replacement=True):  # the health check's removal
        await provider.remove_device(made.id)
    (phone,) = await n1.phones.list_all()  # retired: out of the pool's prefix
    remark = Remark.parse(phone.remark)
    assert remark is not None and remark.state == "retired"
    assert (await phones_stats(account))["running"] == 0
    await provider.create_device(new_device(slot=1))
    assert (await phones_stats(account))["created"] == 2  # a new profile, not the broken one


async def test_an_ios_create_is_refused_for_good_before_any_call(
    provider: PhoneProvider, n1: Node
) -> None:
    ios = DeviceTemplate(platform="ios", region=REGION, os_version="17", proxy_pool="gw")
    with pytest.raises(InvalidArgumentError) as caught:
        await provider.create_device(new_device(template=ios))
    assert not caught.value.retryable and ANDROID_ONLY in str(caught.value)
    assert n1.recorder.calls == []
    assert provider.platform_problem("ios") is not None
    assert provider.platform_problem("android") is None


async def test_release_pool_retires_the_reserve_of_a_deleted_pool(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    await two_in_reserve(account, provider)
    assert await provider.release_pool("phones-a") == 2
    states = [Remark.parse(p.remark) for p in await n1.phones.list_all()]
    assert sorted(r.state for r in states if r) == ["retired", "retired"]
    # A retry (the first answer lost) counts what the pool keeps, not what it changed.
    assert await provider.release_pool("phones-a") == 2
    await provider.create_device(new_device(slot=5))
    assert (await phones_stats(account))["created"] == 3  # retired profiles are never reused


async def test_no_secret_in_any_result_or_error(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    seen: list[str] = []
    made = await provider.create_device(new_device())
    seen.append(made.model_dump_json())
    seen += [d.model_dump_json() for d in await ready(account, provider)]
    seen += [d.info.model_dump_json() for d in await provider.list_managed()]
    seen.append(repr(await provider.get_device(made.id)))
    await account.faults(failureRate=1.0)
    with pytest.raises(ProviderError) as caught:
        await provider.create_device(new_device(slot=3))
    seen += [str(caught.value), repr(caught.value)]
    await account.faults()
    seen.append(repr(provider))
    response = await account.http["node-1"].get("/_emulator/secrets")
    secrets = response.json()["secrets"]
    assert PROXY_PASSWORD in secrets  # the phone holds it: what must not come back
    text = json.dumps(seen)
    for secret in [*secrets, KEY, PROXY_PASSWORD]:
        assert secret not in text


async def test_never_more_than_one_request_a_second(
    account: Account, provider: PhoneProvider
) -> None:
    for slot in range(3):
        await provider.create_device(new_device(slot=slot))
    await ready(account, provider)
    stats = await phones_stats(account)
    assert stats["maxRequestsPerSecond"] <= 1 and stats["rateLimited"] == 0


async def test_a_listing_reads_running_for_a_few_phones_and_still_finds_the_offline_one(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    made = [await provider.create_device(new_device(slot=s)) for s in range(5)]
    await account.advance(61)
    provider.reads.probe_seconds = 0  # every answer is old at once: only the cap limits the reads
    broken = (parse_device_id(made[3].id) or ("", 0))[0]
    await account.control(f"phones/{broken}/offline")
    seen: list[dict[str, str]] = []
    for _ in range(2):
        before = len(n1.recorder.bodies("/phone/running"))
        listed = await provider.list_pool("phones-a")
        assert len(n1.recorder.bodies("/phone/running")) - before <= 3
        seen.append({d.id: d.status for d in listed})
    # Unread phones are what the listing says (running: ready) until their turn comes.
    assert all(len(s) == 5 for s in seen)
    assert seen[-1][made[3].id] == OFFLINE
    assert [d.id for d in made if seen[-1][d.id] == READY] == [
        d.id for d in made if d.id != made[3].id
    ]
