"""`NodeRegistry`: the node workers that beat lately, one workflow, id `devicepool-nodes`.

Every node worker signal-with-starts it every `--node-heartbeat-seconds` on the
main task queue; it only remembers (pools read it through `live_nodes`).

Messages: signal `node_beat` (`NodeBeat`); queries `nodes` (`NodesView`) and
`node_proxy_pools` (`NodeProxyPoolsView`, not carried: the next beats refill it).
Continue-as-new when suggested (or a newer build is current), or after
`MAX_BEATS_PER_RUN` beats, carrying `NodeRegistryState` (`state.py`) whole.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.node_models import NodeBeat, NodeProxyPoolsView, NodesView
    from devicepool.api.names import (
        QUERY_NODE_PROXY_POOLS,
        QUERY_NODES,
        SIGNAL_NODE_BEAT,
        WORKFLOW_NODE_REGISTRY,
    )
    from devicepool.workflows.nodes.state import (
        NodeProxyPools,
        NodeRegistryInput,
        NodeRegistryState,
    )
    from devicepool.workflows.shared import versions

__all__ = ["MAX_BEATS_PER_RUN", "NodeRegistryWorkflow"]

# A backstop for servers that never suggest continue-as-new (the time-skipping one):
# a beat costs about 4 events.
MAX_BEATS_PER_RUN = 1000


@workflow.defn(name=WORKFLOW_NODE_REGISTRY)
class NodeRegistryWorkflow:
    @workflow.init
    def __init__(self, input: NodeRegistryInput) -> None:
        self._s = input.state or NodeRegistryState()
        self._beats_this_run = 0
        self._proxy_pools = NodeProxyPools()

    @workflow.run
    async def run(self, input: NodeRegistryInput) -> None:
        await workflow.wait_condition(
            lambda: versions.hand_over_due() or self._beats_this_run >= MAX_BEATS_PER_RUN
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        versions.continue_as_new(NodeRegistryInput(state=self._s))

    @workflow.signal(name=SIGNAL_NODE_BEAT)
    def node_beat(self, beat: NodeBeat) -> None:
        self._s.beat(beat, workflow.now())
        self._proxy_pools.beat(beat, self._s)
        self._beats_this_run += 1

    @workflow.query(name=QUERY_NODES)
    def nodes(self) -> NodesView:
        return self._s.view()

    @workflow.query(name=QUERY_NODE_PROXY_POOLS)
    def node_proxy_pools(self) -> NodeProxyPoolsView:
        return self._proxy_pools.view()
