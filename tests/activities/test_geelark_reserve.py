"""The `geelark` adapter's warm reserve on `httpx.MockTransport` (`geelark_fake`): a
scale-down parks its phone stopped, a create of the same template claims it before adding
one (a new device id), `spec.reserve.keep` bounds it, every other removal deletes, and a
deleted pool's reserve is deleted."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from devicepool.activities.device_models import PROVISIONING
from devicepool.activities.errors import InvalidArgumentError
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice, provider_call
from devicepool.activities.providers.geelark.marks import (
    Remark,
    pool_group,
    reserve_mark,
    slot_mark,
)
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_TEMPLATE_HASH, MANAGED_BY
from tests.activities.geelark_fake import Fake, ok

POOL = "warm"
TEMPLATE = DeviceTemplate(platform="android", region="sgp", os_version="13")
LABELS = {LABEL_POOL: POOL, LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEMPLATE_HASH: "t1"}


def _new(key: str, *, template_hash: str = "t1", proxy: ResolvedProxy | None = None) -> NewDevice:
    labels = {**LABELS, LABEL_TEMPLATE_HASH: template_hash}
    return NewDevice(template=TEMPLATE, name=key, labels=labels, idempotency_key=key, proxy=proxy)


def _ours(fake: Fake, key: str, *, status: int = 0) -> str:
    mark = slot_mark(POOL, key)
    remark = Remark(created=1_700_000_000, region="sgp", labels=LABELS).text()
    phone = fake.add_phone(mark, remark, status=status, group=pool_group(POOL))
    return f"{phone}.{mark.rsplit('-', 1)[1]}"


def _pid(device: str) -> str:
    return device.partition(".")[0]


async def _scale_down(provider: Any, device: str, *, keep: int | None = None) -> None:
    with provider_call(pool=POOL, reserve_keep=keep):
        await provider.remove_device(device)


async def test_a_scale_down_parks_the_phone_stopped_and_out_of_the_pool() -> None:
    fake = Fake()
    device = _ours(fake, "k1", status=0)
    provider = fake.provider()
    await _scale_down(provider, device)
    phone = fake.phones[_pid(device)]
    assert phone["status"] == 2 and phone["serialName"] == reserve_mark(POOL)
    assert "phone/delete" not in fake.paths()
    assert await provider.list_pool(POOL) == []
    assert (await provider.read_statuses([device]))[1] == [device]  # the device is gone
    await provider.aclose()


async def test_a_create_claims_a_reserve_phone_of_its_template_before_adding() -> None:
    fake = Fake()
    old = _ours(fake, "k1", status=0)
    provider = fake.provider()
    await _scale_down(provider, old)
    proxy = ResolvedProxy(
        pool="gw",
        type="http",
        host="gw.example",
        port=8080,
        username="u-2",
        password=SecretStr("claim-Pass-5"),
    )
    new = await provider.create_device(_new("k2", proxy=proxy))
    assert _pid(new.id) == _pid(old) and new.id != old  # the same phone, a new device
    assert new.status == PROVISIONING and "phone/addNew" not in fake.paths()
    phone = fake.phones[_pid(new.id)]
    assert phone["serialName"] == slot_mark(POOL, "k2") and phone["status"] == 1
    assert phone["proxy"]["typeId"] == 2 and phone["proxy"]["username"] == "u-2"
    assert "claim-Pass-5" not in new.model_dump_json()
    assert [d.id for d in await provider.list_pool(POOL)] == [new.id]
    with pytest.raises(Exception, match="no GeeLark phone serves"):
        await provider.get_device(old)
    await provider.aclose()


async def test_another_template_is_not_claimed() -> None:
    fake = Fake()
    old = _ours(fake, "k1", status=0)
    provider = fake.provider()
    await _scale_down(provider, old)
    new = await provider.create_device(_new("k2", template_hash="t2"))
    assert _pid(new.id) != _pid(old) and "phone/addNew" in fake.paths()
    assert fake.phones[_pid(old)]["serialName"] == reserve_mark(POOL)
    await provider.aclose()


async def test_the_reserve_keeps_no_more_than_spec_reserve_keep() -> None:
    fake = Fake()
    a, b = _ours(fake, "a", status=0), _ours(fake, "b", status=0)
    provider = fake.provider()
    await _scale_down(provider, a, keep=1)
    await _scale_down(provider, b, keep=1)
    assert fake.phones[_pid(a)]["serialName"] == reserve_mark(POOL)
    assert _pid(b) not in fake.phones  # stopped, then deleted
    await provider.aclose()


@pytest.mark.parametrize(
    "call",
    [
        {"pool": POOL, "replacement": True},
        {"pool": POOL, "used": True},
        {"pool": POOL, "deleting": True},
        {"pool": POOL, "reserve_keep": 0},
        {},  # the orphan sweep: no pool
    ],
)
async def test_every_other_removal_deletes(call: dict[str, Any]) -> None:
    fake = Fake()
    device = _ours(fake, "k1", status=0)
    provider = fake.provider()
    with provider_call(**call):
        await provider.remove_device(device)
    assert _pid(device) not in fake.phones
    await provider.aclose()


async def test_a_deleted_pools_reserve_is_deleted() -> None:
    fake = Fake()
    devices = [_ours(fake, f"k{i}", status=0) for i in range(3)]
    provider = fake.provider()
    for device in devices:
        await _scale_down(provider, device)
    assert len(fake.phones) == 3
    assert await provider.release_pool(POOL) == 0
    assert fake.phones == {}
    await provider.aclose()


async def test_a_claim_refused_is_listed_again_next_time() -> None:
    fake = Fake()
    old = _ours(fake, "k1", status=0)
    provider = fake.provider()
    await _scale_down(provider, old)
    fake.script["phone/detail/update"] = [
        ok({"failDetails": [{"code": 43022, "id": _pid(old), "msg": "tag not found"}]})
    ]
    with pytest.raises(InvalidArgumentError):
        await provider.create_device(_new("k2"))
    new = await provider.create_device(_new("k2"))
    assert _pid(new.id) == _pid(old) and "phone/addNew" not in fake.paths()
    await provider.aclose()


async def test_a_burst_of_creates_lists_the_reserve_once() -> None:
    fake = Fake()
    provider = fake.provider()
    for i in range(5):
        await provider.create_device(_new(f"k{i}"))
    reserve_lists = [
        b
        for p, _, b in fake.requests
        if p.endswith("phone/list") and b.get("serialName") == reserve_mark(POOL)
    ]
    assert len(reserve_lists) == 1
    await provider.aclose()
