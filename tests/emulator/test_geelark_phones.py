"""The GeeLark emulator's phones: create shut down, boot asynchronously, stop, delete only
when stopped, list with paging and secrets, labels, batches answered per item, ADB."""

from __future__ import annotations

from tests.helpers.geelark import phone_row, team


async def test_a_new_phone_is_shut_down_and_boots_asynchronously() -> None:
    async with team(boot_seconds=20) as t:
        created = await t.ok("phone/addNew", {"mobileType": "Android 12", "data": [phone_row("a")]})
        [detail] = created["details"]
        assert (detail["index"], detail["code"], detail["profileName"]) == (1, 0, "a")
        assert detail["envSerialNo"] and detail["equipmentInfo"]["imei"]
        phone = detail["id"]
        assert await t.status(phone) == {phone: 2}
        started = await t.ok("phone/start", {"ids": [phone]})
        assert started["successAmount"] == 1
        assert started["successDetails"][0]["chargingMethod"] == "Per-minute usage"
        assert await t.status(phone) == {phone: 1}
        await t.advance(19)
        assert await t.status(phone) == {phone: 1}
        await t.advance(1)
        assert await t.status(phone) == {phone: 0}
        stopped = await t.ok("phone/stop", {"ids": [phone]})
        assert stopped["successAmount"] == 1
        assert await t.status(phone) == {phone: 2}
        stats = await t.stats()
        assert (
            stats["phones"] | {"created": 1, "starts": 1, "stops": 1, "running": 0}
            == stats["phones"]
        )


async def test_delete_is_refused_while_started_or_starting_and_answered_per_item() -> None:
    async with team(boot_seconds=10) as t:
        starting, started, off = await t.create("a", "b", "c")
        await t.ok("phone/start", {"ids": [started]})
        await t.advance(10)
        await t.ok("phone/start", {"ids": [starting]})
        deleted = await t.ok("phone/delete", {"ids": [starting, started, off, "404"]})
        # code 0 in the envelope although three of four items failed
        assert (deleted["successAmount"], deleted["failAmount"]) == (1, 3)
        assert {(f["id"], f["code"]) for f in deleted["failDetails"]} == {
            (starting, 43010),
            (started, 43009),
            ("404", 42001),
        }
        assert "successDetails" not in deleted
        await t.ok("phone/stop", {"ids": [starting, started]})
        assert (await t.ok("phone/delete", {"ids": [starting, started]}))["failAmount"] == 0
        assert (await t.stats())["phones"]["deleted"] == 3


async def test_status_answers_unknown_ids_in_fail_details() -> None:
    async with team() as t:
        [phone] = await t.create("a")
        data = await t.ok("phone/status", {"ids": [phone, "nope"]})
        assert data["totalAmount"] == 2 and data["successDetails"][0]["serialName"] == "a"
        assert data["failDetails"] == [{"code": 42001, "id": "nope", "msg": "env not found"}]
        assert await t.refused("phone/status", {"ids": [str(i) for i in range(101)]}) == 40004


async def test_the_coded_batch_envelope_says_40006_and_40009() -> None:
    async with team(batch_envelope="coded") as t:
        [phone] = await t.create("a")
        response = (await t.call("phone/status", {"ids": [phone, "x"]})).json()
        assert response["code"] == 40006 and response["data"]["failAmount"] == 1
        response = (await t.call("phone/status", {"ids": ["x", "y"]})).json()
        assert response["code"] == 40009 and response["data"]["failAmount"] == 2


async def test_list_pages_checks_page_size_and_carries_the_proxy_password() -> None:
    async with team() as t:
        ids = await t.create(*(f"p{i}" for i in range(5)))
        first = await t.ok("phone/list", {"page": 1, "pageSize": 2})
        third = await t.ok("phone/list", {"page": 3, "pageSize": 2})
        assert (first["total"], len(first["items"]), len(third["items"])) == (5, 2, 1)
        assert [i["id"] for i in first["items"]] == ids[:2] and third["items"][0]["id"] == ids[4]
        assert (await t.ok("phone/list", {"page": 4, "pageSize": 2}))["items"] == []
        for size in (0, 101):
            assert await t.refused("phone/list", {"page": 1, "pageSize": size}) == 40008
        assert await t.refused("phone/list", {"page": 0, "pageSize": 10}) == 40004
        item = first["items"][0]
        assert item["proxy"] == {
            "type": "socks5",
            "server": "100.200.200.100",
            "port": 30000,
            "username": "gl-user",
            "password": "gl-proxy-secret",
        }
        secrets = (await t.http.get("/_emulator/secrets")).json()["secrets"]
        assert secrets == ["gl-proxy-secret"]
        # ids override paging
        by_ids = await t.ok("phone/list", {"page": 9, "pageSize": 1, "ids": ids[1:3]})
        assert [i["id"] for i in by_ids["items"]] == ids[1:3]


async def test_groups_and_tags_are_labels_made_at_creation_and_filtered_on() -> None:
    async with team() as t:
        rows = [
            phone_row("a", profileTags=["pool=a", "slot=0"], profileGroup="g1"),
            phone_row("b", profileTags=["pool=b"], profileGroup="g2"),
        ]
        data = await t.ok("phone/addNew", {"mobileType": "Android 12", "data": rows})
        a, b = (d["id"] for d in data["details"])
        items = (await t.ok("phone/list", {"tags": ["pool=a"]}))["items"]
        assert [i["id"] for i in items] == [a]
        assert {tag["name"] for tag in items[0]["tags"]} == {"pool=a", "slot=0"}
        assert items[0]["group"]["name"] == "g1"
        assert [i["id"] for i in (await t.ok("phone/list", {"groupName": "g2"}))["items"]] == [b]
        # Update takes ids; an unknown tag id is answered and changes nothing.
        tag_b = (await t.ok("phone/list", {"ids": [b]}))["items"][0]["tags"][0]["id"]
        refused = await t.ok("phone/detail/update", {"id": a, "tagIDs": ["nope"]})
        assert refused["failDetails"][0]["code"] == 43022
        assert (
            await t.ok("phone/detail/update", {"id": a, "tagIDs": [tag_b], "remark": "r"}) is None
        )
        item = (await t.ok("phone/list", {"ids": [a]}))["items"][0]
        assert ([tag["name"] for tag in item["tags"]], item["remark"]) == (["pool=b"], "r")


async def test_create_checks_each_item() -> None:
    async with team() as t:
        rows = [phone_row("ok"), phone_row(""), phone_row("bad", proxyInformation="ftp://x")]
        data = await t.ok("phone/addNew", {"mobileType": "Android 12", "data": rows})
        assert [d["code"] for d in data["details"]] == [0, 40004, 45004]
        assert (data["successAmount"], data["failAmount"]) == (1, 2)
        assert await t.refused("phone/addNew", {"mobileType": "Android 8", "data": rows}) == 40004
        assert await t.refused("phone/addNew", {"mobileType": "Android 12", "data": []}) == 40004
        us = {"mobileType": "Android 12", "region": "us", "data": [phone_row()]}
        assert await t.refused("phone/addNew", us) == 40004
        assert (await t.stats())["phones"]["total"] == 1


async def test_stop_is_refused_while_a_task_runs_or_someone_is_connected() -> None:
    async with team(boot_seconds=0) as t:
        task, remote = await t.create("a", "b")
        await t.ok("phone/start", {"ids": [task, remote]})
        await t.http.post(f"/_emulator/phones/{task}/busy", json={"task": True})
        await t.http.post(f"/_emulator/phones/{remote}/busy", json={"remote": True})
        data = await t.ok("phone/stop", {"ids": [task, remote]})
        assert sorted(f["code"] for f in data["failDetails"]) == [43005, 43006]
        data = await t.ok("phone/delete", {"ids": [task]})
        assert data["failDetails"][0]["code"] == 43009
        assert await t.status(task, remote) == {task: 0, remote: 0}


async def test_energy_saving_stops_an_idle_phone_and_the_provider_can_stop_one() -> None:
    async with team(boot_seconds=60, idle_minutes=30) as t:
        saving, plain, other = await t.create("a", "b", "c")
        await t.ok("phone/start", {"ids": [saving], "energySavingMode": 1})
        await t.ok("phone/start", {"ids": [plain, other]})
        await t.advance(60 + 29 * 60)
        assert await t.status(saving, plain) == {saving: 0, plain: 0}
        await t.http.post(f"/_emulator/phones/{saving}/touch")  # someone used it
        await t.advance(29 * 60)
        assert await t.status(saving) == {saving: 0}
        await t.advance(61)
        assert await t.status(saving, plain) == {saving: 2, plain: 0}
        stopped = (await t.http.post(f"/_emulator/phones/{other}/stop")).json()
        assert (stopped["status"], stopped["stoppedBy"]) == (2, "provider")
        phones = (await t.stats())["phones"]
        assert (phones["autoStops"], phones["providerStops"], phones["running"]) == (1, 1, 1)


async def test_adb_is_switched_on_then_read_after_it_is_ready() -> None:
    async with team(boot_seconds=0, adb_ready_seconds=3) as t:
        on, off = await t.create("a", "b")
        await t.ok("phone/start", {"ids": [on]})
        set_ = await t.ok("adb/setStatus", {"ids": [on, off], "open": True})
        assert set_["failDetails"] == [{"code": 42002, "id": off, "msg": "env is not running"}]
        items = (await t.ok("adb/getData", {"ids": [on, off]}))["items"]
        assert [i["code"] for i in items] == [49001, 42002]
        await t.advance(3)
        [item] = (await t.ok("adb/getData", {"ids": [on]}))["items"]
        assert item["code"] == 0 and item["ip"] and item["port"] and item["pwd"]
        assert item["pwd"] in (await t.http.get("/_emulator/secrets")).json()["secrets"]
        await t.ok("phone/stop", {"ids": [on]})
        assert (await t.ok("adb/getData", {"ids": [on]}))["items"][0]["code"] == 42002


async def test_restart_and_new_identity() -> None:
    async with team(boot_seconds=5) as t:
        [phone] = await t.create("a")
        assert await t.refused("phone/restart", {"id": phone}) == 42002
        await t.ok("phone/start", {"ids": [phone]})
        await t.advance(5)
        await t.ok("phone/restart", {"id": phone})
        assert await t.status(phone) == {phone: 1}
        before = (await t.ok("phone/list", {"ids": [phone]}))["items"][0]["equipmentInfo"]
        await t.ok("/open/v2/phone/newOne", {"id": phone, "changeBrandModel": False})
        after = (await t.ok("phone/list", {"ids": [phone]}))["items"][0]["equipmentInfo"]
        assert after["imei"] != before["imei"]
        assert (await t.stats())["quotas"]["creates"] == 2  # newOne counts as a creation
        assert await t.refused("/open/v2/phone/newOne", {"id": "nope"}) == 42001


async def test_an_empty_ids_filter_lists_every_phone() -> None:
    async with team() as t:
        await t.create("a", "b")
        assert (await t.ok("phone/list", {"ids": []}))["total"] == 2
