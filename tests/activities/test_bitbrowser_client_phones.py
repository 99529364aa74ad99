"""Contract tests: the Local API client's cloud-phone family against the BitBrowser emulator.

The emulator runs 5 times faster than real time, so its budget of 1 request per
(virtual) second is one per 0.2 s of real time; the clients under test pace at
0.25 s. Power-on times are skipped with the emulator's clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from devicepool.activities.errors import QuotaExceededError, TransportTimeoutError
from devicepool.activities.providers.bitbrowser import (
    ComputeType,
    LocalApiInvalidError,
    LocalApiNotFoundError,
    LocalApiQuotaError,
    LocalApiRateLimitedError,
    LocalApiStateError,
    LocalApiUnsupportedError,
    Phone,
    PhonePacer,
    PhoneProxy,
    PhoneStatus,
    Refusal,
)
from devicepool.api.errors import ErrorType
from devicepool.emulator.bitbrowser import BitBrowserConfig
from tests.activities.conftest import bitbrowser_account
from tests.helpers.bitbrowser import CJK, KEY, Account
from tests.helpers.bitbrowser_client import Node, node

SPEED = 20.0
PACE = 0.0625  # real seconds from a phone call's answer to the next call: 1.25 virtual seconds
REGION = "d69bcf13db844d1cb81e779f64161223"
PROXY = PhoneProxy(host="1.2.3.4", port=45001, username="phone-user", password="phone-pass-Lx9")


account = bitbrowser_account(
    nodes=["node-1", "node-2"], speed=SPEED, seed=11, phone_recovers_per_month=2
)


@pytest.fixture
async def n1(account: Account) -> AsyncIterator[Node]:
    client = node(account, "node-1", pacer=PhonePacer(interval=PACE))
    yield client
    await client.aclose()


async def _add(n: Node, mark: str, **kwargs: Any) -> str:
    return await n.phones.add(
        mark=mark, region_id=REGION, compute_type=ComputeType.TEMPORARY, proxy=PROXY, **kwargs
    )


async def test_an_added_phone_is_found_by_its_exact_name(account: Account, n1: Node) -> None:
    first = await _add(n1, "pp/1")
    await _add(n1, "pp/10")
    (phone,) = await n1.phones.find_by_mark("pp/1")  # the name filter is fuzzy: pp/10 too
    assert (phone.id, phone.name, phone.remark, phone.region_id) == (
        first,
        "pp/1",
        "pp/1",
        REGION,
    )
    assert phone.compute_type == ComputeType.TEMPORARY and phone.status == PhoneStatus.OFF
    assert (await account.stats())["phones"]["created"] == 2


async def test_a_mark_longer_than_a_phone_name_is_refused_before_any_call(n1: Node) -> None:
    with pytest.raises(ValueError, match="30"):
        await _add(n1, "p" * 31)
    assert n1.recorder.calls == []


async def test_a_lost_add_raises_a_retryable_timeout(account: Account) -> None:
    client = node(account, timeout=0.3, pacer=PhonePacer(interval=PACE))
    try:
        await account.faults(timeoutRate=1.0, timeoutSeconds=30)
        with pytest.raises(TransportTimeoutError) as caught:
            await _add(client, "pp/t")
    finally:
        await client.aclose()
    assert caught.value.retryable and caught.value.error_type is ErrorType.TIMEOUT


async def test_update_is_partial_and_the_region_cannot_change(n1: Node) -> None:
    phone_id = await _add(n1, "pp/u")
    await n1.phones.update(phone_id, {"remark": "note"})
    (phone,) = await n1.phones.find_by_mark("pp/u")
    assert (phone.remark, phone.host, phone.port) == ("note", PROXY.host, PROXY.port)
    with pytest.raises(LocalApiInvalidError) as caught:
        await n1.phones.update(phone_id, {"regionId": "another-region"})
    assert CJK.search(caught.value.raw_msg) and not caught.value.retryable
    with pytest.raises(LocalApiNotFoundError):
        await n1.phones.update("0" * 32, {"remark": "x"})


async def test_power_on_is_asynchronous_and_billing_follows_power(
    account: Account, n1: Node
) -> None:
    phone_id = await _add(n1, "pp/p")
    assert await n1.phones.running(phone_id) is False
    await n1.phones.open(phone_id)
    assert await n1.phones.running(phone_id) is False  # booting: about a minute
    await account.advance(61)
    assert await n1.phones.running(phone_id) is True
    (phone,) = await n1.phones.find_by_mark("pp/p")
    assert phone.status == PhoneStatus.RUNNING
    assert phone.adb is not None and phone.adb.ip and phone.adb.port

    await n1.phones.suspend(phone_id)
    assert await n1.phones.running(phone_id) is False
    await n1.phones.open(phone_id)
    await account.advance(6)  # from suspended: about 5 s
    assert await n1.phones.running(phone_id) is True
    await n1.phones.restart(phone_id)
    await n1.phones.shutdown(phone_id)
    assert await n1.phones.running(phone_id) is False
    phones = (await account.stats())["phones"]
    assert (phones["running"], phones["powerOns"], phones["shutdowns"]) == (0, 2, 1)

    with pytest.raises(LocalApiStateError) as off:
        await n1.phones.suspend(phone_id)
    assert off.value.refusal is Refusal.STATE and off.value.error_type is ErrorType.INVALID_STATE


async def test_recover_has_a_monthly_quota(account: Account, n1: Node) -> None:
    phone_id = await _add(n1, "pp/r")
    await n1.phones.recover(phone_id)
    await n1.phones.recover(phone_id)  # the account allows 2 here
    with pytest.raises(LocalApiQuotaError) as caught:
        await n1.phones.recover(phone_id)
    assert isinstance(caught.value, QuotaExceededError) and not caught.value.retryable
    assert (await account.stats())["phones"]["recovers"] == 2


async def test_there_is_no_delete(n1: Node) -> None:
    phone_id = await _add(n1, "pp/d")
    with pytest.raises(LocalApiUnsupportedError):
        await n1.api.call("/phone/profile/delete", {"id": phone_id})
    assert not hasattr(n1.phones, "delete")


async def test_listing_pages_and_filters(account: Account) -> None:
    # Phones made straight at the emulator (faster than through the budget).
    await account.faults(phoneRequestsPerSecond=1000)
    for i in range(105):
        await account.ok(
            "/phone/profile/add",
            {
                "regionId": REGION,
                "computeType": 1,
                "name": f"pl/{i:03d}",
                "remark": "",
                "host": "9.9.9.9" if i % 2 else "8.8.8.8",
                "port": 1,
                "proxyUserName": "u",
                "proxyPassword": "list-pass-Hq4",
                "ipCheckService": "ip123in",
                "udp": 1,
                "cloudPhonesFingerPrint": {},
            },
        )
    client = node(account, pacer=PhonePacer(interval=0.01))
    try:
        everything = await client.phones.list_all(mark_prefix="pl/")
        by_host = await client.phones.list_all(host="9.9.9.9")
        page = await client.phones.list_page(1, page_size=100)
    finally:
        await client.aclose()
    assert len({p.id for p in everything}) == 105
    assert len(by_host) == 52 and {p.host for p in by_host} == {"9.9.9.9"}
    assert len(page.items) == 5 and page.total == 105
    sizes = [(b["page"], b["pageSize"]) for b in client.recorder.bodies("/phone/list")]
    assert sizes[:2] == [(0, 100), (1, 100)]


async def test_no_secret_reaches_a_returned_phone(account: Account, n1: Node) -> None:
    phone_id = await _add(n1, "pp/s")
    await n1.phones.open(phone_id)
    await account.advance(61)
    secrets = (await account.http["node-1"].get("/_emulator/secrets")).json()["secrets"]
    assert PROXY.password.get_secret_value() in secrets
    assert len(secrets) >= 2  # the proxy password and, while running, the adb password
    returned: list[Phone] = [
        *(await n1.phones.find_by_mark("pp/s")),
        *(await n1.phones.list_page(0)).items,
    ]
    for phone in returned:
        assert phone.adb is not None  # running: adb is on, without its password
        shown = " ".join((phone.model_dump_json(), repr(phone), str(phone.model_extra)))
        for secret in secrets:
            assert secret not in shown
        assert not phone.model_extra and not phone.adb.model_extra


# ------------------------------------------------------------ the budget


async def test_the_pacer_keeps_every_node_of_the_account_under_one_call_a_second(
    account: Account,
) -> None:
    shared = PhonePacer(interval=PACE)
    clients = [node(account, name, pacer=shared) for name in ("node-1", "node-2")]
    try:
        phone_id = await _add(clients[0], "pp/rate")
        # Twelve status reads at once from two nodes, each through the shared pacer.
        reads = [c.phones.running(phone_id) for c in clients for _ in range(6)]
        assert await asyncio.gather(*reads) == [False] * 12
    finally:
        for c in clients:
            await c.aclose()
    phones = (await account.stats())["phones"]
    assert phones["rateLimited"] == 0
    assert phones["maxRequestsPerSecond"] == 1
    assert phones["requests"] == 13 and shared.calls == 13


@pytest.mark.parametrize("mode", ["refuse", "http429"])
async def test_without_pacing_the_budget_refuses_and_the_pacer_is_held(mode: str) -> None:
    # The same burst with no real pacing: refused (in the envelope, or as an HTTP 429),
    # typed, with a retry delay that holds the pacer.
    # At speed 1 the budget's window is a real second: six quick calls all fall in it.
    account = Account(BitBrowserConfig(api_key=KEY, speed=1, phone_rate_mode=mode))
    pacer = PhonePacer(interval=0.001)
    client = node(account, pacer=pacer)
    try:
        phone_id = await _add(client, "pp/fast")
        results = await asyncio.gather(
            *(client.phones.running(phone_id) for _ in range(5)), return_exceptions=True
        )
        phones = (await account.stats())["phones"]
    finally:
        await client.aclose()
        await account.aclose()
    refused = [r for r in results if isinstance(r, Exception)]
    assert refused and all(isinstance(r, LocalApiRateLimitedError) for r in refused)
    first = refused[0]
    assert isinstance(first, LocalApiRateLimitedError)
    assert first.retryable and first.retry_after == 1.0 and CJK.search(first.raw_msg)
    assert first.status == (429 if mode == "http429" else 200)
    assert phones["rateLimited"] == len(refused) and phones["maxRequestsPerSecond"] > 1
