"""The node registry's carried state and its bookkeeping, pure (no Temporal calls).

Bounded: a node silent for `FORGET_AFTER` is forgotten at the next beat of any
node; past `MAX_NODES` the longest silent go first. Alive or lost is the reader's
call (`activities.node_registry.split_nodes`, against each pool's
`nodeLostAfterSeconds`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from devicepool.activities.node_models import NodeBeat, NodeInfo, NodeProxyPoolsView, NodesView
from devicepool.api.base import CamelModel

__all__ = [
    "FORGET_AFTER",
    "MAX_NODES",
    "NodeProxyPools",
    "NodeRegistryInput",
    "NodeRegistryState",
]

# A pool counts a node the registry forgot as lost, as one past nodeLostAfterSeconds.
FORGET_AFTER = timedelta(days=7)
# Far above any fleet of desktops; a bound, not a plan.
MAX_NODES = 1000


class NodeRegistryState(CamelModel):
    """The last beat of each node, by name."""

    nodes: dict[str, NodeInfo] = Field(default_factory=dict)
    beats: int = 0

    def beat(self, beat: NodeBeat, now: datetime) -> None:
        """Record `beat` as seen at `now`, then forget what is too old or too many."""
        self.nodes[beat.node] = NodeInfo(
            node=beat.node,
            labels=dict(beat.labels),
            account=beat.account,
            last_seen=now,
            interval_seconds=beat.interval_seconds,
            api_healthy=beat.api_healthy,
            api_error=beat.api_error,
            browsers=beat.browsers,
        )
        self.beats += 1
        self.prune(now)

    def prune(self, now: datetime) -> None:
        self.nodes = {n: i for n, i in self.nodes.items() if now - i.last_seen <= FORGET_AFTER}
        if len(self.nodes) > MAX_NODES:
            newest = sorted(self.nodes.values(), key=lambda n: (n.last_seen, n.node), reverse=True)
            self.nodes = {n.node: n for n in sorted(newest[:MAX_NODES], key=lambda n: n.node)}

    def view(self) -> NodesView:
        return NodesView(nodes=[self.nodes[name] for name in sorted(self.nodes)])


class NodeProxyPools:
    """The proxy pool names each node's last beat named, beside the carried state and not in
    it (`NodeProxyPoolsView` says why): a new run learns them again from the next beats, and
    until a node beats it does not say (`apply` then leaves the check to the pool)."""

    def __init__(self) -> None:
        self._by_node: dict[str, list[str]] = {}

    def beat(self, beat: NodeBeat, state: NodeRegistryState) -> None:
        """Record what `beat` names (after `state` recorded it), forgetting the nodes `state`
        forgot."""
        if beat.proxy_pools is None:
            self._by_node.pop(beat.node, None)
        else:
            self._by_node[beat.node] = sorted(set(beat.proxy_pools))
        self._by_node = {n: pools for n, pools in self._by_node.items() if n in state.nodes}

    def view(self) -> NodeProxyPoolsView:
        return NodeProxyPoolsView(proxy_pools=dict(sorted(self._by_node.items())))


class NodeRegistryInput(CamelModel):
    """A node worker's signal-with-start (no state), or the state carried on."""

    state: NodeRegistryState | None = None
