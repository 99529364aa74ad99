"""A GeeLark account served by a node worker: the one process holding the key (issue 41).

A namespace of its own on the session's dev server. One worker config file names the
account `api: geelark, node: gl-node` with its `appId` and `apiKeyFile`. The main worker
builds its config from it where the key file does not exist (it never reads it) and serves
the pool's queue over a transport that counts; the real node worker (`load_node_options`,
`run_node_worker`) reads the same file, key included, and speaks to an in-process GeeLark
emulator. A pool converges and deletes to 0 phones, and every request the emulator saw came
through the node's transport: one pacer, one breaker, one create lock for the key. With
`spec.reserve`, a scale 3 -> 1 -> 3 stops two phones and starts them again: no new phone
rented (the node's warm reserve), and a deletion leaves none.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api import parse_pool
from devicepool.api.names import TASK_QUEUE, UPDATE_APPLY, UPDATE_SCALE, pool_workflow_id
from devicepool.api.v1beta1 import ObjectMeta, ReserveSpec
from devicepool.client import PoolClient
from devicepool.emulator.geelark import GeeLarkConfig
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from devicepool.testing import eventually, pool_manifest
from devicepool.worker.accounts import register_accounts
from devicepool.worker.build import pool_queue_workers
from devicepool.worker.config import build_config
from devicepool.worker.node import load_node_options, run_node_worker
from devicepool.workflows.pool.messages import Accepted, ApplyRequest, PoolInput, ScaleRequest
from tests.helpers.geelark import BASE, Team
from tests.helpers.settings import PHONES
from tests.helpers.workflow_stack import namespace_client, start_pool

pytestmark = pytest.mark.devserver

NAMESPACE = "geelark-node"
ACCOUNT, NODE = "gl", "gl-node"
SPEED = 10.0
ACCOUNTS = {
    ACCOUNT: {
        "api": "geelark",
        "node": NODE,
        "baseUrl": BASE,
        "appId": DEFAULT_APP_ID,
        "apiKeyFile": "geelark.key",
        "timeoutSeconds": 5,
        # The emulator runs 10 times faster than real time: its minute is 6 s.
        "windowSeconds": 6,
        "billing": {"perMinute": 0.007, "dailyCap": 1.0},
    }
}


class Counting(httpx.AsyncBaseTransport):
    """A transport that counts the requests it carries (to `inner`, if any)."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.inner is None:
            return httpx.Response(599, text="a main worker reached the network")
        return await self.inner.handle_async_request(request)


class Stack:
    def __init__(self, client: Client, team: Team, main: Counting, node: Counting) -> None:
        self.client, self.team, self.main, self.node = client, team, main, node

    async def phones(self) -> dict[str, Any]:
        return dict((await self.team.stats())["phones"])


@pytest.fixture(scope="module")
async def stack(
    env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    here = tmp_path_factory.mktemp("geelark-node")
    config = here / "devicepool.yaml"
    config.write_text(yaml.safe_dump({"accounts": ACCOUNTS}))
    (here / "geelark.key").write_text(DEFAULT_API_KEY + "\n")
    team = Team(GeeLarkConfig(seed=41, speed=SPEED, boot_seconds=20))
    # The main worker's view: the same account, from a directory without the key file.
    elsewhere = tmp_path_factory.mktemp("main-worker")
    main_config = build_config(yaml.safe_load(config.read_text()), base_dir=elsewhere, env={})
    assert main_config.accounts[ACCOUNT].api_key.get_secret_value() == ""
    settings = PHONES.model_copy(update={"account_nodes": main_config.settings.account_nodes})
    main_transport = Counting()
    main = DeviceActivities(
        accounts=main_config.accounts,
        proxy_pools={},
        settings=settings,
        transport=main_transport,
    )
    options = load_node_options(
        node=NODE, labels=[], bitbrowser_url="http://127.0.0.1:1", config=config, env={}
    )
    node_transport = Counting(team.transport)
    client = await namespace_client(env, NAMESPACE)
    workers = pool_queue_workers(await namespace_client(env, NAMESPACE), main)
    running = [asyncio.ensure_future(w.run()) for w in workers]
    stop_node = asyncio.Event()
    running.append(
        asyncio.ensure_future(
            run_node_worker(options, client, shutdown_event=stop_node, transport=node_transport)
        )
    )
    await register_accounts(client, main_config.accounts)
    try:
        yield Stack(client, team, main_transport, node_transport)
    finally:
        stop_node.set()
        for worker in workers:
            await worker.shutdown()
        await asyncio.gather(*running, return_exceptions=True)
        await main.aclose()
        await team.aclose()


async def test_a_pool_on_a_node_served_geelark_account_runs_on_the_node_alone(
    stack: Stack,
) -> None:
    handle = await start_pool(
        stack.client,
        "gl-by-node",
        2,
        settings=None,
        account=ACCOUNT,
        proxy_ref=None,
        region="us",
        spec_fields={"osVersion": "15"},
    )

    async def converged() -> dict[str, Any] | None:
        phones = await stack.phones()
        if phones["started"] != 2:
            return None
        status = await handle.query("status")
        return phones if status["readyDevices"] == 2 else None

    phones = await eventually(converged, what="2 GeeLark phones ready", timeout=60)
    assert phones["created"] == 2 and phones["duplicateNames"] == 0, phones

    await handle.cancel()

    async def deleted() -> bool:
        phones = await stack.phones()
        return phones["total"] == 0 and phones["running"] == 0

    await eventually(deleted, what="every phone deleted", timeout=60)
    # Every call of the key went through the node worker's one process.
    assert stack.node.requests > 0 and stack.main.requests == 0


async def test_a_scale_down_and_up_on_the_node_rents_no_new_phone(stack: Stack) -> None:
    before = await stack.phones()
    manifest = pool_manifest(
        "gl-reserve",
        replicas=3,
        region="us",
        osVersion="15",
        providerCredentialRef=ACCOUNT,
        proxy=None,
    )
    spec = parse_pool(manifest).spec.model_copy(update={"reserve": ReserveSpec(keep=2)})
    handle = await stack.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name="gl-reserve"), spec=spec, settings=None),
        id=pool_workflow_id("gl-reserve"),
        task_queue=TASK_QUEUE,
    )

    async def ready(n: int, stopped: int) -> dict[str, Any] | None:
        phones = await stack.phones()
        if phones["started"] != before["started"] + n:
            return None
        if phones["shutDown"] != before["shutDown"] + stopped:
            return None
        status = await handle.query("status")
        return phones if status["readyDevices"] == n else None

    await eventually(lambda: ready(3, 0), what="3 GeeLark phones ready", timeout=90)
    created = (await stack.phones())["created"]
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
    phones = await eventually(lambda: ready(1, 2), what="2 phones stopped, kept", timeout=90)
    assert phones["deleted"] == before["deleted"], phones  # stopped, not deleted
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=3), result_type=Accepted)
    phones = await eventually(lambda: ready(3, 0), what="3 phones ready again", timeout=90)
    assert phones["created"] == created and phones["duplicateNames"] == 0, phones
    await handle.cancel()

    async def deleted() -> bool:
        phones = await stack.phones()
        return phones["total"] == before["total"] and phones["deleted"] == before["deleted"] + 3

    await eventually(deleted, what="every phone of the pool deleted", timeout=90)


async def _reserve_pool(stack: Stack, name: str, replicas: int, keep: int) -> Any:
    manifest = pool_manifest(
        name,
        replicas=replicas,
        region="us",
        osVersion="15",
        providerCredentialRef=ACCOUNT,
        proxy=None,
    )
    spec = parse_pool(manifest).spec.model_copy(update={"reserve": ReserveSpec(keep=keep)})
    return await stack.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name=name), spec=spec, settings=None),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


async def _ready_ids(handle: Any, n: int) -> list[str] | None:
    status = await handle.query("status")
    if status["readyDevices"] != n:
        return None
    devices = (await handle.query("devices"))["devices"]
    ids = [d["id"] for d in devices if d["status"] == "ready"]
    return ids if len(ids) == n else None


async def test_a_device_replaced_when_idle_is_deleted_not_kept_in_the_reserve(
    stack: Stack,
) -> None:
    # R20 #1: a retirement leaves as a scale-down does (only if idle); kept, the
    # replacement's create claimed it back, the same phone served as new.
    handle = await _reserve_pool(stack, "gl-retire", 1, 2)
    (old,) = await eventually(lambda: _ready_ids(handle, 1), what="1 phone ready", timeout=90)
    await PoolClient(stack.client).replace_device("gl-retire", old, when_idle=True)

    async def replaced() -> list[str] | None:
        ids = await _ready_ids(handle, 1)
        return ids if ids and old not in ids else None

    (new,) = await eventually(replaced, what="the phone replaced", timeout=90)
    assert new.partition(".")[0] != old.partition(".")[0]  # a new phone, not the old one

    async def deleted() -> bool:
        return stack.team.emulator.phones.phones.get(old.partition(".")[0]) is None

    await eventually(deleted, what="the retired phone deleted", timeout=60)
    await handle.cancel()


async def test_a_reserve_removed_is_claimed_no_more_and_deleted(stack: Stack) -> None:
    # R20 #2: with `spec.reserve` removed, a create adds a phone and the kept ones go.
    handle = await _reserve_pool(stack, "gl-unkeep", 3, 2)
    first = await eventually(lambda: _ready_ids(handle, 3), what="3 phones ready", timeout=90)
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
    (kept,) = await eventually(lambda: _ready_ids(handle, 1), what="scaled to 1", timeout=90)
    parked = {d.partition(".")[0] for d in first} - {kept.partition(".")[0]}

    async def stopped() -> bool:
        phones = stack.team.emulator.phones.phones
        return all(p in phones and phones[p].status == 2 for p in parked)

    await eventually(stopped, what="2 phones kept stopped", timeout=60)
    manifest = pool_manifest(
        "gl-unkeep",
        replicas=2,
        region="us",
        osVersion="15",
        providerCredentialRef=ACCOUNT,
        proxy=None,
    )
    request = ApplyRequest(metadata=ObjectMeta(name="gl-unkeep"), spec=parse_pool(manifest).spec)
    await handle.execute_update(UPDATE_APPLY, request, result_type=Accepted)
    now = await eventually(lambda: _ready_ids(handle, 2), what="2 phones ready", timeout=90)
    assert not {d.partition(".")[0] for d in now} & parked  # a new phone, none claimed

    async def deleted() -> bool:
        phones = stack.team.emulator.phones.phones
        return not any(p in phones for p in parked)

    await eventually(deleted, what="the kept phones deleted", timeout=60)
    await handle.cancel()
