"""Two node workers, in process, on a namespace of the session's dev server: the registry, `live_nodes`, the node queues.

Each node worker is the real `run_node_worker` (its `node_task_queue` worker and
its beat loop) over an in-process BitBrowser emulator node of one shared
account; the main worker is the real `pool_queue_workers` (the registry
workflow, `live_nodes`). A probe workflow calls the activities the way a
BrowserPool does, through their definitions. The dev server suggests
continue-as-new early (CAN_THRESHOLD, 60 events), so the registry hands its state
over during the test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from pydantic import SecretStr
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.node_definitions import (
    NodeActivityDefinitions,
    NodeRegistryActivityDefinitions,
)
from devicepool.activities.node_models import (
    LiveNodesInput,
    LiveNodesResult,
    NodeCreateInput,
    NodeListInput,
    NodeListResult,
    NodeProxyPoolsView,
    NodesView,
)
from devicepool.activities.node_registry import query_nodes
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.browserpool.v1beta1 import BrowserPool, BrowserPoolSpec, ProxySpec
from devicepool.api.names import (
    NODE_REGISTRY_WORKFLOW_ID,
    QUERY_NODE_PROXY_POOLS,
    QUERY_NODES,
    TASK_QUEUE,
    node_task_queue,
)
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.client.errors import BadInput
from devicepool.client.pool_client import PoolClient
from devicepool.connect import DATA_CONVERTER
from devicepool.emulator.bitbrowser import BitBrowserConfig, create_apps
from devicepool.testing import eventually
from devicepool.worker.build import pool_queue_workers
from devicepool.worker.node import NodeOptions, run_node_worker
from devicepool.workflows.nodes.workflow import NodeRegistryWorkflow
from tests.helpers.workflow_stack import namespace_client, stand_in_worker

pytestmark = pytest.mark.devserver

NODES = ("node-1", "node-2")
BEAT_SECONDS = 0.3
LOST_AFTER = 1.5
# node-1's one proxy pool: its beats name it, and nothing else of it.
RESI = ProxyPoolSettings(name="resi", host="gw.example", port=1080, password=SecretStr("pw-4e1b"))


class ProbeInput(CamelModel):
    selector: dict[str, str]
    lost_after_seconds: float
    create_on: str | None = None
    list_on: str | None = None


class ProbeResult(CamelModel):
    live: LiveNodesResult
    listed: NodeListResult | None = None


@workflow.defn(sandboxed=False)
class ProbeNodes:
    """What a BrowserPool does with nodes: read the live ones, create on one, list on another."""

    @workflow.run
    async def run(self, input: ProbeInput) -> ProbeResult:
        timeout = timedelta(seconds=10)
        live = await workflow.execute_activity_method(
            NodeRegistryActivityDefinitions.live_nodes,
            LiveNodesInput(selector=input.selector, lost_after_seconds=input.lost_after_seconds),
            task_queue=TASK_QUEUE,
            start_to_close_timeout=timeout,
        )
        listed = None
        if input.create_on:
            await workflow.execute_activity_method(
                NodeActivityDefinitions.node_create_profile,
                NodeCreateInput(pool="pool-n", slot="0"),
                task_queue=node_task_queue(input.create_on),
                start_to_close_timeout=timeout,
            )
        if input.list_on:
            listed = await workflow.execute_activity_method(
                NodeActivityDefinitions.node_list_profiles,
                NodeListInput(pool="pool-n"),
                task_queue=node_task_queue(input.list_on),
                start_to_close_timeout=timeout,
            )
        return ProbeResult(live=live, listed=listed)


class Stack:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.queue = f"probe-{uuid.uuid4()}"
        self.stops: dict[str, asyncio.Event] = {}

    async def probe(self, **kwargs: object) -> ProbeResult:
        defaults: dict[str, object] = {"selector": {"zone": "a"}, "lost_after_seconds": LOST_AFTER}
        return await self.client.execute_workflow(
            ProbeNodes.run,
            ProbeInput.model_validate({**defaults, **kwargs}),
            id=f"probe-{uuid.uuid4()}",
            task_queue=self.queue,
            result_type=ProbeResult,
        )


@pytest.fixture(scope="module")
async def stack(env: WorkflowEnvironment) -> AsyncIterator[Stack]:
    apps = create_apps(BitBrowserConfig(account="nodes-e2e", nodes=list(NODES), speed=20, seed=3))
    client = await namespace_client(env, "node-workers")
    s = Stack(client)
    main = DeviceActivities(accounts={}, proxy_pools={})
    workers = [
        *pool_queue_workers(client, main),
        stand_in_worker(client, s.queue, ProbeNodes),
    ]
    tasks = [asyncio.ensure_future(w.run()) for w in workers]
    for name in NODES:
        s.stops[name] = asyncio.Event()
        options = NodeOptions(
            node=name,
            labels={"node": name, "zone": "a"},
            bitbrowser_url=f"http://{name}.local",
            heartbeat_seconds=BEAT_SECONDS,
            proxy_pools={"resi": RESI} if name == "node-1" else {},
        )
        tasks.append(
            asyncio.ensure_future(
                run_node_worker(
                    options,
                    client,
                    shutdown_event=s.stops[name],
                    transport=httpx.ASGITransport(app=apps[name]),
                )
            )
        )
    try:
        yield s
    finally:
        for stop in s.stops.values():
            stop.set()
        for w in workers:
            await w.shutdown()
        await asyncio.gather(*tasks, return_exceptions=True)
        await main.aclose()


async def test_live_nodes_reports_both_and_their_queues_serve_the_shared_account(
    stack: Stack,
) -> None:
    async def both_alive() -> ProbeResult | None:
        found = await stack.probe()
        return found if [n.node for n in found.live.alive] == list(NODES) else None

    found = await eventually(both_alive, what="both nodes alive", timeout=15)
    assert found.live.lost == []
    assert {n.node: n.labels for n in found.live.alive} == {
        name: {"node": name, "zone": "a"} for name in NODES
    }
    # A selector no node matches: neither alive nor lost.
    nobody = await stack.probe(selector={"zone": "b"})
    assert nobody.live.alive == [] and nobody.live.lost == []

    # Each beat names its node's proxy pools (issue 43 item 6), and `apply` of a BrowserPool
    # whose proxy pool none of its nodes has is refused before it starts.
    registry = stack.client.get_workflow_handle(NODE_REGISTRY_WORKFLOW_ID)
    names = await registry.query(QUERY_NODE_PROXY_POOLS, result_type=NodeProxyPoolsView)
    assert names.proxy_pools == {"node-1": ["resi"], "node-2": []}
    typo = BrowserPool(
        metadata=ObjectMeta(name=f"bp-{uuid.uuid4().hex[:6]}"),
        spec=BrowserPoolSpec(
            replicas=1, node_selector={"zone": "a"}, proxy=ProxySpec(pool_ref="rsi")
        ),
    )
    with pytest.raises(BadInput) as refused:
        await PoolClient(stack.client).apply(typo)
    said = str(refused.value)
    assert said.startswith(
        f"pool {typo.name!r}: unknown proxy pool 'rsi' (spec.proxy.poolRef) on the nodes its "
        "nodeSelector matches (node-1, node-2); known: resi (as their beats named them, the "
        "oldest "
    ), said
    assert said.endswith("s ago) — nothing was created"), said

    # Created through node-1's queue, listed through node-2's: one account, placement kept.
    listed = (await stack.probe(create_on="node-1", list_on="node-2")).listed
    assert listed is not None
    assert [(p.slot, p.node, p.open) for p in listed.profiles] == [("0", "node-1", False)]


async def test_a_registry_never_started_answers_no_nodes(stack: Stack) -> None:
    view = await query_nodes(stack.client, workflow_id=f"no-registry-{uuid.uuid4()}")
    assert view.nodes == []


async def test_a_node_whose_beats_stop_is_lost_and_the_registry_carries_on(
    stack: Stack,
) -> None:
    handle = stack.client.get_workflow_handle(NODE_REGISTRY_WORKFLOW_ID)
    first_run = (await handle.describe()).run_id
    stack.stops["node-2"].set()

    async def node_2_lost() -> ProbeResult | None:
        found = await stack.probe()
        return found if [n.node for n in found.live.lost] == ["node-2"] else None

    found = await eventually(node_2_lost, what="node-2 lost", timeout=15)
    assert [n.node for n in found.live.alive] == ["node-1"]

    # node-1 beats on: the registry continued as new (threshold 60 events) and kept both.
    async def handed_over() -> bool:
        return (await handle.describe()).run_id != first_run

    await eventually(handed_over, what="the registry to continue as new", timeout=15)
    view = await handle.query(QUERY_NODES, result_type=NodesView)
    assert [n.node for n in view.nodes] == list(NODES)
    # The first run's history (beats, then continue-as-new) replays on this code.
    first = stack.client.get_workflow_handle(NODE_REGISTRY_WORKFLOW_ID, run_id=first_run)
    replayer = Replayer(workflows=[NodeRegistryWorkflow], data_converter=DATA_CONVERTER)
    await replayer.replay_workflow(await first.fetch_history())
