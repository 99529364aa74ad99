"""A BrowserPool on the pool gauges: its search attributes first, and its profiles by node.

BrowserPools upsert `DevicePoolDesired`, `DevicePoolReady` and `DevicePoolPhase`
as DevicePools do, so the collector reads them at every listing (every 5 s)
rather than from a status answered up to 30 s ago; a pool without them (started
by an older build) still takes them from its status. `byNode` becomes
`devicepool_node_profiles{node}`, and the node registry's last beats
`devicepool_node_last_beat_timestamp_seconds{node}`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from devicepool.activities.node_models import NodeInfo, NodesView
from devicepool.api.names import NODE_REGISTRY_WORKFLOW_ID
from devicepool.api.names import browser_pool_workflow_id as bp_id
from tests.helpers.metrics import Execution, Samples, collected, listed

STATUS = {
    "phase": "Degraded",
    "desiredReplicas": 6,
    "readyProfiles": 3,
    "openProfiles": 3,
    "lostProfiles": 3,
    "byNode": {"node-2": 3, "node-3": 0},
    "conditions": [{"type": "Ready", "status": "False"}],
}


BEAT_1 = datetime(2026, 12, 2, 22, 0, tzinfo=UTC)
BEAT_2 = datetime(2026, 12, 2, 22, 5, 30, tzinfo=UTC)


class TwoBrowserPools:
    """`fresh` has search attributes newer than its status; `old` has none."""

    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        if "BrowserPool" not in query:
            return
        yield listed(bp_id("fresh"), platform="browser", desired=6, ready=5, phase="Provisioning")
        yield listed(bp_id("old"))

    def get_workflow_handle(self, workflow_id: str) -> Any:
        if workflow_id == NODE_REGISTRY_WORKFLOW_ID:

            class _Registry:
                async def query(self, name: str, **_: Any) -> NodesView:
                    return NodesView(
                        nodes=[
                            NodeInfo(node="node-1", last_seen=BEAT_1),
                            NodeInfo(node="node-2", last_seen=BEAT_2),
                        ]
                    )

            return _Registry()

        class _Handle:
            async def query(self, name: str, **_: Any) -> dict[str, Any]:
                return STATUS

        return _Handle()


async def samples() -> Samples:
    return await collected(TwoBrowserPools())


def labels(pool: str, **more: str) -> frozenset[tuple[str, str]]:
    return frozenset({"pool": pool, "platform": "browser", "kind": "BrowserPool", **more}.items())


async def test_search_attributes_come_first_and_the_status_fills_in_for_a_pool_without() -> None:
    seen = await samples()
    assert seen[("devicepool_replicas_ready", labels("fresh"))] == 5  # not the status' 3
    assert seen[("devicepool_replicas_desired", labels("fresh"))] == 6
    assert seen[("devicepool_pool_phase", labels("fresh", phase="Provisioning"))] == 1
    assert ("devicepool_pool_phase", labels("fresh", phase="Degraded")) not in seen
    assert seen[("devicepool_replicas_ready", labels("old"))] == 3
    assert seen[("devicepool_pool_phase", labels("old", phase="Degraded"))] == 1
    assert seen[("devicepool_browser_pools", frozenset())] == 2


async def test_profiles_by_node_are_one_series_a_node() -> None:
    seen = await samples()
    by_node = {
        (dict(lbl)["pool"], dict(lbl)["node"]): value
        for (name, lbl), value in seen.items()
        if name == "devicepool_node_profiles"
    }
    assert by_node == {
        ("fresh", "node-2"): 3,
        ("fresh", "node-3"): 0,
        ("old", "node-2"): 3,
        ("old", "node-3"): 0,
    }
    assert seen[("devicepool_devices", labels("fresh", status="lost"))] == 3


async def test_each_node_workers_last_beat_is_a_timestamp() -> None:
    seen = await samples()
    beats = {
        dict(lbl)["node"]: value
        for (name, lbl), value in seen.items()
        if name == "devicepool_node_last_beat_timestamp_seconds"
    }
    assert beats == {"node-1": BEAT_1.timestamp(), "node-2": BEAT_2.timestamp()}
