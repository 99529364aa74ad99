"""No warm reserve on a GeeLark account without a node (`geelark_fake`): `spec.reserve` is
ignored (a node worker keeps one: test_geelark_warm_reserve.py). A scale-down stops,
confirms and deletes; a create never claims a stopped phone. Phones parked in a reserve
(named `dvp-<pool digest>-reserve`) are still seen, by their pool, the orphan sweep's
listing and a deleted pool's release, and removed. Why: docs/providers.md, "The warm
reserve on GeeLark"."""

from __future__ import annotations

import pytest

from devicepool.activities.device_models import FAILED
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice, provider_call
from devicepool.activities.providers.geelark.marks import (
    Remark,
    pool_group,
    reserve_mark,
    slot_mark,
)
from devicepool.api.names import (
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_SLOT,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
)
from tests.activities.geelark_fake import Fake

POOL = "warm"
TEMPLATE = DeviceTemplate(platform="android", region="sgp", os_version="13")
LABELS = {
    LABEL_POOL: POOL,
    LABEL_MANAGED_BY: MANAGED_BY,
    LABEL_TEMPLATE_HASH: "t1",
    LABEL_SLOT: "i1-3",
}


def _new(key: str) -> NewDevice:
    return NewDevice(template=TEMPLATE, name=key, labels=LABELS, idempotency_key=key)


def _ours(fake: Fake, key: str, *, status: int = 0) -> str:
    mark = slot_mark(POOL, key)
    remark = Remark(created=1_700_000_000, region="sgp", labels=LABELS).text()
    phone = fake.add_phone(mark, remark, status=status, group=pool_group(POOL))
    return f"{phone}.{mark.rsplit('-', 1)[1]}"


def _parked(fake: Fake, *, pool: str = POOL, status: int = 2, group: str = "") -> str:
    """A phone an earlier build parked in `pool`'s warm reserve: its phone id."""
    labels = {**LABELS, LABEL_POOL: pool}
    remark = Remark(created=1_700_000_100, region="sgp", labels=labels).text()
    return fake.add_phone(reserve_mark(pool), remark, status=status, group=group)


def _pid(device: str) -> str:
    return device.partition(".")[0]


@pytest.mark.parametrize("keep", [None, 3])
async def test_a_scale_down_stops_confirms_and_deletes(keep: int | None) -> None:
    fake = Fake()
    device = _ours(fake, "k1", status=0)
    provider = fake.provider()
    with provider_call(pool=POOL, reserve_keep=keep):  # spec.reserve: ignored here
        await provider.remove_device(device)
    assert _pid(device) not in fake.phones
    assert fake.paths() == ["phone/list", "phone/stop", "phone/status", "phone/delete"]
    await provider.aclose()


async def test_a_create_never_claims_a_parked_phone() -> None:
    fake = Fake()
    parked = _parked(fake)
    provider = fake.provider()
    new = await provider.create_device(_new("k2"))
    assert _pid(new.id) != parked and "phone/detail/update" not in fake.paths()
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/start"]
    assert fake.phones[parked]["serialName"] == reserve_mark(POOL)  # left as it is
    await provider.aclose()


@pytest.mark.parametrize("status", [2, 0])  # as parked, or started by someone since
async def test_a_parked_phone_is_a_failed_device_its_pool_removes(status: int) -> None:
    # `failed`: never counted toward replicas, removed at once, and no serving phone is
    # scaled down in its place (an `offline` member would be counted, and wait 180 s).
    fake = Fake()
    parked = _parked(fake, group="moved by hand", status=status)
    provider = fake.provider()
    [listed] = await provider.list_pool(POOL)
    assert _pid(listed.id) == parked and listed.status == FAILED
    assert LABEL_SLOT not in listed.labels  # it serves no slot
    assert listed.labels[LABEL_POOL] == POOL and "never serves" in listed.reason
    items, gone = await provider.read_statuses([listed.id])
    assert [(i.id, i.status) for i in items] == [(listed.id, FAILED)] and gone == []
    assert (await provider.get_device(listed.id)).info == listed
    with provider_call(pool=POOL):  # the pool's surplus, or its replacement
        await provider.remove_device(listed.id)
    assert parked not in fake.phones
    await provider.aclose()


async def test_the_orphan_sweep_sees_and_removes_a_parked_phone() -> None:
    fake = Fake()
    parked = _parked(fake, pool="gone", status=0)  # someone started it
    provider = fake.provider()
    [managed] = await provider.list_managed()
    assert _pid(managed.info.id) == parked and managed.info.labels[LABEL_POOL] == "gone"
    with provider_call():  # the sweep names no pool
        await provider.remove_device(managed.info.id)
    assert parked not in fake.phones
    await provider.aclose()


async def test_a_deleted_pools_parked_phones_are_deleted() -> None:
    fake = Fake()
    parked = [_parked(fake), _parked(fake, status=0), _parked(fake, group="elsewhere")]
    other = _parked(fake, pool="another")
    provider = fake.provider()
    assert await provider.release_pool(POOL) == 0
    assert set(fake.phones) == {other} and not set(parked) & set(fake.phones)
    await provider.aclose()
