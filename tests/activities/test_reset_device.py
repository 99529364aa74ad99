"""`reset_device` (`onRelease: reset`, docs/leases.md): a cloud phone's fresh start through the
provider seam (`/phone/profile/recover`), read `rebooting` (not `provisioning`: the health check
would take it for a failed start) until it runs again; past the month's quota, or where the
provider has no reset (the REST contract), the answer says so and the pool replaces."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import ActivityEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import (
    READY,
    REBOOTING,
    GetStatusesInput,
    ListDevicesInput,
    ResetDeviceInput,
    ResetOutcome,
    TerminateDeviceInput,
)
from devicepool.activities.providers.bitbrowser.phone_marks import Remark
from devicepool.activities.providers.rest import RestProvider
from tests.activities.conftest import bitbrowser_account
from tests.helpers.bitbrowser import Account
from tests.helpers.emulator import Emulator
from tests.helpers.phones import a_running_phone as running_phone
from tests.helpers.phones import phone_activities

BOOT = 60.0
# Virtual time moves as fast as real time: a boot ends only when told (`advance`).
account = bitbrowser_account(
    speed=1.0,
    seed=7,
    phone_boot_seconds=BOOT,
    phone_requests_per_second=1000,
    phone_recovers_per_month=2,
)


@pytest.fixture
async def phones(account: Account) -> AsyncIterator[DeviceActivities]:
    activities = phone_activities(account, interval=0.05)
    yield activities
    await activities.aclose()


async def a_running_phone(account: Account, acts: DeviceActivities) -> str:
    return await running_phone(account, acts, "pr", BOOT + 1)


async def status_of(acts: DeviceActivities, device: str) -> tuple[str, str | None]:
    listed = await ActivityEnvironment().run(
        acts.list_devices, ListDevicesInput(account="phones", pool="pr")
    )
    (info,) = [d for d in listed.devices if d.id == device]
    return info.status, info.reason


async def reset(acts: DeviceActivities, device: str) -> object:
    ask = ResetDeviceInput(account="phones", pool="pr", device_id=device)
    return await ActivityEnvironment().run(acts.reset_device, ask)


async def test_a_cloud_phone_is_fresh_started_reads_rebooting_then_quota_used(
    account: Account, phones: DeviceActivities
) -> None:
    device = await a_running_phone(account, phones)
    assert (await status_of(phones, device))[0] == READY
    with account.emulator.transaction(write=False):
        (phone,) = account.emulator.phones.phones.values()
        code_before = phone.adb_code

    answer = await reset(phones, device)
    assert answer.outcome == ResetOutcome.RESET  # type: ignore[attr-defined]
    stats = (await account.stats())["phones"]
    assert (stats["recovers"], stats["running"]) == (1, 0)
    with account.emulator.transaction(write=False):
        assert phone.adb_code != code_before  # a new device for its next holder
    # Booting again, long after its creation: rebooting, which no health check replaces.
    status, reason = await status_of(phones, device)
    assert status == REBOOTING and reason and "reset" in reason
    statuses = await ActivityEnvironment().run(
        phones.get_statuses, GetStatusesInput(account="phones", ids=[device], pool="pr")
    )
    assert [s.status for s in statuses.items] == [REBOOTING]
    # A retry of the same reset moments later asks nothing again... once booting was seen,
    # a new reset is a new one.
    await account.advance(BOOT + 1)
    assert (await status_of(phones, device))[0] == READY

    assert (await reset(phones, device)).outcome == ResetOutcome.RESET  # type: ignore[attr-defined]
    await status_of(phones, device)
    await account.advance(BOOT + 1)
    assert (await status_of(phones, device))[0] == READY
    # The month's two fresh starts are used: said, nothing done, and no error raised.
    third = await reset(phones, device)
    assert third.outcome == ResetOutcome.QUOTA_USED  # type: ignore[attr-defined]
    assert "次数已用完" in third.message  # type: ignore[attr-defined]
    stats = (await account.stats())["phones"]
    assert (stats["recovers"], stats["running"]) == (2, 1)


async def test_a_retried_reset_asks_the_provider_once(
    account: Account, phones: DeviceActivities
) -> None:
    """An attempt whose answer was lost is retried: the phone listed running still (the
    vendor's calls are asynchronous) is not fresh-started twice (one of 60 a month)."""
    device = await a_running_phone(account, phones)
    await reset(phones, device)
    assert (await reset(phones, device)).outcome == ResetOutcome.RESET  # type: ignore[attr-defined]
    assert (await account.stats())["phones"]["recovers"] == 1


async def test_a_phone_no_longer_served_is_gone(phones: DeviceActivities) -> None:
    answer = await reset(phones, "0123456789abcdef0123456789abcdef.1")
    assert answer.outcome == ResetOutcome.GONE  # type: ignore[attr-defined]


async def test_the_rest_contract_has_no_reset(emulator: Emulator) -> None:
    provider = RestProvider(emulator.client())
    try:
        assert await provider.reset_device("any-device") is False
    finally:
        await provider.aclose()


async def test_a_phone_replaced_after_use_is_fresh_started_before_reuse_or_retired(
    account: Account, phones: DeviceActivities
) -> None:
    """`onRelease: replace` (or a reset not possible): the removal of a used phone resets it
    before its profile waits in reserve for a later create, or retires it when the month's
    fresh starts are used: a later holder never gets the used phone as it was."""
    device = await a_running_phone(account, phones)
    gone = TerminateDeviceInput(account="phones", device_id=device, pool="pr", used=True)
    await ActivityEnvironment().run(phones.terminate_device, gone)
    stats = (await account.stats())["phones"]
    assert (stats["recovers"], stats["running"]) == (1, 0)
    assert _remark_state(account) == "reserve"
    # Claimed again by a create, used, and its last fresh start of the month spent.
    again = await a_running_phone(account, phones)
    assert again.split(".")[0] == device.split(".")[0]
    await reset(phones, again)
    await account.advance(BOOT + 1)
    await status_of(phones, again)
    gone = TerminateDeviceInput(account="phones", device_id=again, pool="pr", used=True)
    await ActivityEnvironment().run(phones.terminate_device, gone)
    assert (await account.stats())["phones"]["recovers"] == 2
    assert _remark_state(account) == "retired"


def _remark_state(account: Account) -> str:
    with account.emulator.transaction(write=False):
        (phone,) = account.emulator.phones.phones.values()
        remark = Remark.parse(phone.fields["remark"])
    return remark.state if remark else ""
