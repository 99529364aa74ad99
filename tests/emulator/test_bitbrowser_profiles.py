"""Browser profiles in the BitBrowser emulator: account-wide, replace-on-update, partial
updates, secrets in answers, paging, and no idempotency."""

from __future__ import annotations

import asyncio

import pytest

from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import Account, profile_body


async def test_a_create_needs_proxy_method_and_type_and_a_fingerprint(account: Account) -> None:
    body = profile_body()
    del body["proxyMethod"]
    assert await account.refused("/browser/update", body) == "请选择代理方式"
    assert await account.refused("/browser/update", profile_body(proxyType="")) == "请选择代理类型"
    body = profile_body()
    del body["browserFingerPrint"]
    assert "指纹" in await account.refused("/browser/update", body)
    assert (await account.stats())["creates"] == 0


async def test_an_empty_fingerprint_is_random_and_no_group_means_the_api_group(
    account: Account,
) -> None:
    first = await account.create()
    second = await account.create()
    assert first["browserFingerPrint"]["userAgent"]
    assert first["browserFingerPrint"]["canvasValue"] != second["browserFingerPrint"]["canvasValue"]
    groups = await account.ok("/group/list", {"page": 0, "pageSize": 10})
    assert [g["groupName"] for g in groups["list"]] == ["API"]
    assert first["groupId"] == second["groupId"] == groups["list"][0]["id"]
    assert await account.refused("/browser/update", profile_body(groupId="nope")) == "分组不存在"


async def test_profiles_belong_to_the_account_every_node_sees_them(account: Account) -> None:
    created = await account.create(node="node-1")
    listed = await account.ok("/browser/list", {"page": 0, "pageSize": 10}, node="node-2")
    assert [p["id"] for p in listed["list"]] == [created["id"]]
    detail = await account.ok("/browser/detail", {"id": created["id"]}, node="node-2")
    assert detail["name"] == "pool-a/0"
    await account.ok(
        "/browser/update/partial", {"ids": [created["id"]], "name": "n2"}, node="node-2"
    )
    assert (await account.ok("/browser/detail", {"id": created["id"]}))["name"] == "n2"
    await account.ok("/browser/delete", {"id": created["id"]}, node="node-2")
    listed = await account.ok("/browser/list", {"page": 0, "pageSize": 10}, node="node-1")
    assert listed["total"] == 0


async def test_update_with_an_id_refuses_a_partial_body(account: Account) -> None:
    created = await account.create()
    partial = {"id": created["id"], "name": "renamed"}
    msg = await account.refused("/browser/update", partial)
    assert "完整" in msg and "/browser/update/partial" in msg
    # It names what the body would drop, and changes nothing.
    assert "remark" in msg and "proxyPassword" in msg
    detail = await account.ok("/browser/detail", {"id": created["id"]})
    assert detail["name"] == "pool-a/0" and detail["remark"] == created["remark"]
    # With the required fields but without the record's remark: still refused.
    body = profile_body(id=created["id"], name="renamed")
    del body["remark"]
    assert "remark" in await account.refused("/browser/update", body)


async def test_update_with_an_id_and_the_whole_record_replaces_it(account: Account) -> None:
    created = await account.create(cookie='[{"name":"sid","value":"c00kie"}]')
    body = profile_body(id=created["id"], name="renamed", cookie="")
    replaced = await account.ok("/browser/update", body)
    assert replaced["id"] == created["id"] and replaced["seq"] == created["seq"]
    assert replaced["name"] == "renamed" and replaced["cookie"] == ""
    stats = await account.stats()
    assert stats["creates"] == 1 and stats["profiles"]["total"] == 1


async def test_partial_update_merges_fields_and_the_fingerprint(account: Account) -> None:
    one, two = await account.create(), await account.create(name="pool-a/1")
    fingerprint = one["browserFingerPrint"]
    await account.ok(
        "/browser/update/partial",
        {
            "ids": [one["id"], two["id"]],
            "remark": "moved",
            "browserFingerPrint": {"os": "MacIntel"},
        },
    )
    after = await account.ok("/browser/detail", {"id": one["id"]})
    assert after["remark"] == "moved" and after["name"] == "pool-a/0"
    assert after["proxyPassword"] == "proxy-secret-0"
    assert after["browserFingerPrint"] == {**fingerprint, "os": "MacIntel"}
    assert (await account.ok("/browser/detail", {"id": two["id"]}))["remark"] == "moved"
    missing = {"ids": [one["id"], "0" * 32], "remark": "x"}
    assert await account.refused("/browser/update/partial", missing) == "窗口不存在或已被删除"
    assert "ids" in await account.refused("/browser/update/partial", {"remark": "x"})


async def test_list_and_detail_carry_the_secrets(account: Account) -> None:
    created = await account.create(
        password="account-pass", cookie='[{"name":"sid"}]', faSecretKey="JBSWY3DPEHPK3PXP"
    )
    listed = (await account.ok("/browser/list", {"page": 0, "pageSize": 10}))["list"][0]
    detail = await account.ok("/browser/detail", {"id": created["id"]})
    for answer in (created, listed, detail):
        assert answer["proxyPassword"] == "proxy-secret-0"
        assert answer["password"] == "account-pass"
        assert answer["cookie"] == '[{"name":"sid"}]'
        assert answer["faSecretKey"] == "JBSWY3DPEHPK3PXP"
    secrets = (await account.http["node-1"].get("/_emulator/secrets")).json()["secrets"]
    assert set(secrets) == {
        "proxy-secret-0",
        "account-pass",
        '[{"name":"sid"}]',
        "JBSWY3DPEHPK3PXP",
    }
    assert (await account.stats())["secrets"] == {"live": 4}


async def test_paging_is_zero_based_and_page_size_is_cut_to_100(account: Account) -> None:
    for i in range(105):
        await account.create(name=f"p{i}")
    first = await account.ok("/browser/list", {"page": 0, "pageSize": 500})
    assert (first["total"], len(first["list"]), first["pageSize"]) == (105, 100, 100)
    second = await account.ok("/browser/list", {"page": 1, "pageSize": 500})
    assert len(second["list"]) == 5
    # Newest first by default; `sort: asc` oldest first.
    assert first["list"][0]["name"] == "p104" and second["list"][-1]["name"] == "p0"
    asc = await account.ok("/browser/list", {"page": 0, "pageSize": 3, "sort": "asc"})
    assert [p["name"] for p in asc["list"]] == ["p0", "p1", "p2"]
    assert (await account.ok("/browser/list", {"page": 0}))["pageSize"] == 10
    assert (await account.ok("/browser/list", {"page": 9, "pageSize": 100}))["list"] == []
    assert "page" in await account.refused("/browser/list", {"pageSize": 10})
    assert "page" in await account.refused("/browser/list", {"page": -1, "pageSize": 10})


async def test_name_and_remark_filters_match_substrings(account: Account) -> None:
    await account.create(name="pool-a/1", remark="slot=1")
    await account.create(name="pool-a/10", remark="slot=10")
    await account.create(name="pool-b/1", remark="slot=1")
    by_name = await account.ok("/browser/list", {"page": 0, "name": "pool-a/1"})
    assert sorted(p["name"] for p in by_name["list"]) == ["pool-a/1", "pool-a/10"]
    by_remark = await account.ok("/browser/list", {"page": 0, "remark": "slot=1"})
    assert by_remark["total"] == 3  # a mark must be compared exactly by the client


async def test_no_idempotency_a_retried_create_makes_a_second_profile(account: Account) -> None:
    await account.create()
    await account.create()
    stats = await account.stats()
    assert stats["creates"] == 2 and stats["profiles"]["total"] == 2
    assert stats["duplicates"] == {
        "byName": {"pool-a/0": 2},
        "byRemark": {"devicepool pool=pool-a slot=0": 2},
    }


async def test_a_lost_answer_still_made_the_profile(account: Account) -> None:
    await account.faults(timeoutRate=1, timeoutSeconds=30)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(account.call("/browser/update", profile_body()), 0.5)
    await account.faults()
    listed = await account.ok("/browser/list", {"page": 0, "remark": "slot=0"})
    assert listed["total"] == 1  # the client must look for its mark before creating again
    assert (await account.stats())["faultsInjected"] == {"timeout": 1}


async def test_delete_ids_takes_at_most_100_and_skips_unknown_ids(account: Account) -> None:
    ids = [(await account.create(name=f"p{i}"))["id"] for i in range(3)]
    assert "100" in await account.refused(
        "/browser/delete/ids", {"ids": [f"{i:032x}" for i in range(101)]}
    )
    await account.ok("/browser/delete/ids", {"ids": [*ids[:2], "0" * 32]})
    stats = await account.stats()
    assert (stats["deletes"], stats["profiles"]["total"]) == (2, 1)
    assert "ids" in await account.refused("/browser/delete/ids", {"ids": []})


async def test_groups_and_batch_remark_and_group_updates(account: Account) -> None:
    group = await account.ok("/group/add", {"groupName": "pools", "sortNum": 1})
    assert (await account.ok("/group/detail", {"id": group["id"]}))["groupName"] == "pools"
    created = await account.create()
    await account.ok(
        "/browser/group/update", {"groupId": group["id"], "browserIds": [created["id"]]}
    )
    await account.ok("/browser/remark/update", {"remark": "r", "browserIds": [created["id"]]})
    listed = await account.ok("/browser/list", {"page": 0, "groupId": group["id"]})
    assert [(p["id"], p["remark"]) for p in listed["list"]] == [(created["id"], "r")]


async def test_ids_are_stable_for_a_seed(make_account: MakeAccount) -> None:
    first, second = await make_account(seed=3), await make_account(seed=3)
    assert (await first.create())["id"] == (await second.create())["id"]
