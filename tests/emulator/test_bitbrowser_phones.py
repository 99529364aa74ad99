"""Cloud phones (`/phone/*`) in the BitBrowser emulator: the 1-request-per-second budget,
asynchronous power, billing by power and compute type, no delete, the recover quota."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import Account, phone_body, refusal_of

BOOT, RESUME = 60, 5


@pytest.fixture
async def fast(make_account: MakeAccount) -> Account:
    """An account whose phone budget does not get in the way of tests about other things."""
    return await make_account(phone_requests_per_second=1000)


async def add(account: Account, **overrides: object) -> dict:
    phone = await account.ok("/phone/profile/add", phone_body(**overrides))
    assert isinstance(phone, dict)
    return phone


async def test_one_request_per_second_past_it_refused_in_chinese(account: Account) -> None:
    first = await account.call("/phone/list", {"page": 0, "pageSize": 10})
    assert first.json()["success"] is True
    msg = refusal_of(await account.call("/phone/list", {"page": 0, "pageSize": 10}))
    assert "频繁" in msg
    # The budget is the account's: another node's call in the same second is refused too.
    refusal_of(await account.call("/phone/list", {"page": 0}, node="node-2"))
    # Browser calls are not counted.
    assert (await account.ok("/browser/list", {"page": 0}))["total"] == 0
    phones = (await account.stats())["phones"]
    assert (phones["requests"], phones["rateLimited"], phones["maxRequestsPerSecond"]) == (3, 2, 3)
    await account.advance(1)
    await account.ok("/phone/list", {"page": 0})
    await account.advance(1)
    await account.ok("/phone/list", {"page": 0}, node="node-2")
    assert (await account.stats())["phones"]["rateLimited"] == 2


async def test_paced_at_one_per_second_nothing_is_refused(account: Account) -> None:
    for i in range(5):
        await add(account, name=f"p{i}")
        await account.advance(1)
    phones = (await account.stats())["phones"]
    assert (phones["rateLimited"], phones["maxRequestsPerSecond"], phones["created"]) == (0, 1, 5)


async def test_the_budget_per_node_and_as_http_429(make_account: MakeAccount) -> None:
    account = await make_account(phone_rate_scope="node", phone_rate_mode="http429")
    await account.ok("/phone/list", {"page": 0})
    await account.ok("/phone/list", {"page": 0}, node="node-2")
    limited = await account.call("/phone/list", {"page": 0})
    assert "频繁" in refusal_of(limited, 429)
    assert limited.headers["Retry-After"] == "1"


async def test_past_the_budget_delayed_instead(make_account: MakeAccount) -> None:
    account = await make_account(phone_rate_mode="delay", speed=10)  # a second is 0.1 s
    started = time.monotonic()
    await asyncio.gather(*(account.ok("/phone/list", {"page": 0}) for _ in range(3)))
    # Three at once: answered at 0, 1 and 2 virtual seconds.
    assert time.monotonic() - started >= 0.18
    phones = (await account.stats())["phones"]
    assert phones["rateLimited"] == 0 and phones["maxRequestsPerSecond"] == 3  # as received


async def test_the_budget_is_a_fault_knob_too(account: Account) -> None:
    await account.faults(phoneRequestsPerSecond=3)
    for _ in range(3):
        await account.ok("/phone/list", {"page": 0})
    assert "3" in refusal_of(await account.call("/phone/list", {"page": 0}))
    await account.faults()
    await account.advance(1)
    await account.ok("/phone/list", {"page": 0})
    refusal_of(await account.call("/phone/list", {"page": 0}))


async def test_add_validates_as_documented(fast: Account) -> None:
    body = phone_body()
    del body["regionId"]
    assert "regionId" in await fast.refused("/phone/profile/add", body)
    for field in ("host", "port", "proxyUserName", "proxyPassword"):
        assert field in await fast.refused("/phone/profile/add", phone_body(**{field: ""}))
    assert "30" in await fast.refused("/phone/profile/add", phone_body(name="x" * 31))
    assert "500" in await fast.refused("/phone/profile/add", phone_body(remark="x" * 501))
    assert "computeType" in await fast.refused("/phone/profile/add", phone_body(computeType=3))
    await add(fast, name="x" * 30, remark="x" * 500)
    assert (await fast.stats())["phones"]["created"] == 1


async def test_only_listed_regions_when_configured(make_account: MakeAccount) -> None:
    account = await make_account(phone_regions=["r-1"], phone_requests_per_second=100)
    assert await account.refused("/phone/profile/add", phone_body()) == "算力类型不存在"
    await add(account, regionId="r-1")


async def test_power_on_is_asynchronous(fast: Account) -> None:
    phone = await add(fast)
    ident = {"id": phone["id"]}
    assert await fast.ok("/phone/running", ident) is False
    assert await fast.ok("/phone/openphone", ident) is None
    assert await fast.ok("/phone/running", ident) is False
    await fast.advance(BOOT - 1)
    assert await fast.ok("/phone/running", ident) is False
    await fast.advance(1)
    assert await fast.ok("/phone/running", ident) is True
    # Suspended: window closed, still billed, back in about 5 s.
    await fast.ok("/phone/suspend", ident)
    assert await fast.ok("/phone/running", ident) is False
    await fast.ok("/phone/openphone", ident)
    await fast.advance(RESUME)
    assert await fast.ok("/phone/running", ident) is True
    await fast.ok("/phone/shutdown", ident)
    assert await fast.ok("/phone/running", ident) is False
    phones = (await fast.stats())["phones"]
    assert (phones["powerOns"], phones["running"], phones["suspended"]) == (2, 0, 0)


async def test_a_shutdown_takes_effect_late_when_configured(make_account: MakeAccount) -> None:
    account = await make_account(phone_requests_per_second=1000, phone_shutdown_seconds=20)
    phone = await add(account, computeType=1)
    ident = {"id": phone["id"]}
    await account.ok("/phone/openphone", ident)
    await account.advance(BOOT)
    await account.ok("/phone/shutdown", ident)
    await account.ok("/phone/shutdown", ident)  # a second ask keeps the first's time
    await account.advance(19)
    assert await account.ok("/phone/running", ident) is True  # accepted, not carried out yet
    (listed,) = (await account.ok("/phone/list", {"page": 0, "pageSize": 10}))["list"]
    assert listed["status"] == 2
    await account.advance(1)
    assert await account.ok("/phone/running", ident) is False
    phones = (await account.stats())["phones"]
    assert (phones["running"], phones["shutdowns"]) == (0, 1)
    # Billed until it went off, not until the call.
    assert phones["hoursBilled"] == pytest.approx((BOOT + 20) / 3600, abs=0.001)
    # A power-on while one is pending calls it off.
    await account.ok("/phone/openphone", ident)
    await account.advance(BOOT)
    await account.ok("/phone/shutdown", ident)
    await account.ok("/phone/openphone", ident)
    await account.advance(60)
    assert await account.ok("/phone/running", ident) is True


async def test_billing_follows_power_under_temporary_compute(fast: Account) -> None:
    phone = await add(fast, computeType=1)
    await fast.advance(3600)
    assert (await fast.stats())["phones"]["hoursBilled"] == 0  # powered off: not billed
    await fast.ok("/phone/openphone", {"id": phone["id"]})
    await fast.advance(1800)
    await fast.ok("/phone/suspend", {"id": phone["id"]})
    await fast.advance(1800)  # suspended: still billed
    await fast.ok("/phone/shutdown", {"id": phone["id"]})
    await fast.advance(7200)
    assert (await fast.stats())["phones"]["hoursBilled"] == pytest.approx(1.0, abs=0.01)


async def test_monthly_compute_is_billed_whatever_the_power(fast: Account) -> None:
    await add(fast, computeType=2)
    await fast.advance(7200)
    assert (await fast.stats())["phones"]["hoursBilled"] == pytest.approx(2.0, abs=0.01)


async def test_there_is_no_delete(fast: Account) -> None:
    phone = await add(fast)
    for path in ("/phone/profile/delete", "/phone/delete", "/phone/profile/remove"):
        assert await fast.refused(path, {"id": phone["id"]}, status=404) == "接口不存在"
    assert (await fast.ok("/phone/list", {"page": 0}))["total"] == 1


async def test_update_takes_partial_bodies_but_not_a_new_region(fast: Account) -> None:
    phone = await add(fast)
    updated = await fast.ok("/phone/profile/update", {"id": phone["id"], "name": "renamed"})
    assert updated["name"] == "renamed" and updated["proxyPassword"] == "phone-proxy-secret"
    frozen = {"id": phone["id"], "regionId": "other"}
    assert "不可修改" in await fast.refused("/phone/profile/update", frozen)
    assert await fast.refused("/phone/profile/update", {"id": "0" * 32}) == "云手机环境不存在"


async def test_list_pages_filters_and_carries_secrets(fast: Account) -> None:
    for i in range(101):
        await add(fast, name=f"p{i}", host="9.9.9.9" if i == 7 else "1.2.3.4")
    page = await fast.ok("/phone/list", {"page": 0, "pageSize": 1000})
    assert (page["total"], len(page["list"]), page["pageSize"]) == (101, 100, 100)
    assert len((await fast.ok("/phone/list", {"page": 1, "pageSize": 100}))["list"]) == 1
    item = page["list"][0]
    assert item["proxyPassword"] == "phone-proxy-secret" and item["status"] == 0
    by_host = await fast.ok("/phone/list", {"page": 0, "host": "9.9.9.9"})
    assert [p["name"] for p in by_host["list"]] == ["p7"]
    by_name = await fast.ok("/phone/list", {"page": 0, "pageSize": 100, "name": "p10"})
    assert sorted(p["name"] for p in by_name["list"]) == ["p10", "p100"]


async def test_a_running_phone_lists_its_adb_password(fast: Account) -> None:
    phone = await add(fast)
    await fast.ok("/phone/openphone", {"id": phone["id"]})
    await fast.advance(BOOT)
    item = (await fast.ok("/phone/list", {"page": 0}))["list"][0]
    assert '"code"' in item["adb"] and item["status"] == 2
    secrets = (await fast.http["node-1"].get("/_emulator/secrets")).json()["secrets"]
    assert "phone-proxy-secret" in secrets and len(secrets) == 2


async def test_restart_needs_power_and_recover_has_a_monthly_quota(
    make_account: MakeAccount,
) -> None:
    account = await make_account(phone_requests_per_second=100, phone_recovers_per_month=2)
    phone = await add(account)
    ident = {"id": phone["id"]}
    assert await account.refused("/phone/restart", ident) == "云手机未开机"
    assert await account.refused("/phone/suspend", ident) == "云手机未开机"
    for _ in range(2):
        await account.ok("/phone/profile/recover", ident)
    assert "次数已用完" in await account.refused("/phone/profile/recover", ident)
    await account.advance(32 * 86400)  # next month
    await account.ok("/phone/profile/recover", ident)


async def test_a_phone_taken_offline_is_not_running(fast: Account) -> None:
    phone = await add(fast)
    await fast.ok("/phone/openphone", {"id": phone["id"]})
    await fast.advance(BOOT)
    answer = await fast.control(f"phones/{phone['id']}/offline")
    assert answer == {"id": phone["id"], "offline": True, "running": False}
    assert await fast.ok("/phone/running", {"id": phone["id"]}) is False
    await fast.ok("/phone/restart", {"id": phone["id"]})
    await fast.advance(600)
    assert await fast.ok("/phone/running", {"id": phone["id"]}) is False
    await fast.control(f"phones/{phone['id']}/online")
    assert await fast.ok("/phone/running", {"id": phone["id"]}) is True


async def test_phone_groups_and_batch_updates(fast: Account) -> None:
    group = await fast.ok("/phone/group/add", {"groupName": "g", "sortNum": 3})
    one, two = await add(fast), await add(fast, name="b")
    ids = [one["id"], two["id"]]
    await fast.ok("/phone/batchUpdate/group", {"groupId": group["id"], "phoneIds": ids})
    await fast.ok("/phone/batchUpdate/remark", {"phoneIds": ids, "remark": "+x", "remarkType": 2})
    listed = await fast.ok("/phone/list", {"page": 0, "groupId": group["id"]})
    assert sorted(p["remark"] for p in listed["list"]) == ["devicepool pool=pool-p slot=0+x"] * 2
    groups = await fast.ok("/phone/group/list", {"page": 0, "pageSize": 10})
    assert [g["groupName"] for g in groups["list"]] == ["g"]


async def test_a_refused_call_does_nothing(account: Account) -> None:
    await add(account)
    refusal_of(await account.call("/phone/profile/add", phone_body(name="second")))
    await account.advance(1)
    assert (await account.ok("/phone/list", {"page": 0}))["total"] == 1
    assert (await account.stats())["phones"]["created"] == 1
