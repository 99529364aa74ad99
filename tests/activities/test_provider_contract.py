"""The real `BitCloudPhoneClient` against the real emulator app (DESIGN.md's provider contract)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationErrorCategory

from devicepool.activities import errors
from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.api.errors import ErrorType
from devicepool.api.v1beta1 import Platform
from tests.helpers.emulator import DEV_KEY, Emulator, running_emulator

PROXY = {"type": "socks5", "host": "gw.example", "port": 1080, "username": "u-1", "password": "pw"}


async def _create(
    client: BitCloudPhoneClient,
    key: str,
    *,
    pool: str = "p1",
    platform: Platform = Platform.ANDROID,
    region: str = "us-west",
    proxy: dict[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    return await client.create_device(
        platform,
        region=region,
        os_version="14",
        name=name or f"{pool}-{key}",
        labels={"pool": pool, "managed-by": "devicepool"},
        proxy=proxy,
        idempotency_key=key,
    )


# ------------------------------------------------------------------ endpoints and lifecycle


async def test_create_then_provisioning_becomes_ready(
    emulator: Emulator, client: BitCloudPhoneClient
) -> None:
    device = await _create(client, "k1", platform=Platform.IOS, proxy=PROXY)
    assert device["status"] == "provisioning"
    assert device["platform"] == "ios"
    assert device["labels"] == {"pool": "p1", "managed-by": "devicepool"}
    assert "password" not in (device.get("proxy") or {})

    status = await client.get_status(device["id"])
    assert status["id"] == device["id"]
    assert status["status"] == "provisioning"
    assert set(status) >= {"id", "status", "reason", "sessionActive", "lastActivityAt", "updatedAt"}

    await emulator.advance(31)
    assert (await client.get_device(device["id"]))["status"] == "ready"
    assert (await client.get_status(device["id"]))["status"] == "ready"

    await emulator.session(device["id"], active=True)
    status = await client.get_status(device["id"])
    assert (status["status"], status["sessionActive"]) == ("busy", True)


async def test_delete_terminates_and_is_idempotent(
    emulator: Emulator, client: BitCloudPhoneClient
) -> None:
    device = await _create(client, "k1")
    gone = await client.delete_device(device["id"])
    assert gone["status"] == "terminating"
    again = await client.delete_device(device["id"])
    assert again["status"] == "terminating"
    await emulator.advance(6)
    assert (await client.get_status(device["id"]))["status"] == "terminated"
    assert (await client.delete_device(device["id"]))["status"] == "terminated"
    stats = await emulator.stats()
    assert stats["devices"]["live"] == 0
    assert stats["terminations"] == 1


async def test_list_filters_by_label_and_status(
    emulator: Emulator, client: BitCloudPhoneClient
) -> None:
    a = await _create(client, "a", pool="p1")
    await emulator.advance(31)
    b = await _create(client, "b", pool="p1")
    await _create(client, "c", pool="p2")

    in_p1 = await client.list_devices(labels={"pool": "p1"})
    assert {d["id"] for d in in_p1} == {a["id"], b["id"]}
    ready = await client.list_devices(labels={"pool": "p1"}, statuses=["ready"])
    assert [d["id"] for d in ready] == [a["id"]]
    either = await client.list_devices(labels={"pool": "p1"}, statuses=["ready", "provisioning"])
    assert len(either) == 2
    both_labels = await client.list_devices(labels={"pool": "p2", "managed-by": "devicepool"})
    assert len(both_labels) == 1
    assert await client.list_devices(labels={"pool": "nobody"}) == []


async def test_list_follows_pagination(emulator: Emulator, client: BitCloudPhoneClient) -> None:
    created = [await _create(client, f"k{i}") for i in range(7)]
    devices = await client.list_devices(labels={"pool": "p1"}, page_size=3)
    assert sorted(d["id"] for d in devices) == sorted(d["id"] for d in created)
    assert len(devices) == 7  # no duplicates across page boundaries
    # The default page size (100) also sees them all in one page.
    assert len(await client.list_devices(labels={"pool": "p1"})) == 7


async def test_batch_status_splits_found_and_missing(client: BitCloudPhoneClient) -> None:
    device = await _create(client, "k1")
    items, not_found = await client.batch_status([device["id"], "dev-missing"])
    assert [i["id"] for i in items] == [device["id"]]
    assert items[0]["status"] == "provisioning"
    assert not_found == ["dev-missing"]
    with pytest.raises(ValueError, match="at most 100"):
        await client.batch_status([f"dev-{i}" for i in range(101)])


async def test_accounts_do_not_see_each_others_devices(emulator: Emulator) -> None:
    async with emulator.client() as mine, emulator.client("other-account-key") as theirs:
        device = await _create(mine, "k1")
        with pytest.raises(errors.NotFoundError):
            await theirs.get_device(device["id"])
        assert await theirs.list_devices(labels={"pool": "p1"}) == []


async def test_regions(emulator: Emulator, client: BitCloudPhoneClient) -> None:
    regions = await client.regions()
    assert {"name": "us-west", "status": "up"} in regions
    await emulator.region("us-west", "degraded")
    assert {"name": "us-west", "status": "degraded"} in await client.regions()


# ------------------------------------------------------------------ idempotency


async def test_replayed_create_returns_the_same_device(
    emulator: Emulator, client: BitCloudPhoneClient
) -> None:
    first = await _create(client, "same-key", proxy=PROXY)
    again = await _create(client, "same-key", proxy=PROXY)
    assert again["id"] == first["id"]
    stats = await emulator.stats()
    assert stats["creates"]["accepted"] == 1
    assert stats["creates"]["idempotentReplays"] == 1
    assert stats["devices"]["live"] == 1


async def test_same_key_with_another_body_is_refused(client: BitCloudPhoneClient) -> None:
    await _create(client, "same-key", proxy=PROXY)
    other_proxy = {**PROXY, "username": "u-2"}
    with pytest.raises(errors.IdempotencyKeyReusedError) as info:
        await _create(client, "same-key", proxy=other_proxy)
    assert info.value.status == 422
    failure = errors.to_application_error(info.value)
    assert failure.type == ErrorType.IDEMPOTENCY_KEY_REUSED.value
    assert failure.non_retryable


# ------------------------------------------------------------------ errors through the client


async def test_rate_limit_carries_retry_after_into_the_failure(emulator: Emulator) -> None:
    async with running_emulator(creates_per_minute=3) as emu, emu.client() as client:
        for i in range(3):
            await _create(client, f"k{i}")
        with pytest.raises(errors.RateLimitedError) as info:
            await _create(client, "k3")
        assert info.value.status == 429
        assert info.value.retry_after is not None
        assert 0 < info.value.retry_after <= 60
        failure = errors.to_application_error(info.value)
        assert failure.type == ErrorType.RATE_LIMITED.value
        assert not failure.non_retryable
        assert failure.next_retry_delay == timedelta(seconds=info.value.retry_after)
        assert failure.category is ApplicationErrorCategory.BENIGN
        assert (await emu.stats())["creates"]["rateLimited"] == 1

        # The window is per account and slides: after a minute the next create is accepted.
        await emu.advance(61)
        assert (await _create(client, "k3"))["status"] == "provisioning"


async def test_a_wrong_key_is_unauthenticated(emulator: Emulator) -> None:
    async with emulator.client("not-a-key") as client:
        with pytest.raises(errors.UnauthenticatedError) as info:
            await client.regions()
    assert info.value.status == 401
    assert errors.to_application_error(info.value).non_retryable


async def test_unknown_device_is_not_found(client: BitCloudPhoneClient) -> None:
    for call in (client.get_device, client.get_status, client.delete_device):
        with pytest.raises(errors.NotFoundError) as info:
            await call("dev-0000")
        assert info.value.status == 404


async def test_bad_arguments_are_invalid_argument(client: BitCloudPhoneClient) -> None:
    with pytest.raises(errors.InvalidArgumentError) as info:
        await _create(client, "k1", region="")
    assert info.value.status == 400
    with pytest.raises(errors.InvalidArgumentError):
        await client.list_devices(labels={"pool": "p1"}, page_size=1000)
    with pytest.raises(errors.InvalidArgumentError):
        await client.list_devices(labels={"pool": "p1"}, statuses=["sleeping"])


async def test_quota_exceeded() -> None:
    async with running_emulator(max_devices_per_account=1) as emu, emu.client() as client:
        await _create(client, "k1")
        with pytest.raises(errors.QuotaExceededError) as info:
            await _create(client, "k2")
    assert info.value.status == 402
    assert errors.to_application_error(info.value).non_retryable


async def test_invalid_state(client: BitCloudPhoneClient) -> None:
    # Only reboot answers 409, and devicepool never reboots ("replace, do not repair"),
    # so the client has no method for it: reach it through the client's request plumbing.
    device = await _create(client, "k1")
    with pytest.raises(errors.InvalidStateError) as info:
        await client._request("POST", f"/api/v1/devices/{device['id']}/reboot")
    assert info.value.status == 409
    assert errors.to_application_error(info.value).non_retryable


async def test_region_down_is_region_unavailable(
    emulator: Emulator, client: BitCloudPhoneClient
) -> None:
    await emulator.region("eu-west", "down")
    with pytest.raises(errors.RegionUnavailableError) as info:
        await _create(client, "k1", region="eu-west")
    assert info.value.status == 503
    assert isinstance(info.value, errors.ServerError)
    failure = errors.to_application_error(info.value)
    assert failure.type == ErrorType.REGION_UNAVAILABLE.value
    assert not failure.non_retryable


async def test_server_errors_are_retryable(emulator: Emulator, client: BitCloudPhoneClient) -> None:
    await emulator.faults(serverErrorRate=1.0)
    with pytest.raises(errors.ServerError) as info:
        await client.list_devices(labels={"pool": "p1"})
    assert info.value.status == 500
    assert not errors.to_application_error(info.value).non_retryable
    await emulator.faults()
    assert await client.list_devices(labels={"pool": "p1"}) == []


async def test_injected_rate_limit_fault_has_retry_after(
    emulator: Emulator, client: BitCloudPhoneClient
) -> None:
    await emulator.faults(rateLimitRate=1.0)
    with pytest.raises(errors.RateLimitedError) as info:
        await client.regions()
    assert info.value.retry_after == 1.0


async def test_unknown_platform_is_refused_by_the_client(client: BitCloudPhoneClient) -> None:
    with pytest.raises(ValueError):
        await _create(client, "k1", platform="windows")  # type: ignore[arg-type]


# ------------------------------------------------------------------ redaction


async def test_the_key_never_shows(
    emulator: Emulator, client: BitCloudPhoneClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert DEV_KEY not in repr(client)
    assert DEV_KEY not in str(client)
    await _create(client, "k1")
    await client.list_devices(labels={"pool": "p1"})
    with pytest.raises(errors.NotFoundError) as info:
        await client.get_device("dev-missing")
    assert DEV_KEY not in str(info.value)
    assert DEV_KEY not in repr(info.value)
    async with emulator.client("wrong-" + DEV_KEY) as wrong:
        with pytest.raises(errors.UnauthenticatedError) as unauth:
            await wrong.regions()
        assert DEV_KEY not in repr(wrong)
    assert DEV_KEY not in str(unauth.value)
    assert DEV_KEY not in str(errors.to_application_error(unauth.value))
    assert DEV_KEY not in caplog.text
