"""Contract tests: the `geelark` adapter's warm reserve against the GeeLark emulator (ASGI).

An account served by its node worker (`GeeLarkProvider(reserve=True)`): a scale-down of a
healthy phone stops it and keeps it, renamed `dvp-<pool digest>-reserve`, up to
`spec.reserve.keep`; the next create of the same template claims it (no `addNew`) and
starts it; another template's reserve is shed; a create at the plan's profile cap deletes a
reserve phone first; two creates never take one phone; a deleted pool leaves no phone.
Why: docs/providers.md, "The warm reserve on GeeLark".
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr

from devicepool.activities.device_models import FAILED, PROVISIONING
from devicepool.activities.errors import NotFoundError
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice, provider_call
from devicepool.activities.providers.geelark import GeeLarkApi, GeeLarkProvider
from devicepool.activities.providers.geelark.marks import Remark, reserve_mark, slot_mark
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_TEMPLATE_HASH, MANAGED_BY
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from tests.helpers.geelark import BASE, Team, team

POOL = "warm"
TEMPLATE = DeviceTemplate(platform="android", region="sgp", os_version="13")


def _labels(pool: str = POOL, template_hash: str = "t1") -> dict[str, str]:
    return {LABEL_POOL: pool, LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEMPLATE_HASH: template_hash}


def _new(key: str, *, pool: str = POOL, template_hash: str = "t1") -> NewDevice:
    labels = _labels(pool, template_hash)
    return NewDevice(template=TEMPLATE, name=key, labels=labels, idempotency_key=key)


def _provider(t: Team, *, reserve: bool = True) -> GeeLarkProvider:
    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    client = GeeLarkApi(
        base_url=BASE, app_id=DEFAULT_APP_ID, api_key=DEFAULT_API_KEY, transport=t.transport
    )
    return GeeLarkProvider(client, sleep=sleep, confirm_seconds=5.0, reserve=reserve)


def _pid(device: str) -> str:
    return device.partition(".")[0]


def _phone(t: Team, phone_id: str) -> Any:
    return t.emulator.phones.phones.get(phone_id)


async def _running(t: Team, provider: GeeLarkProvider, key: str, **new: Any) -> str:
    """A device created and booted: its id."""
    device = (await provider.create_device(_new(key, **new))).id
    await t.advance(120)
    return device


async def _scale_down(provider: GeeLarkProvider, device: str, *, keep: int | None = 2) -> None:
    with provider_call(pool=POOL, reserve_keep=keep):
        await provider.remove_device(device)


@pytest.fixture
async def t() -> AsyncIterator[Team]:
    async with team() as made:
        yield made


async def test_a_scale_down_parks_the_phone_stopped_not_deleted(t: Team) -> None:
    provider = _provider(t)
    device = await _running(t, provider, "k1")
    await _scale_down(provider, device)
    phone = _phone(t, _pid(device))
    assert phone is not None and phone.status == 2 and phone.name == reserve_mark(POOL)
    stats = (await t.stats())["phones"]
    assert stats["deleted"] == 0 and stats["running"] == 0
    assert await provider.list_pool(POOL) == []  # never a device of its pool
    assert await provider.list_managed() == []  # nor the orphan sweep's
    assert (await provider.read_statuses([device]))[1] == [device]  # the device is gone
    with pytest.raises(NotFoundError):
        await provider.get_device(device)
    await provider.aclose()


async def test_the_next_create_claims_it_and_starts_it(t: Team) -> None:
    provider = _provider(t)
    old = await _running(t, provider, "k1")
    await _scale_down(provider, old)
    before = (await t.stats())["phones"]
    new = await provider.create_device(_new("k2"))
    after = (await t.stats())["phones"]
    assert _pid(new.id) == _pid(old) and new.id != old  # the same phone, a new device
    assert new.status == PROVISIONING
    assert after["created"] == before["created"]  # no addNew
    assert after["starts"] == before["starts"] + 1
    phone = _phone(t, _pid(new.id))
    assert phone.name == slot_mark(POOL, "k2") and phone.status in (0, 1)
    remark = Remark.parse(phone.remark)
    assert remark is not None and remark.labels[LABEL_TEMPLATE_HASH] == "t1"
    assert [d.id for d in await provider.list_pool(POOL)] == [new.id]
    await provider.aclose()


async def test_the_reserve_keeps_no_more_than_spec_reserve_keep(t: Team) -> None:
    provider = _provider(t)
    a = await _running(t, provider, "a")
    b = await _running(t, provider, "b")
    await _scale_down(provider, a, keep=1)
    await _scale_down(provider, b, keep=1)
    assert _phone(t, _pid(a)).name == reserve_mark(POOL)
    assert _phone(t, _pid(b)) is None  # stopped, then deleted
    await provider.aclose()


@pytest.mark.parametrize("keep", [None, 0])
async def test_no_reserve_without_a_keep(t: Team, keep: int | None) -> None:
    # Unset `spec.reserve` is unbounded on the Local API; on GeeLark it keeps none.
    provider = _provider(t)
    device = await _running(t, provider, "k1")
    await _scale_down(provider, device, keep=keep)
    assert _phone(t, _pid(device)) is None
    await provider.aclose()


@pytest.mark.parametrize(
    "call",
    [
        {"pool": POOL, "replacement": True, "reserve_keep": 2},
        {"pool": POOL, "used": True, "reserve_keep": 2},
        {"pool": POOL, "deleting": True, "reserve_keep": 2},
        {"reserve_keep": 2},  # the orphan sweep: no pool
    ],
)
async def test_every_other_removal_deletes(t: Team, call: dict[str, Any]) -> None:
    provider = _provider(t)
    device = await _running(t, provider, "k1")
    with provider_call(**call):
        await provider.remove_device(device)
    assert _phone(t, _pid(device)) is None
    await provider.aclose()


async def test_a_phone_shut_down_at_the_provider_is_deleted_not_parked(t: Team) -> None:
    provider = _provider(t)
    device = await _running(t, provider, "k1")
    await t.ok("phone/stop", {"ids": [_pid(device)]})
    await _scale_down(provider, device)
    assert _phone(t, _pid(device)) is None
    await provider.aclose()


async def test_without_a_node_a_scale_down_deletes(t: Team) -> None:
    provider = _provider(t, reserve=False)
    device = await _running(t, provider, "k1")
    await _scale_down(provider, device)
    assert _phone(t, _pid(device)) is None
    await provider.aclose()


async def test_a_template_change_sheds_the_old_reserve(t: Team) -> None:
    provider = _provider(t)
    old = await _running(t, provider, "k1")
    older = await _running(t, provider, "k3")
    await _scale_down(provider, old)
    new = await provider.create_device(_new("k2", template_hash="t2"))
    assert _pid(new.id) != _pid(old)
    assert _phone(t, _pid(old)) is None  # it can never serve: deleted
    # A phone of the old template scaled down after the change is not parked either.
    await _scale_down(provider, older)
    assert _phone(t, _pid(older)) is None
    await provider.aclose()


async def test_the_profile_cap_deletes_a_reserve_phone_first() -> None:
    async with team(max_profiles=2) as t:
        provider = _provider(t)
        other = await _running(t, provider, "o1", pool="other")
        with provider_call(pool="other", reserve_keep=2):
            await provider.remove_device(other)  # kept, stopped: 1 profile
        await _running(t, provider, "k1")  # 2 profiles: the cap
        new = await provider.create_device(_new("k2"))
        assert _phone(t, _pid(other)) is None  # deleted to make room
        assert _phone(t, _pid(new.id)) is not None
        await provider.aclose()


async def test_two_creates_never_take_one_phone(t: Team) -> None:
    provider = _provider(t)
    a = await _running(t, provider, "a")
    b = await _running(t, provider, "b")
    await _scale_down(provider, a, keep=5)
    await _scale_down(provider, b, keep=5)
    before = (await t.stats())["phones"]["created"]
    made = await asyncio.gather(*(provider.create_device(_new(f"n{i}")) for i in range(3)))
    phones = [_pid(d.id) for d in made]
    assert len(set(phones)) == 3
    assert {_pid(a), _pid(b)} <= set(phones)
    assert (await t.stats())["phones"]["created"] == before + 1
    names = [_phone(t, p).name for p in phones]
    assert sorted(names) == sorted(slot_mark(POOL, f"n{i}") for i in range(3))
    await provider.aclose()


async def test_a_deleted_pool_leaves_no_phone(t: Team) -> None:
    provider = _provider(t)
    devices = [await _running(t, provider, f"k{i}") for i in range(3)]
    for device in devices[:2]:
        await _scale_down(provider, device, keep=5)
    with provider_call(pool=POOL, deleting=True, reserve_keep=5):
        for info in await provider.list_pool(POOL):
            await provider.remove_device(info.id)
        assert await provider.list_pool(POOL) == []
        await provider.release_pool(POOL)
    assert (await t.stats())["phones"]["total"] == 0
    await provider.aclose()


async def test_a_reserve_phone_someone_started_is_a_failed_device_removed(t: Team) -> None:
    provider = _provider(t)
    device = await _running(t, provider, "k1")
    await _scale_down(provider, device)
    await t.ok("phone/start", {"ids": [_pid(device)]})  # it bills: not kept so
    (seen,) = await provider.list_pool(POOL)
    assert seen.status == FAILED and _pid(seen.id) == _pid(device)
    new = await provider.create_device(_new("k2"))  # never claimed
    assert _pid(new.id) != _pid(device)
    with provider_call(pool=POOL, replacement=True, reserve_keep=2):
        await provider.remove_device(seen.id)
    assert _phone(t, _pid(device)) is None
    await provider.aclose()


async def test_a_phone_an_earlier_build_parked_is_claimable_with_a_template_hash(
    t: Team,
) -> None:
    remark = Remark(created=1_700_000_000, region="sgp", labels=_labels()).text()
    no_hash = Remark(
        created=1_700_000_000, region="sgp", labels={LABEL_POOL: POOL, LABEL_MANAGED_BY: MANAGED_BY}
    ).text()
    made = await t.ok(
        "phone/addNew",
        {
            "mobileType": "Android 13",
            "data": [
                {"profileName": reserve_mark(POOL), "profileNote": remark},
                {"profileName": reserve_mark(POOL), "profileNote": no_hash},
            ],
        },
    )
    parked, hashless = (d["id"] for d in made["details"])
    provider = _provider(t)
    (seen,) = await provider.list_pool(POOL)  # the one without a hash: never serves
    assert seen.status == FAILED and _pid(seen.id) == hashless
    new = await provider.create_device(_new("k2"))
    assert _pid(new.id) == parked
    await provider.aclose()


async def test_a_reserve_phone_deleted_at_the_provider_is_not_a_failed_create(t: Team) -> None:
    provider = _provider(t)
    a = await _running(t, provider, "a")
    b = await _running(t, provider, "b")
    await _scale_down(provider, a, keep=5)
    await _scale_down(provider, b, keep=5)
    first = await provider.create_device(_new("n1"))  # lists the reserve: a and b
    other = ({_pid(a), _pid(b)} - {_pid(first.id)}).pop()
    await t.ok("phone/delete", {"ids": [other]})  # by a person, in GeeLark's console
    second = await provider.create_device(_new("n2"))  # added: no error
    assert _pid(second.id) not in (_pid(a), _pid(b))
    assert _phone(t, _pid(second.id)).name == slot_mark(POOL, "n2")
    await provider.aclose()


async def test_a_claim_sets_the_pools_proxy_and_says_no_password(t: Team) -> None:
    provider = _provider(t)
    old = await _running(t, provider, "k1")
    await _scale_down(provider, old)
    proxy = ResolvedProxy(
        pool="gw",
        type="http",
        host="gw.example",
        port=8080,
        username="u-2",
        password=SecretStr("claim-Pass-5"),
    )
    made = await provider.create_device(dataclasses.replace(_new("k2"), proxy=proxy))
    assert _pid(made.id) == _pid(old)
    phone = _phone(t, _pid(made.id))
    assert phone.proxy["type"] == "http" and phone.proxy["username"] == "u-2"
    assert "claim-Pass-5" not in made.model_dump_json()
    await provider.aclose()
