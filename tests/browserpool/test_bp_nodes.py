"""Issue 26's scenario: a BrowserPool of 6 on two node workers, one of them lost and back.

A dev server of its own, the pool's worker, and two node workers in process,
each serving its node's task queue over one emulated node of one BitBrowser
account (tests.helpers.bitbrowser.Account), and beating at the node registry.
Ground truth is the emulator: its profiles, which are open where, and its
duplicate counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from devicepool.activities.node_browsers import NodeBrowserActivities, parse_mark
from devicepool.activities.node_models import NodeBeat
from devicepool.activities.node_registry import NodeRegistryActivities
from devicepool.activities.providers.bitbrowser import BrowserProfiles, LocalApi
from devicepool.activities.secrets import Scrubber
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.api.names import (
    NODE_REGISTRY_WORKFLOW_ID,
    SIGNAL_NODE_BEAT,
    TASK_QUEUE,
    WORKFLOW_NODE_REGISTRY,
    browser_pool_workflow_id,
    node_task_queue,
)
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.emulator.bitbrowser import BitBrowserConfig
from devicepool.testing import eventually
from devicepool.worker.build import new_worker
from devicepool.workflows.browserpool.messages import BrowserPoolInput
from devicepool.workflows.browserpool.workflow import BrowserPoolWorkflow
from devicepool.workflows.nodes.state import NodeRegistryInput
from devicepool.workflows.nodes.workflow import NodeRegistryWorkflow
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.servers import dev_server
from tests.helpers.settings import FAST

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]

LOST_AFTER = 3.0
BEAT = 0.5
SETTINGS = FAST.model_copy(
    update={"resync_seconds": 1.0, "node_lost_after_seconds": LOST_AFTER, "failure_streak_limit": 3}
)


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await dev_server() as server:
        yield server


class Node:
    """One node worker in process: its activities on its queue, and its beats."""

    def __init__(self, client: Client, account: Account, name: str) -> None:
        self.client, self.name = client, name
        api = LocalApi(
            base_url=f"http://{name}.local",
            api_key=account.key,
            timeout=5.0,
            transport=account.transports[name],
            scrubber=Scrubber.of(),
        )
        self.activities = NodeBrowserActivities(
            BrowserProfiles(api, settle_seconds=0.0), node=name, closing_wait_seconds=2.0
        )
        self.worker: Worker | None = None
        self.beats: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.worker = new_worker(
            self.client,
            task_queue=node_task_queue(self.name),
            activities=self.activities.activities(),
        )
        await self.worker.__aenter__()
        self.beats = asyncio.ensure_future(self._beat())

    async def stop(self) -> None:
        """As a SIGKILL looks from outside: no more beats, nobody on the queue."""
        if self.beats is not None:
            self.beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.beats
        if self.worker is not None:
            await self.worker.__aexit__(None, None, None)
        self.worker = self.beats = None

    async def _beat(self) -> None:
        while True:
            await self.client.start_workflow(
                WORKFLOW_NODE_REGISTRY,
                NodeRegistryInput(),
                id=NODE_REGISTRY_WORKFLOW_ID,
                task_queue=TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                start_signal=SIGNAL_NODE_BEAT,
                start_signal_args=[
                    NodeBeat(node=self.name, labels={"node": self.name}, interval_seconds=BEAT)
                ],
            )
            await asyncio.sleep(BEAT)


def placement(account: Account, pool: str) -> dict[str, Any]:
    """The emulator's truth: the pool's profiles by node, and which are open where."""
    emulator = account.emulator
    marks = {
        p.id: m
        for p in emulator.profiles.profiles.values()
        if (m := parse_mark(p.fields.get("remark") or "")) is not None and m.pool == pool
    }
    profiles = [emulator.profiles.profiles[pid] for pid in marks]
    by_node = Counter(m.node for m in marks.values())
    open_ids = {
        p.profile_id for p in emulator.processes.settled(emulator.now()) if p.state == "open"
    }
    return {
        "by_node": dict(by_node),
        "total": len(profiles),
        "open": sum(1 for p in profiles if p.id in open_ids),
        "ids": {p.id for p in profiles},
    }


async def status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return dict(await handle.query("status"))


async def test_a_pool_of_6_spreads_survives_a_lost_node_and_tears_down(
    env: WorkflowEnvironment,
) -> None:
    client = env.client
    account = Account(BitBrowserConfig(nodes=["node-1", "node-2"], api_key=KEY, speed=20.0, seed=7))
    nodes = {name: Node(client, account, name) for name in ("node-1", "node-2")}
    pool = f"bp-{uuid.uuid4().hex[:6]}"
    registry = NodeRegistryActivities()
    async with new_worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[BrowserPoolWorkflow, NodeRegistryWorkflow],
        activities=[registry.live_nodes],
    ):
        for node in nodes.values():
            await node.start()
        try:
            handle = await client.start_workflow(
                BrowserPoolWorkflow.run,
                BrowserPoolInput(
                    metadata=ObjectMeta(name=pool),
                    spec=BrowserPoolSpec(replicas=6),
                    settings=SETTINGS,
                ),
                id=browser_pool_workflow_id(pool),
                task_queue=TASK_QUEUE,
            )

            async def spread(
                by_node: dict[str, int], truth_by_node: dict[str, int] | None = None
            ) -> dict[str, Any] | None:
                """The status says `by_node` with 6 ready; the emulator agrees (`truth_by_node`:
                what it holds, a lost node's profiles included), every profile open."""
                s = await status(handle)
                truth = placement(account, pool)
                held = truth_by_node or by_node
                done = (
                    s.get("readyProfiles") == 6
                    and s.get("byNode") == by_node
                    and truth["by_node"] == held
                    and truth["open"] == sum(held.values())
                )
                return s if done else None

            first = await eventually(
                lambda: spread({"node-1": 3, "node-2": 3}), timeout=40, what="6 open, 3/3"
            )
            assert first["phase"] == "Ready", first
            before = placement(account, pool)["ids"]

            # node-1's worker dies: its 3 profiles are lost and held again on node-2.
            await nodes["node-1"].stop()
            lost = await eventually(
                lambda: spread({"node-2": 6}, {"node-1": 3, "node-2": 6}),
                timeout=LOST_AFTER + 25,
                what="node-1's profiles recreated on node-2",
            )
            conditions = {c["type"]: c for c in lost["conditions"]}
            assert conditions["NodesAvailable"]["reason"] == "NodesLost", conditions
            assert "node-1" in conditions["NodesAvailable"]["message"]
            assert lost["lostProfiles"] == 3, lost
            # (the emulator still has node-1's three: 9 in all while it is away)
            assert placement(account, pool)["total"] == 9

            # node-1 comes back: the surplus goes, and the spread is 3/3 again.
            await nodes["node-1"].start()
            back = await eventually(
                lambda: spread({"node-1": 3, "node-2": 3}), timeout=30, what="3/3 again"
            )
            assert back["lostProfiles"] == 0
            truth = placement(account, pool)
            assert truth["total"] == 6
            # The replacements on the busier node-2 went; node-1's own three stayed.
            assert truth["ids"] == before

            await handle.cancel()

            async def gone() -> bool:
                return placement(account, pool)["total"] == 0

            await eventually(gone, timeout=30, what="every profile deleted")
            stats = account.emulator.stats()
            assert stats["duplicates"] == {"byName": {}, "byRemark": {}}, stats["duplicates"]
            # No profile secret in the pool's history.
            history = (await handle.fetch_history()).to_json()
            for secret in account.emulator.secrets():
                assert secret not in history
        finally:
            for node in nodes.values():
                await node.stop()
                await node.activities.aclose()
            await account.aclose()
