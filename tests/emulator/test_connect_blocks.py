"""What both emulators answer of a device's connect info: the REST detail's `connect` block
(once the device is up, never in a listing) and the Local API's `/phone/list` `adb` string,
switched by `POST /_emulator/adb` (on by default)."""

from __future__ import annotations

import json

from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import phone_body
from tests.helpers.emulator import Provider


async def test_the_rest_detail_has_a_connect_block_once_the_device_is_up(
    provider: Provider,
) -> None:
    made = await provider.create_ok()
    detail = (await provider.get(f"/api/v1/devices/{made['id']}")).json()
    assert detail["status"] == "provisioning" and "connect" not in detail
    await provider.advance(60)
    detail = (await provider.get(f"/api/v1/devices/{made['id']}")).json()
    adb = detail["connect"]["adb"]
    assert set(adb) == {"ip", "port", "code"} and 1 <= adb["port"] <= 65535 and adb["code"]
    # The same login every time (a state file's restart keeps it: it is the id's).
    again = (await provider.get(f"/api/v1/devices/{made['id']}")).json()["connect"]
    assert again == detail["connect"]
    # Never in a listing, nor in the status answer.
    listed = (await provider.get("/api/v1/devices", label="pool=tiktok-us-pool")).json()
    assert listed["items"] and all("connect" not in d for d in listed["items"])
    assert adb["code"] not in json.dumps(listed)
    status = (await provider.get(f"/api/v1/devices/{made['id']}/status")).json()
    assert "connect" not in status


async def test_the_adb_switch_turns_the_phone_listing_login_off_and_on(
    make_account: MakeAccount,
) -> None:
    account = await make_account(phone_requests_per_second=1000)

    async def switch() -> object:
        return (await account.http["node-1"].get("/_emulator/adb")).json()

    assert await switch() == {"enabled": True}
    phone = await account.ok("/phone/profile/add", phone_body())
    await account.ok("/phone/openphone", {"id": phone["id"]})
    await account.advance(60)

    async def listed_adb() -> str:
        item = (await account.ok("/phone/list", {"page": 0}))["list"][0]
        assert item["status"] == 2
        return str(item["adb"])

    login = json.loads(await listed_adb())
    assert set(login) == {"code", "port", "ip"}
    assert await account.control("adb", {"enabled": False}) == {"enabled": False}
    assert await listed_adb() == ""
    assert await switch() == {"enabled": False}
    await account.control("adb", {"enabled": True})
    assert json.loads(await listed_adb()) == login
    refused = await account.http["node-1"].post("/_emulator/adb", json={"enabled": "no"})
    assert refused.status_code == 400
