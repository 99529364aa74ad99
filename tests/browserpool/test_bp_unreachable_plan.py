"""Issue 37 item 10, pure: a live node whose Local API does not answer (plan.py).

Its profiles keep their slots but are not ready; nothing is created, opened or
deleted on it; the other nodes go on. No server.
"""

from __future__ import annotations

from collections import Counter

from devicepool.workflows.browserpool.plan import NodeProfile, plan


def test_an_unreachable_nodes_profiles_keep_their_slots_and_the_others_go_on() -> None:
    profiles = [NodeProfile(f"a{i}", i, "node-1", True) for i in range(2)]
    profiles += [NodeProfile(f"b{i}", i + 2, "node-2", False) for i in range(2)]
    placed = plan(
        replicas=5,
        profiles=profiles,
        alive={"node-1", "node-2"},
        lost=set(),
        open_wanted=True,
        failures={},
        failure_limit=3,
        unreachable={"node-1"},
    )
    # node-1's two keep slots 0 and 1: no create for them, none on node-1.
    assert placed.create == [(4, "node-2")]
    assert [p.id for p in placed.waiting] == ["a0", "a1"]
    # Counted neither ready nor lost; node-2's are held and opened.
    assert [p.id for p in placed.held] == ["b0", "b1"]
    assert placed.lost == []
    assert placed.delete == []
    assert placed.open == [("b0", "node-2")]


def test_nothing_is_touched_on_an_unreachable_node_even_past_replicas() -> None:
    profiles = [NodeProfile(f"a{i}", i, "node-1") for i in range(3)]
    placed = plan(
        replicas=1,
        profiles=profiles,
        alive={"node-1", "node-2"},
        lost=set(),
        open_wanted=True,
        failures={"a0": 9},
        failure_limit=3,
        unreachable={"node-1"},
    )
    assert placed.delete == [] and placed.open == [] and placed.create == []
    assert [p.id for p in placed.waiting] == ["a0"]


def test_with_every_node_unreachable_nothing_is_created() -> None:
    placed = plan(
        replicas=3,
        profiles=[],
        alive={"node-1", "node-2"},
        lost=set(),
        open_wanted=True,
        failures={},
        failure_limit=3,
        unreachable={"node-1", "node-2"},
    )
    assert placed.create == [] and placed.held == []


def test_counted_lost_its_slots_are_held_again_on_the_others() -> None:
    """Past nodeLostAfterSeconds the workflow passes the node as lost, not alive."""
    profiles = [NodeProfile(f"a{i}", i, "node-1") for i in range(2)]
    placed = plan(
        replicas=4,
        profiles=profiles,
        alive={"node-2", "node-3"},
        lost={"node-1"},
        open_wanted=False,
        failures={},
        failure_limit=3,
    )
    assert Counter(node for _, node in placed.create) == {"node-2": 2, "node-3": 2}
    assert [p.id for p in placed.lost] == ["a0", "a1"]
