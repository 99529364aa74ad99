"""Connect info of a leased device (docs/leases.md, "Connect info"): the ADB string parsed
from what a provider answers, kept out of every `repr`, log line and error; read through the
seam from the REST contract's detail, a cloud phone's `/phone/list` and a profile's
`/browser/open`; refused by a worker that writes history in clear."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import pydantic
import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devicepool.activities.connect_models import (
    AdbLogin,
    CdpEndpoint,
    ConnectInfo,
    LeaseConnectInput,
    NodeConnectInput,
    parse_adb,
)
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import (
    AccountSettings,
    PoolSettings,
)
from devicepool.activities.node_browsers import NodeBrowserActivities
from devicepool.activities.node_models import NodeCreateInput, NodeOpenInput
from devicepool.activities.providers.bitbrowser import BrowserProfiles, LocalApi
from devicepool.activities.providers.bitbrowser.profile_provider import BitBrowserProfiles
from devicepool.activities.providers.rest import RestProvider
from devicepool.api.errors import ErrorType
from tests.activities.conftest import bitbrowser_account
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.emulator import Emulator
from tests.helpers.phones import a_running_phone, phone_activities

# The vendor's example (bitbrowser-local-api-cloud-phones.md, `/phone/list`).
VENDOR = '{"code":"SAjp7zSIJfHGAZi9Ot","port":21136,"ip":"124.236.71.153"}'
ENCRYPTED = PoolSettings(history_encrypted=True)

account = bitbrowser_account(speed=20.0, seed=5, phone_boot_seconds=2.0)


# ------------------------------------------------------------------ pure


def test_the_vendors_adb_string_is_read_whole() -> None:
    login = parse_adb(VENDOR)
    assert login == AdbLogin(ip="124.236.71.153", port=21136, code="SAjp7zSIJfHGAZi9Ot")
    assert parse_adb(json.loads(VENDOR)) == login  # a mapping (the REST block) too
    assert parse_adb({"ip": "10.0.0.1", "port": "5555"}) == AdbLogin(ip="10.0.0.1", port=5555)
    assert parse_adb({"ip": "10.0.0.1", "port": 5555.0, "code": 1234}).code == "1234"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "hostile",
    [
        "",
        "  ",
        "not json",
        "[1, 2]",
        None,
        42,
        {"ip": "1.2.3.4"},
        {"ip": "", "port": 1},
        {"ip": "1.2.3.4", "port": 0},
        {"ip": "1.2.3.4", "port": -1},
        {"ip": "1.2.3.4", "port": 65536},
        {"ip": "1.2.3.4", "port": 1e20},
        {"ip": "1.2.3.4", "port": float("nan")},
        {"ip": "1.2.3.4", "port": float("inf")},
        {"ip": "1.2.3.4", "port": True},
        {"ip": "1.2.3.4", "port": "²"},
        {"ip": 7, "port": 1},
        {"ip": "1.2.3.4", "port": 1, "code": ["x"]},
        {"ip": "1.2.3.4" * 1000, "port": 1},
        "x" * 100_000,
        "[" * 5000,  # nested past Python's recursion limit (the review's RecursionError)
    ],
)
def test_anything_else_is_no_login_and_no_error(hostile: object) -> None:
    assert parse_adb(hostile) is None


def test_the_code_and_the_websocket_never_show_in_repr_str_or_errors() -> None:
    info = ConnectInfo(adb=parse_adb(VENDOR))
    cdp = ConnectInfo(cdp=CdpEndpoint(ws="ws://127.0.0.1:9222/devtools/browser/k3y", http="h:1"))
    for shown in (repr(info), str(info), repr(info.adb), repr(cdp), str(cdp), f"{cdp}"):
        assert "SAjp7zSIJfHGAZi9Ot" not in shown and "k3y" not in shown
    assert "124.236.71.153" in repr(info)  # where, not how
    with pytest.raises(pydantic.ValidationError) as refused:
        AdbLogin(ip="1.2.3.4", port=70000, code="hunter2-secret")
    assert "hunter2-secret" not in str(refused.value)
    # The holder's answer has it all (camelCase JSON, what the update sends).
    sent = json.loads(info.model_dump_json())
    assert sent == {"adb": json.loads(VENDOR), "cdp": None, "message": ""}


# ------------------------------------------------------------------ REST contract


@pytest.fixture
async def rest(emulator: Emulator) -> AsyncIterator[RestProvider]:
    provider = RestProvider(emulator.client())
    yield provider
    await provider.aclose()


async def test_rest_reads_the_detail_connect_block_once_up(
    emulator: Emulator, rest: RestProvider
) -> None:
    made = await rest.client.create_device(
        "android", region="us-west", os_version="14", name="p", labels={"pool": "p"}, proxy=None,
        idempotency_key="k-1",
    )  # fmt: skip
    early = await rest.connect_info(made["id"])
    assert early.empty() and "offers no connect info" in early.message
    await emulator.advance(60)
    up = await rest.connect_info(made["id"])
    assert up.adb is not None and up.adb.ip and up.adb.code and up.cdp is None


# ------------------------------------------------------------------ cloud phones


@pytest.fixture
async def phones(account: Account) -> AsyncIterator[DeviceActivities]:
    activities = phone_activities(account, interval=0.05, settings=ENCRYPTED)
    yield activities
    await activities.aclose()


async def test_a_cloud_phones_login_comes_from_its_listing_and_is_never_logged(
    account: Account, phones: DeviceActivities, caplog: pytest.LogCaptureFixture
) -> None:
    device = await a_running_phone(account, phones, "pc", 5)
    ask = LeaseConnectInput(account="phones", pool="pc", device=device)
    caplog.set_level(logging.DEBUG)
    info = await ActivityEnvironment().run(phones.lease_connect, ask)
    with account.emulator.transaction(write=False):
        (phone,) = account.emulator.phones.phones.values()
        code = phone.adb_code
    assert info.adb is not None and info.adb.code == code and info.adb.port
    assert code not in caplog.text
    # ADB off for the environment: no login, and why.
    await account.control("adb", {"enabled": False})
    off = await ActivityEnvironment().run(phones.lease_connect, ask)
    assert off.empty() and "ADB enabled" in off.message


async def test_a_worker_writing_history_in_clear_refuses_connect_info(account: Account) -> None:
    clear = DeviceActivities(
        accounts={"phones": AccountSettings(name="phones", api="bitbrowser", base_url="http://node-1.local", api_key=SecretStr(KEY))},
        proxy_pools={},
        transport=account.transports["node-1"],
    )  # fmt: skip
    try:
        with pytest.raises(ApplicationError) as refused:
            await ActivityEnvironment().run(
                clear.lease_connect, LeaseConnectInput(account="phones", pool="pc", device="x")
            )
    finally:
        await clear.aclose()
    assert refused.value.type == ErrorType.INVALID_STATE.value and refused.value.non_retryable
    assert "devicepool connect POOL LEASE" in refused.value.message
    assert (await account.stats())["phones"]["requests"] == 0  # the provider was not asked


# ------------------------------------------------------------------ browser profiles


def node_activities(account: Account, *, encrypted: bool) -> NodeBrowserActivities:
    api = LocalApi(
        base_url="http://node-1.local", api_key=account.key, transport=account.transports["node-1"]
    )
    provider = BitBrowserProfiles(BrowserProfiles(api, settle_seconds=0.0))
    return NodeBrowserActivities(provider, node="node-1", history_encrypted=encrypted)  # fmt: skip


async def test_a_profiles_cdp_endpoint_is_its_open_browsers(account: Account) -> None:
    node = node_activities(account, encrypted=True)
    env = ActivityEnvironment()
    try:
        made = await env.run(node.node_create_profile, NodeCreateInput(pool="bp", slot="0"))
        other = await env.run(node.node_create_profile, NodeCreateInput(pool="bp", slot="1"))
        await env.run(node.node_open_profile, NodeOpenInput(id=made.id))
        opened = await node.provider.profiles.open(made.id)  # what the open answers again
        info = await env.run(node.node_lease_connect, NodeConnectInput(id=made.id))
        assert info.cdp == CdpEndpoint(ws=opened.ws, http=opened.http) and info.cdp.ws
        # Not open: opened for its holder.
        fresh = await env.run(node.node_lease_connect, NodeConnectInput(id=other.id))
        assert fresh.cdp is not None and fresh.cdp.ws and fresh.cdp.ws != opened.ws
        assert other.id in await node.provider.profiles.alive([other.id])
    finally:
        await node.aclose()
    clear = node_activities(account, encrypted=False)
    try:
        with pytest.raises(ApplicationError, match="encrypted history"):
            await env.run(clear.node_lease_connect, NodeConnectInput(id=made.id))
    finally:
        await clear.aclose()
