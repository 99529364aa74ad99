"""The `geelark` adapter behind the provider seam, on `httpx.MockTransport` (`geelark_fake`):
listing by the mark with paging, a create recovered after a timeout (no idempotency key),
power apart from existence, remove as stop, confirm, delete, statuses per item, connect
info from ADB, and no secret in anything it returns."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities
from devicepool.activities.device_models import OFFLINE, PROVISIONING, READY
from devicepool.activities.errors import NotFoundError, ProviderError, TransportTimeoutError
from devicepool.activities.models import DeviceTemplate, TerminateDeviceInput
from devicepool.activities.providers.base import NewDevice
from devicepool.activities.providers.geelark import GeeLarkBusyError, GeeLarkQuotaError
from devicepool.activities.providers.geelark.marks import Remark, pool_group, slot_mark
from devicepool.activities.providers.geelark.provider import REUSE_SECONDS
from devicepool.activities.proxy import ResolvedProxy
from devicepool.activities.settings import AccountSettings
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY
from tests.activities.geelark_fake import API_KEY, PROXY_PASSWORD, Clock, Fake, ok, refused

POOL = "checkout"
TEMPLATE = DeviceTemplate(platform="android", region="sgp", os_version="13")
LABELS = {LABEL_POOL: POOL, LABEL_MANAGED_BY: MANAGED_BY}


def _new(key: str = "slot-1", proxy: ResolvedProxy | None = None) -> NewDevice:
    return NewDevice(template=TEMPLATE, name="d", labels=LABELS, idempotency_key=key, proxy=proxy)


def _ours(fake: Fake, key: str, *, status: int = 0, pool: str = POOL, **more: Any) -> str:
    """A phone serving the pool's slot `key`: its device id."""
    labels = {**LABELS, LABEL_POOL: pool}
    remark = Remark(created=1_700_000_000, region="sgp", labels=labels).text()
    mark = slot_mark(pool, key)
    phone = fake.add_phone(mark, remark, status=status, group=pool_group(pool), **more)
    return f"{phone}.{mark.rsplit('-', 1)[1]}"


def _pid(device: str) -> str:
    """The phone id of a device id."""
    return device.partition(".")[0]


async def test_list_pool_pages_until_a_short_page_and_keeps_only_its_phones() -> None:
    fake = Fake()
    ids = [_ours(fake, f"k{i}", status=i % 3) for i in range(250)]
    _ours(fake, "other", pool="another-pool")
    fake.add_phone("by-hand", "not ours", group=pool_group(POOL))  # in the group, foreign
    fake.add_phone(slot_mark(POOL, "x"), "devicepool/1 dp.at=nan", group=pool_group(POOL))
    provider = fake.provider()
    devices = await provider.list_pool(POOL)
    assert sorted(d.id for d in devices) == sorted(ids)
    pages = [b["page"] for p, _, b in fake.requests if p.endswith("phone/list")]
    assert pages == [1, 2, 3, 1, 2, 3]  # a first listing of pages is read twice
    await provider.list_pool(POOL)
    pages = [b["page"] for p, _, b in fake.requests if p.endswith("phone/list")]
    assert pages[6:] == [1, 2, 3]  # the same phones as last time: once
    assert all(b["pageSize"] == 100 for p, _, b in fake.requests)
    by_status = {d.id: d.status for d in devices}
    assert by_status[ids[0]] == READY
    assert by_status[ids[1]] == PROVISIONING
    assert by_status[ids[2]] == OFFLINE
    assert devices[0].labels[LABEL_POOL] == POOL and devices[0].region == "sgp"
    await provider.aclose()


async def test_a_listing_never_carries_the_proxy_password() -> None:
    fake = Fake()
    _ours(fake, "k1")
    provider = fake.provider()
    devices = await provider.list_pool(POOL)
    managed = await provider.list_managed()
    one = await provider.get_device(devices[0].id)
    for shown in (devices[0], managed[0].info, one.info):
        assert PROXY_PASSWORD not in shown.model_dump_json()
    await provider.aclose()


async def test_a_create_adds_a_shut_down_phone_then_starts_it() -> None:
    fake = Fake()
    provider = fake.provider()
    proxy = ResolvedProxy(
        pool="gw",
        type="socks5",
        host="gw.example",
        port=1080,
        username="u-1",
        password=SecretStr(PROXY_PASSWORD),
    )
    info = await provider.create_device(_new(proxy=proxy))
    assert info.status == PROVISIONING and info.labels == LABELS
    # The mark (no reserve is claimed), then the add and the start.
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/start"]
    (_, _, add) = fake.requests[1]
    assert add["mobileType"] == "Android 13" and add["region"] == "sgp"
    profile = add["data"][0]
    assert profile["profileName"] == slot_mark(POOL, "slot-1")
    assert profile["profileGroup"] == pool_group(POOL)
    assert profile["proxyInformation"].startswith("socks5://u-1:")
    assert PROXY_PASSWORD not in repr(info) and PROXY_PASSWORD not in info.model_dump_json()
    assert fake.phones[_pid(info.id)]["status"] == 1
    await provider.aclose()


async def test_a_create_whose_answer_was_lost_is_found_by_its_mark() -> None:
    fake = Fake()

    def applied_then_lost(f: Fake, body: dict[str, Any]) -> Any:
        f.add_new(body)
        raise httpx.ReadTimeout("lost")

    fake.script["phone/addNew"] = [applied_then_lost]
    provider = fake.provider()
    info = await provider.create_device(_new())
    assert len(fake.phones) == 1 and _pid(info.id) in fake.phones
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/list", "phone/start"]
    # The activity's retry (a second attempt of the slot) makes no second phone either.
    again = await provider.create_device(_new())
    assert again.id == info.id and len(fake.phones) == 1
    assert fake.paths().count("phone/addNew") == 1
    await provider.aclose()


async def test_a_create_lost_before_it_applied_raises_for_the_retry() -> None:
    fake = Fake()
    fake.script["phone/addNew"] = [lambda f, body: (_ for _ in ()).throw(httpx.ReadTimeout("lost"))]
    provider = fake.provider()
    with pytest.raises(TransportTimeoutError):
        await provider.create_device(_new())
    assert fake.phones == {}
    info = await provider.create_device(_new())
    assert len(fake.phones) == 1 and _pid(info.id) in fake.phones
    await provider.aclose()


async def test_a_mark_found_by_a_fuzzy_filter_must_match_exactly() -> None:
    fake = Fake()
    mark = slot_mark(POOL, "slot-1")
    remark = Remark(created=1, region="sgp", labels=LABELS).text()
    fake.add_phone(mark + "-copy", remark, group=pool_group(POOL))  # a user's clone
    provider = fake.provider()
    info = await provider.create_device(_new())
    assert fake.phones[_pid(info.id)]["serialName"] == mark
    await provider.aclose()


async def test_a_daily_create_quota_is_a_quota_error_with_its_reset() -> None:
    fake = Fake()
    fake.script["phone/addNew"] = [
        ok(
            {
                "totalAmount": 1,
                "successAmount": 0,
                "failAmount": 1,
                "details": [{"index": 0, "code": 44004, "msg": "daily creation limit"}],
            }
        )
    ]
    provider = fake.provider()
    with pytest.raises(GeeLarkQuotaError) as caught:
        await provider.create_device(_new())
    assert caught.value.resets_at is not None
    assert caught.value.error_type is ErrorType.QUOTA_EXCEEDED
    await provider.aclose()


async def test_a_started_phone_is_stopped_confirmed_then_deleted() -> None:
    fake = Fake()
    fake.stop_lag = 2  # two status reads still show it started
    phone = _ours(fake, "k1", status=0)
    clock = Clock()
    provider = fake.provider(clock)
    await provider.remove_device(phone)
    assert _pid(phone) not in fake.phones
    assert fake.paths() == [
        "phone/list",
        "phone/stop",
        "phone/status",
        "phone/status",
        "phone/status",
        "phone/delete",
    ]
    await provider.aclose()


async def test_a_stop_not_confirmed_in_time_sends_no_delete() -> None:
    fake = Fake()
    fake.stop_lag = 100
    phone = _ours(fake, "k1", status=0)
    provider = fake.provider()
    with pytest.raises(ProviderError) as caught:
        await provider.remove_device(phone)
    assert caught.value.error_type is ErrorType.TEARDOWN_PENDING and caught.value.retryable
    assert "phone/delete" not in fake.paths() and _pid(phone) in fake.phones
    await provider.aclose()


async def test_a_shut_down_phone_is_deleted_without_a_stop() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=2)
    provider = fake.provider()
    await provider.remove_device(phone)
    assert fake.paths() == ["phone/list", "phone/delete"] and _pid(phone) not in fake.phones
    await provider.aclose()


async def test_a_stop_refused_for_a_busy_phone_is_busy_and_nothing_is_deleted() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    fake.script["phone/stop"] = [
        ok(
            {
                "totalAmount": 1,
                "successAmount": 0,
                "failAmount": 1,
                "successDetails": [],
                "failDetails": [{"code": 43006, "id": _pid(phone), "msg": "under remote control"}],
            }
        )
    ]
    provider = fake.provider()
    with pytest.raises(GeeLarkBusyError) as caught:
        await provider.remove_device(phone)
    assert not caught.value.retryable
    assert "phone/delete" not in fake.paths() and _pid(phone) in fake.phones
    await provider.aclose()


async def test_a_delete_answered_zero_with_the_item_failed_is_not_done() -> None:
    # [field]: running phones recorded deleted because only the envelope was read.
    fake = Fake()
    phone = _ours(fake, "k1", status=2)
    fake.script["phone/delete"] = [
        ok(
            {
                "totalAmount": 1,
                "successAmount": 0,
                "failAmount": 1,
                "failDetails": [{"code": 43021, "id": _pid(phone), "msg": "in use"}],
            }
        )
    ]
    provider = fake.provider()
    with pytest.raises(GeeLarkBusyError):
        await provider.remove_device(phone)
    assert _pid(phone) in fake.phones
    await provider.aclose()


async def test_remove_of_an_unknown_or_foreign_phone_is_not_found() -> None:
    fake = Fake()
    foreign = fake.add_phone("my-own-phone", "hands off", status=0)
    provider = fake.provider()
    for device_id in ("424242", foreign):
        with pytest.raises(NotFoundError):
            await provider.remove_device(device_id)
    assert foreign in fake.phones and "phone/stop" not in fake.paths()
    await provider.aclose()


async def test_read_statuses_per_item_with_the_unknown_ones_not_found() -> None:
    fake = Fake()
    a, b = _ours(fake, "a", status=0), _ours(fake, "b", status=2)
    fake.phones[_pid(b)]["status"] = 3  # expired
    provider = fake.provider()
    items, not_found = await provider.read_statuses([a, b, "999"])
    assert {i.id: i.status for i in items} == {a: "ready", b: "failed"}
    assert not_found == ["999"]
    await provider.aclose()


async def test_read_statuses_with_an_unaccounted_id_raises_not_guesses() -> None:
    fake = Fake()
    a = _ours(fake, "a", status=0)
    fake.script["phone/status"] = [
        ok({"totalAmount": 1, "successAmount": 0, "failAmount": 0, "successDetails": []})
    ]
    provider = fake.provider()
    with pytest.raises(ProviderError) as caught:
        await provider.read_statuses([a])
    assert caught.value.retryable
    await provider.aclose()


async def test_connect_info_switches_adb_on_and_keeps_the_password_secret() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    clock = Clock()
    provider = fake.provider(clock)
    info = await provider.connect_info(phone)
    assert info.adb is not None and (info.adb.ip, info.adb.port) == ("10.0.0.7", 5555)
    assert info.adb.code == "adb-Pw-77" and "adb-Pw-77" not in repr(info)
    assert fake.paths() == ["phone/list", "adb/getData", "adb/setStatus", "adb/getData"]
    assert clock.slept == [3.0]
    await provider.aclose()


async def test_connect_info_of_a_stopped_phone_says_why_not() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=2)
    provider = fake.provider()
    info = await provider.connect_info(phone)
    assert info.empty() and "not running" in info.message
    await provider.aclose()


async def test_no_reset_no_regions_android_only() -> None:
    fake = Fake()
    provider = fake.provider()
    assert await provider.reset_device("1") is False
    assert await provider.region_names() == []
    assert await provider.region_status("sgp") == "unknown"
    assert provider.platform_problem("ios") is not None
    assert provider.platform_problem("android") is None
    assert await provider.release_pool(POOL) == 0
    await provider.aclose()


async def test_a_locked_key_fails_a_create_without_a_call() -> None:
    fake = Fake()
    fake.script["phone/list"] = [refused(40014, "locked")]
    provider = fake.provider()
    with pytest.raises(ProviderError) as first:
        await provider.create_device(_new())
    with pytest.raises(ProviderError) as second:
        await provider.create_device(_new())
    assert first.value.error_type is second.value.error_type is ErrorType.RATE_LIMITED
    assert fake.paths() == ["phone/list"]
    await provider.aclose()


async def test_a_total_that_under_counts_never_cuts_the_listing_short() -> None:
    fake = Fake()
    ids = [_ours(fake, f"k{i}") for i in range(150)]
    real = fake._phone_list

    def lying(body: dict[str, Any]) -> dict[str, Any]:
        answer = real(body)
        answer["data"]["total"] = 100
        return answer

    fake._phone_list = lying  # type: ignore[method-assign]
    provider = fake.provider()
    assert len(await provider.list_pool(POOL)) == len(ids)
    await provider.aclose()


async def test_a_status_item_refused_otherwise_is_no_verdict() -> None:
    fake = Fake()
    a = _ours(fake, "a", status=0)
    fake.script["phone/status"] = [
        ok(
            {
                "totalAmount": 2,
                "successAmount": 0,
                "failAmount": 2,
                "successDetails": [],
                "failDetails": [
                    {"code": 43029, "id": _pid(a), "msg": "maintenance"},
                    {"code": 42001, "id": "9", "msg": "not found"},
                ],
            }
        )
    ]
    provider = fake.provider()
    assert await provider.read_statuses([a, "9"]) == ([], ["9"])
    await provider.aclose()


async def test_connect_info_refused_whole_as_not_running_says_why_not() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    fake.script["adb/getData"] = [refused(42002, "not running")]
    provider = fake.provider()
    info = await provider.connect_info(phone)
    assert info.empty() and "not running" in info.message
    await provider.aclose()


async def test_a_phone_moved_out_of_its_group_is_still_the_pools() -> None:
    # A person moves a phone to another group (Move Group, or its group deleted): it still
    # runs and bills, so its pool must still see it, and a retry of its slot finds it.
    fake = Fake()
    device = _ours(fake, "slot-1", status=0)
    fake.phones[_pid(device)]["group"] = {"id": "g9", "name": "customers", "remark": ""}
    provider = fake.provider()
    assert [d.id for d in await provider.list_pool(POOL)] == [device]
    items, _ = await provider.read_statuses([device])
    assert [i.id for i in items] == [device]
    again = await provider.create_device(_new("slot-1"))
    assert again.id == device and "phone/addNew" not in fake.paths()
    assert all("groupName" not in b for p, _, b in fake.requests if p.endswith("phone/list"))
    await provider.aclose()


async def test_a_name_filter_that_answers_only_whole_names_still_finds_the_pools_phones() -> None:
    # GeeLark's docs do not say whether `serialName` matches a part of a name. Were it whole
    # names only, the prefix would find none of the pool's phones, and a pool that cannot see
    # its phones rents new ones for ever: an empty answer is checked by the managed tag, and
    # once that finds what the prefix did not, pools are listed by the tag.
    fake = Fake()
    fake.exact_names = True
    device = _ours(fake, "slot-1", status=0)
    provider = fake.provider()
    assert [d.id for d in await provider.list_pool(POOL)] == [device]
    assert [d.id for d in await provider.list_pool(POOL)] == [device]
    lists = [b for p, _, b in fake.requests if p.endswith("phone/list")]
    assert [sorted(b) for b in lists] == [
        ["page", "pageSize", "serialName"],
        ["page", "pageSize", "tags"],
        ["page", "pageSize", "serialName"],  # none by the prefix again: not a create landing
        ["page", "pageSize", "tags"],
    ]
    again = await provider.create_device(_new("slot-1"))  # the look-up names the whole mark
    assert again.id == device and "phone/addNew" not in fake.paths()
    await provider.aclose()


async def test_a_name_filter_that_matches_a_part_is_trusted_once_seen() -> None:
    fake = Fake()
    device = _ours(fake, "slot-1", status=0)
    provider = fake.provider()
    assert [d.id for d in await provider.list_pool(POOL)] == [device]
    assert await provider.list_pool("another") == []  # no second look by the tag
    lists = [b for p, _, b in fake.requests if p.endswith("phone/list")]
    assert ["tags" in b for b in lists] == [False, False]
    await provider.aclose()


async def test_a_template_without_an_os_version_sends_the_default_mobile_type() -> None:
    # `addNew` requires `mobileType`: left out, every create of the pool was refused.
    fake = Fake()
    provider = fake.provider()
    template = TEMPLATE.model_copy(update={"os_version": ""})
    new = NewDevice(template=template, name="d", labels=LABELS, idempotency_key="k")
    await provider.create_device(new)
    [add] = [b for p, _, b in fake.requests if p.endswith("phone/addNew")]
    assert add["mobileType"] == "Android 15"
    await provider.aclose()


async def test_a_delete_and_a_create_while_paging_hide_no_phone() -> None:
    # Oldest first: a phone of page 1 deleted and one created before page 2 is read keep
    # the total, and shift the first phone of page 2 onto page 1, where it was not read.
    fake = Fake()
    ids = [_ours(fake, f"k{i}") for i in range(150)]
    provider = fake.provider()
    assert len(await provider.list_pool(POOL)) == 150  # the listing before, as a pass had

    def churn_then_page(f: Fake, body: dict[str, Any]) -> Any:
        del f.phones[_pid(ids[5])]
        ids.append(_ours(f, "late"))
        return f._phone_list(body)

    fake.script["phone/list"] = [lambda f, body: f._phone_list(body), churn_then_page]
    listed = {d.id for d in await provider.list_pool(POOL)}
    assert set(ids[6:]) <= listed
    await provider.aclose()


# ------------------------------------------------ one read a removal (issue 41, the bench)


async def test_a_scale_down_activity_reads_its_phone_once() -> None:
    # The idle check's read is the removal's: a second `phone/list` a phone held 100 -> 0
    # a minute on its pacer (bench/geelark.py). The stop, its confirmation and the delete
    # still ask the provider.
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    acts = DeviceActivities(
        accounts={
            "gl": AccountSettings(
                name="gl", api="geelark", base_url="https://openapi.example", api_key=API_KEY
            )
        },
        proxy_pools={},
        transport=httpx.MockTransport(fake.handle),
    )
    ask = TerminateDeviceInput(account="gl", device_id=phone, pool=POOL, only_if_idle=True)
    result = await ActivityEnvironment().run(acts.terminate_device, ask)
    assert result.device_id == phone and not result.skipped and not result.already_gone
    assert fake.paths() == ["phone/list", "phone/stop", "phone/status", "phone/delete"]
    assert _pid(phone) not in fake.phones
    await acts.aclose()


async def test_the_idle_checks_read_serves_the_removal_after_it_only() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    clock = Clock()
    provider = fake.provider(clock)
    await provider.get_device(phone)
    await provider.remove_device(phone)
    assert fake.paths() == ["phone/list", "phone/stop", "phone/status", "phone/delete"]
    # The last read only: of two phones read, the first one's removal reads it again.
    first, last = _ours(fake, "k2", status=0), _ours(fake, "k3", status=2)
    await provider.get_device(first)
    await provider.get_device(last)
    fake.requests.clear()
    await provider.remove_device(last)
    assert fake.paths() == ["phone/delete"]
    fake.requests.clear()
    await provider.remove_device(first)
    assert fake.paths()[0] == "phone/list"
    # Once: a second removal after one read (a retry in the same task) reads again.
    retried = _ours(fake, "k4", status=2)
    await provider.get_device(retried)
    fake.script["phone/delete"] = [refused(40000, "try later")]
    with pytest.raises(ProviderError):
        await provider.remove_device(retried)
    fake.requests.clear()
    await provider.remove_device(retried)
    assert fake.paths() == ["phone/list", "phone/delete"]
    await provider.aclose()


async def test_a_read_seconds_old_is_not_reused() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    clock = Clock()
    provider = fake.provider(clock)
    await provider.get_device(phone)
    await clock.sleep(REUSE_SECONDS + 0.5)
    fake.phones[_pid(phone)]["status"] = 2  # stopped meanwhile: no stop sent
    await provider.remove_device(phone)
    assert fake.paths() == ["phone/list", "phone/list", "phone/delete"]
    await provider.aclose()


async def test_a_read_by_another_task_or_adapter_is_not_reused() -> None:
    # An activity is a task of its own: one's read never decides another's removal.
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    provider, other = fake.provider(), fake.provider()
    await asyncio.create_task(provider.get_device(phone))
    await other.get_device(phone)
    fake.requests.clear()
    await provider.remove_device(phone)
    assert fake.paths()[0] == "phone/list"
    await provider.aclose()
    await other.aclose()


async def test_a_phone_gone_after_the_idle_read_is_not_found_and_nothing_deleted() -> None:
    fake = Fake()
    phone = _ours(fake, "k1", status=0)
    provider = fake.provider()
    await provider.get_device(phone)
    del fake.phones[_pid(phone)]  # deleted by hand between the read and the stop
    with pytest.raises(NotFoundError):
        await provider.remove_device(phone)
    assert fake.paths() == ["phone/list", "phone/stop"]
    await provider.aclose()


async def test_a_phone_started_after_a_shut_down_read_is_refused_its_delete() -> None:
    # The read says shut down, so no stop; the provider refuses to delete a started phone,
    # and the retry reads it afresh.
    fake = Fake()
    phone = _ours(fake, "k1", status=2)
    provider = fake.provider()
    await provider.get_device(phone)
    fake.phones[_pid(phone)]["status"] = 0  # started by a person meanwhile
    with pytest.raises(ProviderError):
        await provider.remove_device(phone)
    assert _pid(phone) in fake.phones
    await provider.remove_device(phone)
    assert _pid(phone) not in fake.phones
    assert fake.paths()[-4:] == ["phone/list", "phone/stop", "phone/status", "phone/delete"]
    await provider.aclose()


async def test_a_create_landing_between_the_two_listings_does_not_switch_to_the_tag() -> None:
    # R13: the prefix answered none, a create landed, the tag found it: taken for "whole
    # names only", every later look listed the whole account by the tag (its windows spent).
    fake = Fake()
    provider = fake.provider()

    def empty_then_create(f: Fake, body: dict[str, Any]) -> Any:
        answer = f._phone_list(body)  # the prefix listing: none of the pool's yet
        _ours(f, "slot-1")  # a create lands before the tag listing
        return answer

    fake.script["phone/list"] = [empty_then_create]
    assert len(await provider.list_pool(POOL)) == 1
    await provider.list_pool(POOL)
    lists = [b for p, _, b in fake.requests if p.endswith("phone/list")]
    assert "tags" not in lists[-1], "a later look listed the whole account by the tag"
    await provider.aclose()
