"""`/phone/profile/recover` in the BitBrowser emulator, where the vendor is silent
(docs/bitbrowser-emulator.md): a powered phone restarts (not running, then running again)
with a new adb password; past the month's quota the refusal is the envelope's, HTTP 200."""

from __future__ import annotations

from devicepool.emulator.bitbrowser.cli import build_parser, config_from_args
from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import phone_body, refusal_of

BOOT = 60


def test_the_quota_is_a_flag() -> None:
    args = build_parser().parse_args(["--phone-recovers-per-month=3"])
    assert config_from_args(args).phone_recovers_per_month == 3
    assert config_from_args(build_parser().parse_args([])).phone_recovers_per_month == 60


async def test_a_running_phone_restarts_fresh_and_the_quota_refuses_in_the_envelope(
    make_account: MakeAccount,
) -> None:
    account = await make_account(phone_requests_per_second=100, phone_recovers_per_month=1)
    phone = await account.ok("/phone/profile/add", phone_body())
    ident = {"id": phone["id"]}
    await account.ok("/phone/openphone", ident)
    await account.advance(BOOT + 1)
    assert await account.ok("/phone/running", ident) is True
    listed = await account.ok("/phone/list", {"page": 0})
    adb_before = listed["list"][0]["adb"]

    await account.ok("/phone/profile/recover", ident)
    assert await account.ok("/phone/running", ident) is False  # rebooting
    assert (await account.ok("/phone/list", {"page": 0}))["list"][0]["status"] == 1
    await account.advance(BOOT + 1)
    assert await account.ok("/phone/running", ident) is True
    after = (await account.ok("/phone/list", {"page": 0}))["list"][0]
    assert after["adb"] and after["adb"] != adb_before  # a new password

    refused = await account.call("/phone/profile/recover", ident)
    assert "次数已用完" in refusal_of(refused, 200)
    assert await account.ok("/phone/running", ident) is True  # nothing done
    assert (await account.stats())["phones"]["recovers"] == 1
