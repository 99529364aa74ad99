"""Cloud phones served by a node worker: two main workers, one node, one 1-a-second budget.

A namespace of its own on the session's dev server; two main workers (separate `Worker`s on the pool's
queue, each with its own `DeviceActivities`) whose config names the account
`api: bitbrowser, node: node-1`: they hold no URL and no key, and never speak
to the Local API. The real node worker (`run_node_worker`) serves the
account over an in-process BitBrowser emulator, 10 times faster than real
time, its one pacer 1.1 virtual seconds apart. Pools read where the account's
calls go from the worker's settings (`pool_settings`), as in production. The
emulator's stats are the ground truth: phones running, and the budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, ProxyPoolSettings
from devicepool.api import parse_pool
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.api.v1beta1 import ObjectMeta
from devicepool.emulator.bitbrowser import BitBrowserConfig, create_apps
from devicepool.testing import eventually, pool_manifest
from devicepool.worker.accounts import register_accounts
from devicepool.worker.build import pool_queue_workers
from devicepool.worker.node import NodeOptions, run_node_worker
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.shared import placement
from tests.helpers.phones import stack_account
from tests.helpers.settings import PHONES
from tests.helpers.workflow_stack import namespace_client, start_pool

pytestmark = pytest.mark.devserver

NAMESPACE = "cloud-phones-nodes"  # of the session's dev server, the module's own
ACCOUNT = "phones"
NODE = "node-1"
# An account node-1 serves that the main workers' config names later (moved to the node).
MOVED = "moved-phones"
# An account whose node worker never runs.
DEAD_ACCOUNT, DEAD_NODE = "stranded-phones", "node-9"
KEY = "bb-local-key-nodes"
URL = "http://phones-nodes.local"
SPEED = 10.0
PROXY = ProxyPoolSettings(
    name="proxyseller-us",
    host="gw.proxy.test",
    port=1080,
    password=SecretStr("nodes-proxy-pass-51x"),
)
# What the main workers' config gives the pools: the intervals, and the account's node.
SETTINGS = PHONES.model_copy(update={"account_nodes": {ACCOUNT: NODE, DEAD_ACCOUNT: DEAD_NODE}})


class Stack:
    def __init__(self, client: Client, app: Any, mains: list[DeviceActivities]) -> None:
        self.client = client
        self.mains = mains
        self.control = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL)

    async def phones(self) -> dict[str, Any]:
        answer = await self.control.get("/_emulator/stats")
        answer.raise_for_status()
        return dict(answer.json()["phones"])


# The accounts as the main workers' config has them: a node each, no URL, no key.
MAIN_ACCOUNTS = {
    name: AccountSettings(name=name, api="bitbrowser", node=node)
    for name, node in SETTINGS.account_nodes.items()
}


def main_activities() -> DeviceActivities:
    """One main worker's activities."""
    return DeviceActivities(
        accounts=MAIN_ACCOUNTS, proxy_pools={PROXY.name: PROXY}, settings=SETTINGS
    )


@pytest.fixture(scope="module")
async def stack(env: WorkflowEnvironment) -> AsyncIterator[Stack]:
    apps = create_apps(
        BitBrowserConfig(
            account="phones-nodes",
            api_key=KEY,
            speed=SPEED,
            seed=31,
            phone_boot_seconds=20,
            phone_resume_seconds=5,
        )
    )
    app = apps[NODE]
    mains = [main_activities(), main_activities()]
    node = NodeOptions(
        node=NODE,
        bitbrowser_url=URL,
        api_key=SecretStr(KEY),
        proxy_pools={PROXY.name: PROXY},
        heartbeat_seconds=1,
        accounts={name: stack_account(name, URL, KEY) for name in (ACCOUNT, MOVED)},
    )
    client = await namespace_client(env, NAMESPACE)
    # Two main workers on the pool's queue, as two processes would be: each its own
    # client, `Worker` (and watch worker) and activities.
    workers = [
        w
        for main in mains
        for w in pool_queue_workers(await namespace_client(env, NAMESPACE), main)
    ]
    assert len([w for w in workers if w.task_queue == TASK_QUEUE]) == 2
    running = [asyncio.ensure_future(w.run()) for w in workers]
    stop_node = asyncio.Event()
    running.append(
        asyncio.ensure_future(
            run_node_worker(
                node,
                client,
                shutdown_event=stop_node,
                transport=httpx.ASGITransport(app=app),
            )
        )
    )
    await register_accounts(client, MAIN_ACCOUNTS)
    s = Stack(client, app, mains)
    try:
        yield s
    finally:
        stop_node.set()
        for worker in workers:
            await worker.shutdown()
        await asyncio.gather(*running, return_exceptions=True)
        for main in mains:
            await main.aclose()
        await s.control.aclose()


async def start(client: Client, name: str, replicas: int, account: str) -> WorkflowHandle[Any, Any]:
    """A pool that reads the worker's settings (none in its input), as `apply` starts one."""
    return await start_pool(
        client, name, replicas, settings=None, account=account, proxy_ref=PROXY.name
    )


async def test_two_main_workers_share_one_node_and_its_one_request_a_second(
    stack: Stack,
) -> None:
    pools = [await start(stack.client, name, 2, ACCOUNT) for name in ("nodes-a", "nodes-b")]

    async def converged() -> dict[str, Any] | None:
        phones = await stack.phones()
        if phones["running"] != 4 or phones["created"] != 4:
            return None
        statuses = [await handle.query("status") for handle in pools]
        return phones if all(s["readyDevices"] == 2 for s in statuses) else None

    phones = await eventually(converged, what="two pools of 2 phones ready", timeout=60)
    # However many main workers schedule them, the calls reach the Local API at 1 a second.
    assert phones["maxRequestsPerSecond"] <= 1 and phones["rateLimited"] == 0, phones

    for handle in pools:
        await handle.cancel()
    await eventually(
        lambda: _running(stack, 0), what="every phone shut down after delete", timeout=60
    )
    final = await stack.phones()
    assert final["maxRequestsPerSecond"] <= 1 and final["rateLimited"] == 0, final


async def test_a_pool_deleted_before_its_run_read_the_settings_tears_down_on_the_node(
    stack: Stack,
) -> None:
    """A run that carries rented phones (as one handed over does) is deleted before its
    first look read where the account's calls go: its teardown still goes to the node's
    queue. Before, it went to the main workers' (`UnknownAccount`, blocked) until a later
    hand-over read the settings (CI saw a delete wait out a minute)."""
    manifest = pool_manifest(
        "nodes-fresh",
        replicas=2,
        region="us-west",
        providerCredentialRef=ACCOUNT,
        proxy={"poolRef": PROXY.name, "stickyTTL": 900},
    )
    handle = await stack.client.start_workflow(
        "DevicePool",
        PoolInput(
            metadata=ObjectMeta(name="nodes-fresh"),
            spec=parse_pool(manifest).spec,
            state=PoolState(slots=SlotBook(next_slot=2)),
        ),
        id=pool_workflow_id("nodes-fresh"),
        task_queue=TASK_QUEUE,
    )
    await handle.cancel()

    async def ended() -> bool:
        return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING

    await eventually(ended, what="the teardown done", timeout=30)
    history = await handle.fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure.message
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    assert not [f for f in failures if "unknown_account" in f], failures


async def _running(stack: Stack, count: int) -> bool:
    return (await stack.phones())["running"] == count


async def test_a_pool_whose_node_takes_no_call_says_so_instead_of_hanging(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The workflows read the bound at each call: a short one, so the test need not wait a minute.
    monkeypatch.setattr(placement, "NODE_SCHEDULE_TO_START", timedelta(seconds=2))
    handle = await start(stack.client, "nodes-stranded", 1, DEAD_ACCOUNT)

    async def said() -> dict[str, Any] | None:
        events = (await handle.query("events"))["events"]
        return next((e for e in events if e["reason"] == "ListFailed"), None)

    event = await eventually(said, what="ListFailed naming the node", timeout=30)
    assert f"NodeUnavailable: node worker '{DEAD_NODE}' took no call in 2s" in event["message"]
    status = await handle.query("status")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NotObserved", ready
    assert status["pendingDevices"] == 0  # no create on a guess

    # Deleting it cannot sweep a node that takes no call: it says so, and keeps trying.
    await handle.cancel()

    async def blocked() -> dict[str, Any] | None:
        events = (await handle.query("events"))["events"]
        return next((e for e in events if e["reason"] == "TeardownBlocked"), None)

    event = await eventually(blocked, what="TeardownBlocked naming the node", timeout=30)
    assert event["message"].startswith("NodeUnavailable: cannot delete devices: node worker")
    await handle.terminate("test over")


async def test_an_account_the_config_moves_to_a_node_is_followed_without_a_restart(
    stack: Stack,
) -> None:
    # The main workers do not know the account yet: the pool cannot list.
    handle = await start(stack.client, "nodes-moved", 1, MOVED)

    async def unknown() -> dict[str, Any] | None:
        events = (await handle.query("events"))["events"]
        return next((e for e in events if e["reason"] == "ListFailed"), None)

    event = await eventually(unknown, what="ListFailed UnknownAccount", timeout=30)
    assert event["message"].startswith("UnknownAccount:"), event

    # The config now names node-1 for it (as a restarted worker's would): the running
    # pool reads where its calls go again, and its phone comes up on the node.
    moved = SETTINGS.model_copy(update={"account_nodes": {**SETTINGS.account_nodes, MOVED: NODE}})
    for main in stack.mains:
        main._settings = moved

    async def ready() -> dict[str, Any] | None:
        status = await handle.query("status")
        return status if status["readyDevices"] == 1 else None

    # The pool looks again at its next resync, the default 30 s (it has no worker settings
    # since its listing failed): one query a second is enough for a wait that long.
    await eventually(ready, what="the moved account's phone ready", timeout=60, every=1.0)
    phones = await stack.phones()
    assert phones["maxRequestsPerSecond"] <= 1 and phones["rateLimited"] == 0, phones
    await handle.cancel()
    await eventually(
        lambda: _running(stack, 0), what="the moved pool's phone shut down", timeout=60
    )
