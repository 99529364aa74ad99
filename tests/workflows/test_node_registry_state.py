"""The node registry's bookkeeping and the `live_nodes` split, pure (no Temporal)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.node_models import NodeBeat, NodeInfo, NodeProxyPoolsView
from devicepool.activities.node_registry import split_nodes
from devicepool.workflows.browserpool.accounts import teardown_nodes, teardown_step
from devicepool.workflows.nodes.state import (
    FORGET_AFTER,
    MAX_NODES,
    NodeProxyPools,
    NodeRegistryInput,
    NodeRegistryState,
)

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def beat(node: str, **labels: str) -> NodeBeat:
    return NodeBeat(node=node, labels=labels, account="bb", interval_seconds=10)


def test_the_last_beat_of_each_node_is_kept() -> None:
    s = NodeRegistryState()
    s.beat(beat("node-1", gpu="yes"), T0)
    s.beat(beat("node-2"), T0 + timedelta(seconds=1))
    s.beat(beat("node-1", gpu="no"), T0 + timedelta(seconds=10))
    view = s.view()
    assert [n.node for n in view.nodes] == ["node-1", "node-2"]
    assert view.nodes[0].labels == {"gpu": "no"}
    assert view.nodes[0].last_seen == T0 + timedelta(seconds=10)
    assert view.nodes[0].account == "bb" and view.nodes[0].interval_seconds == 10
    assert s.beats == 3


def test_a_node_is_lost_after_its_silence_and_alive_again_at_its_next_beat() -> None:
    s = NodeRegistryState()
    s.beat(beat("node-1", zone="a"), T0)
    s.beat(beat("node-2", zone="a"), T0)
    s.beat(beat("node-3", zone="b"), T0)
    s.beat(beat("node-2", zone="a"), T0 + timedelta(seconds=100))
    now = T0 + timedelta(seconds=130)
    split = split_nodes(s.view().nodes, selector={"zone": "a"}, lost_after_seconds=120, now=now)
    assert [n.node for n in split.alive] == ["node-2"]
    assert [n.node for n in split.lost] == ["node-1"]  # node-3 does not match
    s.beat(beat("node-1", zone="a"), now)
    split = split_nodes(s.view().nodes, selector={"zone": "a"}, lost_after_seconds=120, now=now)
    assert [n.node for n in split.alive] == ["node-1", "node-2"] and split.lost == []
    everything = split_nodes(s.view().nodes, selector={}, lost_after_seconds=120, now=now)
    assert len(everything.alive) + len(everything.lost) == 3


def test_the_registry_is_bounded_by_age_and_by_count() -> None:
    s = NodeRegistryState()
    s.beat(beat("old"), T0)
    s.beat(beat("recent"), T0 + FORGET_AFTER)
    assert [n.node for n in s.view().nodes] == ["old", "recent"]  # exactly at the limit
    s.beat(beat("recent"), T0 + FORGET_AFTER + timedelta(seconds=1))
    assert [n.node for n in s.view().nodes] == ["recent"]

    s = NodeRegistryState()
    for i in range(MAX_NODES + 5):
        s.beat(beat(f"n-{i:05d}"), T0 + timedelta(seconds=i))
    names = [n.node for n in s.view().nodes]
    assert len(names) == MAX_NODES
    assert "n-00000" not in names and f"n-{MAX_NODES + 4:05d}" in names  # the silent go first


def test_the_state_is_carried_whole_across_continue_as_new() -> None:
    s = NodeRegistryState()
    s.beat(beat("node-1", gpu="yes"), T0)
    carried = NodeRegistryInput(state=s)
    # As Temporal hands it to the next run: JSON, camelCase.
    again = NodeRegistryInput.model_validate_json(carried.model_dump_json())
    assert again.state == s
    assert '"lastSeen"' in carried.model_dump_json()


def test_a_beat_from_a_newer_node_worker_still_decodes() -> None:
    data = {"node": "node-1", "labels": {}, "intervalSeconds": 5, "someNewField": 1}
    assert NodeBeat.model_validate(data).interval_seconds == 5
    assert NodeInfo.model_fields.keys() >= {"node", "labels", "account", "last_seen"}


def test_the_proxy_pool_names_a_node_beats_are_kept_for_the_nodes_it_remembers() -> None:
    """Issue 43 item 6: `apply` of a BrowserPool asks which proxy pools its nodes have. The
    names are kept beside the carried state, not in it: a v0.2.0 build decodes the carried
    state and the `nodes` answer as before (both forbid unknown fields)."""
    s, pools = NodeRegistryState(), NodeProxyPools()
    for node, said in (("node-1", ["resi", "dc"]), ("node-2", None), ("node-3", [])):
        b = beat(node).model_copy(update={"proxy_pools": said})
        s.beat(b, T0)
        pools.beat(b, s)
    assert pools.view() == NodeProxyPoolsView(proxy_pools={"node-1": ["dc", "resi"], "node-3": []})
    # A node that stops saying (an older node worker again) says nothing; a forgotten one too.
    s.beat(beat("node-1"), T0)
    pools.beat(beat("node-1"), s)
    later = beat("node-4").model_copy(update={"proxy_pools": ["x"]})
    s.beat(later, T0 + FORGET_AFTER + timedelta(seconds=1))
    pools.beat(later, s)
    assert pools.view() == NodeProxyPoolsView(proxy_pools={"node-4": ["x"]})
    assert (
        "proxyPools" not in s.model_dump_json() and "proxyPools" not in s.view().model_dump_json()
    )


def test_a_node_without_a_bitbrowser_client_is_no_browserpool_node() -> None:
    """R16 #3: a node worker serving only GeeLark accounts (no desktop client) beats
    `browsers: false`. A BrowserPool's default selector ({}) matches every node, yet the
    split leaves it out, so a pool never lists on it and an empty pool's teardown ends
    (before: `NodeDown`, waiting for a desktop client that never comes)."""
    s = NodeRegistryState()
    s.beat(NodeBeat(node="gl-node", browsers=False, api_healthy=False), T0)
    s.beat(beat("node-1"), T0)
    assert s.view().nodes[0].browsers is False
    split = split_nodes(s.view().nodes, selector={}, lost_after_seconds=120, now=T0)
    assert [n.node for n in split.alive] == ["node-1"] and split.lost == []
    live = {n.node: n.account for n in split.alive}
    listed = teardown_nodes({}, live=live, selected=set(live))
    step = teardown_step({}, live=live, listed=listed, failed={}, profiles=[])
    assert (step.reason, step.delete) == ("", [])
    # Lost, it is no BrowserPool node either.
    later = T0 + timedelta(seconds=200)
    split = split_nodes(s.view().nodes, selector={}, lost_after_seconds=120, now=later)
    assert [n.node for n in split.lost] == ["node-1"]


def test_a_beat_or_a_registry_that_does_not_say_serves_browsers() -> None:
    """An older node worker's beat, and state an older registry carried, say nothing: the
    node serves browsers, as every node did."""
    assert NodeBeat.model_validate({"node": "n"}).browsers is True
    carried = {"nodes": {"n": {"node": "n", "lastSeen": T0.isoformat()}}, "beats": 1}
    assert NodeRegistryState.model_validate(carried).nodes["n"].browsers is True
