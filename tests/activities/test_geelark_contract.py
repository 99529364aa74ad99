"""Contract tests: the `geelark` adapter against the GeeLark emulator in process (ASGI).

Adapter and emulator were written apart, from the same vendor docs; each habit both
implement is checked here: the signature vector and token mode, creates (one phone a slot,
even after a timeout with the create applied), power apart from existence, remove as stop,
confirm, delete, a busy phone, a phone the provider stopped, paging, the two-hour lock,
the daily quotas, ADB connect info, and no secret of the emulator's in anything the
adapter returns. The emulator's clock is all but stopped; the adapter's sleeps move it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from devicepool.activities.device_models import FAILED, OFFLINE, PROVISIONING, READY
from devicepool.activities.errors import ServerError
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice, provider_call
from devicepool.activities.providers.geelark import (
    EndpointPacer,
    GeeLarkApi,
    GeeLarkBusyError,
    GeeLarkCapacityError,
    GeeLarkLockedError,
    GeeLarkProvider,
    GeeLarkQuotaError,
)
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_TEMPLATE_HASH, MANAGED_BY
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID, DEFAULT_TOKEN
from tests.helpers.geelark import BASE, Team, team

POOL = "contract"
TEMPLATE = DeviceTemplate(platform="android", region="sgp", os_version="13")
LABELS = {LABEL_POOL: POOL, LABEL_MANAGED_BY: MANAGED_BY}


def _new(key: str, proxy: ResolvedProxy | None = None) -> NewDevice:
    return NewDevice(template=TEMPLATE, name=key, labels=LABELS, idempotency_key=key, proxy=proxy)


def _provider(t: Team, *, token: bool = False, **api: Any) -> GeeLarkProvider:
    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    client = GeeLarkApi(
        base_url=BASE,
        app_id="" if token else DEFAULT_APP_ID,
        api_key=DEFAULT_TOKEN if token else DEFAULT_API_KEY,
        transport=t.transport,
        **api,
    )
    return GeeLarkProvider(client, sleep=sleep, confirm_seconds=5.0)


def _pid(device: str) -> str:
    """The phone id of a device id."""
    return device.partition(".")[0]


@pytest.fixture
async def t() -> AsyncIterator[Team]:
    async with team() as made:
        yield made


@pytest.mark.parametrize("token", [False, True])
async def test_both_auth_modes_are_accepted(t: Team, token: bool) -> None:
    provider = _provider(t, token=token)
    assert await provider.list_pool(POOL) == []
    # The name's prefix, then (an answer with none of the pool's) the managed tag.
    assert (await t.stats())["requests"]["accepted"] == 2
    await provider.aclose()


async def test_create_boot_remove_one_phone(t: Team) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    assert info.status == PROVISIONING
    [listed] = await provider.list_pool(POOL)
    assert listed.id == info.id and listed.labels == LABELS
    await t.advance(60)
    items, _ = await provider.read_statuses([info.id])
    assert [i.status for i in items] == [READY]
    await provider.remove_device(info.id)
    stats = await t.stats()
    assert stats["phones"]["total"] == 0 and stats["phones"]["deleted"] == 1
    assert stats["phones"]["created"] == 1 and stats["phones"]["stops"] == 1
    assert await provider.list_pool(POOL) == []
    await provider.aclose()


async def test_a_create_timed_out_with_the_phone_made_makes_no_second(t: Team) -> None:
    provider = _provider(t, timeout=0.5)
    await t.faults(timeouts=1, timeoutPaths=["phone/addNew"], timeoutSeconds=2)
    info = await provider.create_device(_new("slot-1"))
    again = await provider.create_device(_new("slot-1"))
    assert again.id == info.id
    stats = await t.stats()
    assert stats["phones"]["created"] == 1 and stats["phones"]["duplicateNames"] == 0
    assert stats["faultsInjected"].get("timeout") == 1
    await provider.aclose()


async def test_a_busy_phone_is_not_deleted(t: Team) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    await t.advance(60)
    response = await t.http.post(f"/_emulator/phones/{_pid(info.id)}/busy", json={"remote": True})
    assert response.status_code == 200, response.text
    with pytest.raises(GeeLarkBusyError):
        await provider.remove_device(info.id)
    stats = await t.stats()
    assert stats["phones"]["total"] == 1 and stats["phones"]["deleted"] == 0
    await provider.aclose()


async def test_a_phone_the_provider_stopped_reads_offline_and_is_deleted_unstopped(
    t: Team,
) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    await t.advance(60)
    response = await t.http.post(f"/_emulator/phones/{_pid(info.id)}/stop")
    assert response.status_code == 200, response.text
    [listed] = await provider.list_pool(POOL)
    assert listed.status == OFFLINE
    items, _ = await provider.read_statuses([info.id])
    assert [i.status for i in items] == [OFFLINE]
    await provider.remove_device(info.id)
    assert (await t.stats())["phones"]["total"] == 0
    await provider.aclose()


async def test_a_pool_past_one_page_is_listed_whole(t: Team) -> None:
    provider = _provider(t)
    made = {(await provider.create_device(_new(f"slot-{i}"))).id for i in range(105)}
    assert {d.id for d in await provider.list_pool(POOL)} == made
    assert len(await provider.list_managed()) == 105
    await provider.aclose()


async def test_an_hourly_overrun_locks_and_the_breaker_sends_nothing_more() -> None:
    async with team(requests_per_hour=4) as t:
        provider = _provider(t)
        for _ in range(2):  # two requests a look at an empty pool (the prefix, the tag)
            await provider.list_pool(POOL)
        with pytest.raises(GeeLarkLockedError) as caught:
            await provider.list_pool(POOL)
        assert caught.value.reopens_at > datetime.now(UTC)
        before = await t.stats()
        for call in (provider.list_pool(POOL), provider.read_statuses(["1.0123456789abcdef"])):
            with pytest.raises(GeeLarkLockedError):
                await call
        after = await t.stats()
        assert after["requests"] == before["requests"]  # nothing more reached the API
        assert after["requests"]["locks"] == 1
        await provider.aclose()


async def test_the_daily_create_quota_says_when_it_resets() -> None:
    async with team(creates_per_day=1) as t:
        provider = _provider(t)
        await provider.create_device(_new("slot-1"))
        with pytest.raises(GeeLarkQuotaError) as caught:
            await provider.create_device(_new("slot-2"))
        assert caught.value.code == 44004
        assert caught.value.resets_at is not None and caught.value.resets_at.hour == 0
        assert (await t.stats())["phones"]["total"] == 1
        await provider.aclose()


async def test_the_daily_open_quota_keeps_the_phone_shut_down() -> None:
    async with team(opens_per_day=1) as t:
        provider = _provider(t)
        await provider.create_device(_new("slot-1"))
        with pytest.raises(GeeLarkQuotaError) as caught:
            await provider.create_device(_new("slot-2"))
        assert caught.value.code == 43008 and caught.value.resets_at is not None
        stats = await t.stats()
        assert stats["phones"]["total"] == 2 and stats["phones"]["running"] <= 1
        await provider.aclose()


async def test_connect_info_enables_adb_and_reads_the_login(t: Team) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    await t.advance(60)
    connect = await provider.connect_info(info.id)
    assert connect.adb is not None and connect.adb.port > 0 and connect.adb.code
    assert connect.adb.code not in repr(connect)
    await provider.aclose()


async def test_no_secret_of_the_emulator_reaches_what_the_adapter_returns(t: Team) -> None:
    provider = _provider(t)
    proxy = ResolvedProxy(
        pool="gw",
        type="socks5",
        host="100.64.0.9",
        port=30000,
        username="gl-user",
        password=SecretStr("gl-Proxy-Secret-42"),
    )
    created = [await provider.create_device(_new(f"slot-{i}", proxy)) for i in range(3)]
    await t.advance(60)
    assert (await provider.connect_info(created[0].id)).adb is not None
    secrets = (await t.http.get("/_emulator/secrets")).json()["secrets"]
    assert "gl-Proxy-Secret-42" in secrets and len(secrets) >= 2
    shown = [
        *(d.model_dump_json() for d in created),
        *(d.model_dump_json() for d in await provider.list_pool(POOL)),
        *(d.info.model_dump_json() for d in await provider.list_managed()),
        *(i.model_dump_json() for i in (await provider.read_statuses([created[0].id]))[0]),
        repr(provider),
    ]
    flat = [s for s in (secrets if isinstance(secrets, list) else []) if isinstance(s, str)]
    assert all(secret not in text for secret in flat for text in shown)
    await provider.aclose()


async def test_the_pacer_keeps_the_emulator_windows_clean(t: Team) -> None:
    # 20 calls a minute here: a pool's listings past it wait or are refused, never sent (an
    # empty pool's look is two: the prefix, the tag).
    provider = _provider(t, pacer=EndpointPacer(per_minute=20, max_wait=0.0))
    for _ in range(10):
        await provider.list_pool(POOL)
    with pytest.raises(Exception, match="budget"):
        await provider.list_pool(POOL)
    stats = await t.stats()
    assert stats["requests"]["accepted"] == 20 and stats["requests"]["rateLimited"] == 0
    await provider.aclose()


async def test_coded_batch_envelopes_are_read_per_item_too() -> None:
    async with team(batch_envelope="coded") as t:
        provider = _provider(t)
        info = await provider.create_device(_new("slot-1"))
        await t.advance(60)
        await t.http.post(f"/_emulator/phones/{_pid(info.id)}/busy", json={"task": True})
        with pytest.raises(GeeLarkBusyError):  # 40009 around a 43005 item
            await provider.remove_device(info.id)
        items, not_found = await provider.read_statuses([info.id, "0"])
        assert [i.id for i in items] == [info.id] and not_found == ["0"]  # 40006
        await provider.aclose()


async def test_a_start_refused_for_its_proxy_is_retried_on_the_same_phone(t: Team) -> None:
    provider = _provider(t)
    await t.faults(startProxyFailures=1)
    with pytest.raises(ServerError):  # 45002: retryable
        await provider.create_device(_new("slot-1"))
    info = await provider.create_device(_new("slot-1"))  # the activity's retry
    assert info.status == PROVISIONING
    stats = await t.stats()
    assert stats["phones"]["created"] == 1 and stats["phones"]["starts"] == 1
    await provider.aclose()


async def test_a_start_refused_for_resources_backs_off(t: Team) -> None:
    provider = _provider(t)
    await t.faults(startResourceFailures=1)
    with pytest.raises(GeeLarkCapacityError) as caught:  # 47002 on the item
        await provider.create_device(_new("slot-1"))
    assert caught.value.retryable and caught.value.retry_after
    await provider.aclose()


async def test_an_expired_phone_reads_failed_and_is_deleted(t: Team) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    await t.advance(60)
    await t.http.post(f"/_emulator/phones/{_pid(info.id)}/expire")
    items, _ = await provider.read_statuses([info.id])
    assert [i.status for i in items] == [FAILED]
    await provider.remove_device(info.id)
    assert (await t.stats())["phones"]["total"] == 0
    await provider.aclose()


async def test_a_phone_the_adapter_started_is_not_stopped_for_idling(t: Team) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    await t.advance(3 * 3600)
    items, _ = await provider.read_statuses([info.id])
    assert [i.status for i in items] == [READY]
    assert (await t.stats())["phones"]["autoStops"] == 0
    await provider.aclose()


def _new_of(key: str, template_hash: str) -> NewDevice:
    labels = {**LABELS, LABEL_TEMPLATE_HASH: template_hash}
    return NewDevice(template=TEMPLATE, name=key, labels=labels, idempotency_key=key)


async def test_two_workers_never_hand_one_phone_to_two_slots(t: Team) -> None:
    # R12 #1: B's cached reserve listing handed A's running phone to a second slot. Now a
    # scale-down deletes and a create only adds: each slot its own phone, on any worker.
    a, b = _provider(t), _provider(t)
    made = [await a.create_device(_new(f"k{i}")) for i in range(3)]
    await t.advance(120)
    for device in made:
        with provider_call(pool=POOL):  # a scale-down, spec.reserve unset
            await a.remove_device(device.id)
    assert (await t.stats())["phones"]["total"] == 0
    x = await b.create_device(_new("k3"))
    y = await a.create_device(_new("k4"))
    await t.advance(5)
    z = await b.create_device(_new("k5"))
    assert len({_pid(d.id) for d in (x, y, z)}) == 3
    items, gone = await a.read_statuses([x.id, y.id, z.id])
    assert len(items) == 3 and gone == []
    await a.aclose()
    await b.aclose()


async def test_a_template_change_on_a_full_plan_finds_room(t: Team) -> None:
    # R12 #3: phones kept for an old template filled a 5-profile plan (ProfileCap).
    async with team(max_profiles=5) as small:
        provider = _provider(small)
        made = [await provider.create_device(_new_of(f"k{i}", "t1")) for i in range(3)]
        await small.advance(120)
        for device in made:
            with provider_call(pool=POOL):
                await provider.remove_device(device.id)
        again = [await provider.create_device(_new_of(f"n{i}", "t2")) for i in range(3)]
        assert len({_pid(d.id) for d in again}) == 3
        assert (await small.stats())["phones"]["total"] == 3
        await provider.aclose()


async def test_a_phone_moved_to_another_group_stays_in_its_pool(t: Team) -> None:
    provider = _provider(t)
    info = await provider.create_device(_new("slot-1"))
    await t.advance(60)
    t.emulator.phones.phones[_pid(info.id)].group = "customers"  # Move Group, by hand
    assert [d.id for d in await provider.list_pool(POOL)] == [info.id]
    assert (await provider.create_device(_new("slot-1"))).id == info.id
    assert (await t.stats())["phones"]["created"] == 1
    await provider.aclose()
