"""A BrowserPool pass's placement (workflows/browserpool/plan.py), pure: spread, node loss, surplus.

No fixture of conftest.py: no server.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.workflows.browserpool.plan import NodeProfile
from tests.helpers.browser_plan import place as run


def test_a_pool_of_6_spreads_3_3_over_two_nodes() -> None:
    placed = run(6, [], {"node-1", "node-2"})
    assert Counter(node for _, node in placed.create) == {"node-1": 3, "node-2": 3}
    assert [slot for slot, _ in placed.create] == list(range(6))


def test_no_live_node_creates_nothing() -> None:
    placed = run(3, [], set())
    assert placed.create == [] and placed.held == []


def test_a_lost_nodes_profiles_are_counted_lost_and_held_elsewhere() -> None:
    profiles = [NodeProfile(f"a{i}", i, "node-1", True) for i in range(3)]
    profiles += [NodeProfile(f"b{i}", i + 3, "node-2", True) for i in range(3)]
    placed = run(6, profiles, {"node-2"}, frozenset({"node-1"}))
    assert [p.id for p in placed.lost] == ["a0", "a1", "a2"]
    assert placed.create == [(0, "node-2"), (1, "node-2"), (2, "node-2")]
    assert placed.delete == []  # a profile on a lost node is not touched


def test_when_the_lost_node_comes_back_its_surplus_goes_and_the_spread_returns() -> None:
    back = [NodeProfile(f"a{i}", i, "node-1", True) for i in range(3)]
    others = [NodeProfile(f"b{i}", i + 3, "node-2", True) for i in range(3)]
    replacements = [NodeProfile(f"r{i}", i, "node-2", True) for i in range(3)]
    placed = run(6, back + others + replacements, {"node-1", "node-2"})
    assert sorted(pid for pid, _ in placed.delete) == ["r0", "r1", "r2"]
    assert placed.by_node() == {"node-1": 3, "node-2": 3}
    assert placed.create == []


def test_scale_down_deletes_the_slots_above_replicas() -> None:
    profiles = [NodeProfile(f"p{i}", i, f"node-{i % 2 + 1}", True) for i in range(4)]
    placed = run(2, profiles, {"node-1", "node-2"})
    assert sorted(placed.delete) == [("p2", "node-1"), ("p3", "node-2")]
    assert "above replicas 2" in placed.why["p2"]


def test_closed_profiles_are_opened_one_per_node_per_pass() -> None:
    profiles = [NodeProfile(f"p{i}", i, f"node-{i % 2 + 1}", False) for i in range(4)]
    placed = run(4, profiles, {"node-1", "node-2"})
    assert sorted(placed.open) == [("p0", "node-1"), ("p1", "node-2")]
    assert run(4, profiles, {"node-1", "node-2"}, open_wanted=False).open == []


def test_a_profile_that_keeps_failing_to_open_is_deleted_and_its_slot_held_again() -> None:
    profiles = [NodeProfile("bad", 0, "node-1", False), NodeProfile("ok", 1, "node-2", True)]
    placed = run(2, profiles, {"node-1", "node-2"}, failures={"bad": 3})
    assert placed.delete == [("bad", "node-1")]
    assert placed.create == [(0, "node-1")]


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.integers(0, 12),
    nodes=st.integers(1, 4),
    lost_nodes=st.integers(0, 2),
    existing=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5), st.booleans()), max_size=20),
)
def test_after_a_pass_every_slot_is_held_once_and_the_spread_is_even(
    replicas: int, nodes: int, lost_nodes: int, existing: list[tuple[int, int, bool]]
) -> None:
    alive = {f"n{i}" for i in range(nodes)}
    lost = {f"l{i}" for i in range(lost_nodes)}
    everywhere = sorted(alive | lost)
    profiles = [
        NodeProfile(f"p{k}", slot, everywhere[node % len(everywhere)], is_open)
        for k, (slot, node, is_open) in enumerate(existing)
    ]
    placed = run(replicas, profiles, alive, frozenset(lost))
    gone = {pid for pid, _ in placed.delete}
    # Nothing is deleted on a node that cannot close it.
    assert all(node in alive for _, node in placed.delete)
    # Held and created together hold each slot 0..replicas-1 exactly once, all on live nodes.
    after = [(p.slot, p.node) for p in placed.held if p.id not in gone] + placed.create
    assert sorted(slot for slot, _ in after) == list(range(replicas))
    assert all(node in alive for _, node in after)
    # New profiles go where the load is least: a node that got one ends at most one
    # above the least loaded live node.
    load = Counter(node for _, node in after)
    least = min(load.get(n, 0) for n in alive)
    for node in {node for _, node in placed.create}:
        assert load[node] <= least + 1, (load, placed.create)


def test_more_failing_than_max_unhealthy_deletes_none_and_says_how_many() -> None:
    profiles = [NodeProfile(f"p{i}", i, "node-1", False) for i in range(4)]
    failing = {"p0": 3, "p1": 3, "p2": 3}
    paused = run(4, profiles, {"node-1"}, failures=failing, max_unhealthy=2)
    assert paused.delete == [] and paused.paused == 3
    assert paused.open  # opening goes on
    within = run(4, profiles, {"node-1"}, failures=failing, max_unhealthy=3)
    assert sorted(pid for pid, _ in within.delete) == ["p0", "p1", "p2"] and within.paused == 0


def test_a_node_the_selector_no_longer_picks_gives_its_profiles_up() -> None:
    profiles = [NodeProfile("old", 0, "node-9", True), NodeProfile("kept", 1, "node-1", True)]
    placed = run(2, profiles, {"node-1"}, unselected=frozenset({"node-9"}))
    assert placed.delete == [("old", "node-9")]
    assert "no longer matches nodeSelector" in placed.why["old"]
    assert placed.create == [(0, "node-1")]
