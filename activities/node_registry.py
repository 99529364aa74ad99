"""`live_nodes`: the node registry read for a pool, on the main task queue.

It queries the registry workflow (`workflows/nodes/workflow.py`) through the
activity's own client and splits the nodes whose labels match the pool's
selector into alive (a beat within `lost_after_seconds`) and lost. A registry
that was never started (no node worker ever beat) answers no nodes at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.node_definitions import NodeRegistryActivityDefinitions
from devicepool.activities.node_models import LiveNodesInput, LiveNodesResult, NodeInfo, NodesView
from devicepool.api.labels import selector_matches
from devicepool.api.names import NODE_REGISTRY_WORKFLOW_ID, QUERY_NODES

__all__ = ["NodeRegistryActivities", "query_nodes", "split_nodes"]


def split_nodes(
    nodes: Iterable[NodeInfo],
    *,
    selector: Mapping[str, str],
    lost_after_seconds: float,
    now: datetime,
) -> LiveNodesResult:
    """The BrowserPool nodes matching `selector`, alive (last beat within the limit) or lost,
    by name. A node without a BitBrowser desktop client (`browsers` False: it serves GeeLark
    accounts only) is none, whatever the selector: no pool lists on it or waits for it."""
    alive: list[NodeInfo] = []
    lost: list[NodeInfo] = []
    limit = timedelta(seconds=lost_after_seconds)
    for node in sorted(nodes, key=lambda n: n.node):
        if not node.browsers or not selector_matches(selector, node.labels):
            continue
        (alive if now - node.last_seen <= limit else lost).append(node)
    return LiveNodesResult(alive=alive, lost=lost)


async def query_nodes(client: Client, *, workflow_id: str = NODE_REGISTRY_WORKFLOW_ID) -> NodesView:
    """The registry's `nodes` query; no nodes when it was never started."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        return await handle.query(QUERY_NODES, result_type=NodesView)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return NodesView()
        raise


class NodeRegistryActivities(NodeRegistryActivityDefinitions):
    """The registry's reader, for the main worker's activity class (no dependencies)."""

    @activity.defn
    async def live_nodes(self, input: LiveNodesInput) -> LiveNodesResult:
        view = await query_nodes(activity.client())
        return split_nodes(
            view.nodes,
            selector=input.selector,
            lost_after_seconds=input.lost_after_seconds,
            now=datetime.now(UTC),
        )
