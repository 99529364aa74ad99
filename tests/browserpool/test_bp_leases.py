"""A BrowserPool's leases, pure: the plan never takes a leased profile away, a lease's end
replaces a profile after use, and what the kind tells its lease book (issue 39).

No fixture of conftest.py: no server.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserPoolSpec,
    BrowserPoolStatus,
)
from devicepool.workflows.browserpool import leasable
from devicepool.workflows.browserpool.kind import BrowserKind, Outcome
from devicepool.workflows.browserpool.messages import BrowserPoolState
from devicepool.workflows.browserpool.observe import NodeTrouble, Observed, decide
from devicepool.workflows.browserpool.plan import (
    REPLACED_AFTER_USE,
    NodeProfile,
    Placement,
)
from devicepool.workflows.reconciler.lease_records import EndReason
from tests.helpers.browser_plan import place as run
from tests.helpers.leases import T0, ended

NOW = T0
TWO = {"node-1", "node-2"}


def gone(placed: Placement) -> set[str]:
    return {pid for pid, _ in placed.delete}


# ---------------------------------------------------------------------- the plan


def test_a_scale_down_keeps_a_leased_profile_uncounted_until_its_lease_ends() -> None:
    profiles = [NodeProfile(f"p{i}", i, f"node-{i % 2 + 1}", True) for i in range(4)]
    placed = run(1, profiles, TWO, leased={"p2"})
    assert gone(placed) == {"p1", "p3"}  # the unleased surplus goes now
    assert [p.id for p in placed.held] == ["p0"]  # the leased one is not held past replicas
    assert "above replicas 1" in placed.kept["p2"], placed.kept
    assert placed.create == []
    # Its lease ended: the next plan deletes it.
    after = run(1, [p for p in profiles if p.id in {"p0", "p2"}], TWO)
    assert gone(after) == {"p2"} and after.kept == {}


def test_a_scale_to_0_keeps_only_the_leased_profile() -> None:
    profiles = [NodeProfile("p0", 0, "node-1", True), NodeProfile("p1", 1, "node-2", True)]
    placed = run(0, profiles, TWO, leased={"p0"})
    assert placed.delete == [("p1", "node-2")]
    assert placed.held == [] and list(placed.kept) == ["p0"]
    assert placed.open == [] and placed.create == []


def test_a_leased_profile_above_replicas_counts_again_when_replicas_rise() -> None:
    profiles = [NodeProfile("p0", 0, "node-1", True), NodeProfile("p1", 1, "node-2", True)]
    placed = run(2, profiles, TWO, leased={"p1"})
    assert placed.kept == {} and sorted(p.id for p in placed.held) == ["p0", "p1"]


def test_of_two_profiles_for_one_slot_the_leased_one_stays_and_the_other_goes() -> None:
    """Equals (neither a replacement): the leased one holds the slot, the other is not
    billed on while the lease lasts."""
    profiles = [NodeProfile("a", 0, "node-1", True), NodeProfile("b", 0, "node-2", True)]
    assert gone(run(1, profiles, TWO)) == {"b"}  # unleased: `a` wins (the tie-break)
    placed = run(1, profiles, TWO, leased={"b"})
    assert gone(placed) == {"a"} and [p.id for p in placed.held] == ["b"]
    assert placed.kept == {}


def test_a_leased_replacement_stays_when_its_original_serves_again() -> None:
    """The original wins its slot back (cookies), but the replacement's holder keeps it."""
    profiles = [NodeProfile("orig", 0, "node-1", True), NodeProfile("repl", 0, "node-2", True)]
    unleased = run(1, profiles, TWO, replacements=("repl",))
    assert gone(unleased) == {"repl"}
    placed = run(1, profiles, TWO, replacements=("repl",), leased={"repl"})
    assert placed.delete == [] and [p.id for p in placed.held] == ["orig"]
    assert "original profile serves again" in placed.kept["repl"]


def test_a_leased_profile_on_an_unselected_node_stays_and_its_slot_is_held_again() -> None:
    profiles = [NodeProfile("old", 0, "node-9", True), NodeProfile("p1", 1, "node-1", True)]
    placed = run(2, profiles, {"node-1"}, unselected=frozenset({"node-9"}), leased={"old"})
    assert placed.delete == []
    assert "no longer matches nodeSelector" in placed.kept["old"]
    assert placed.create == [(0, "node-1")]


def test_a_leased_profile_that_keeps_failing_to_open_is_not_deleted() -> None:
    profiles = [NodeProfile("bad", 0, "node-1", False), NodeProfile("ok", 1, "node-2", True)]
    placed = run(2, profiles, TWO, failures={"bad": 3}, leased={"bad"})
    assert placed.delete == [] and placed.create == []
    assert sorted(p.id for p in placed.held) == ["bad", "ok"]  # it still holds its slot
    assert "failed to open 3 times" in placed.kept["bad"]


def test_a_profile_used_and_released_with_replace_is_deleted_and_its_slot_made_again() -> None:
    profiles = [NodeProfile("p0", 0, "node-1", True), NodeProfile("p1", 1, "node-2", True)]
    placed = run(2, profiles, TWO, used=("p0",))
    assert placed.delete == [("p0", "node-1")]
    assert placed.why["p0"] == REPLACED_AFTER_USE == "replaced after use"
    assert placed.create == [(0, "node-1")]
    # Leased again (it cannot be: it is no candidate), it would stay.
    assert run(2, profiles, TWO, used=("p0",), leased={"p0"}).delete == []


def test_a_used_profile_on_an_unreachable_node_waits_for_its_node() -> None:
    profiles = [NodeProfile("p0", 0, "node-1", True), NodeProfile("p1", 1, "node-2", True)]
    placed = run(2, profiles, TWO, unreachable={"node-1"}, used=("p0",))
    assert placed.delete == [] and placed.create == []


def test_without_leases_the_plan_is_what_it_was() -> None:
    """No lease, nothing used: the same placement as before leases (recorded histories
    replay the same commands)."""
    profiles = [
        NodeProfile("a", 0, "node-1", False),
        NodeProfile("b", 0, "node-2", True),
        NodeProfile("c", 3, "node-2", True),
        NodeProfile("d", 1, "node-9", True),
    ]
    placed = run(2, profiles, TWO, unselected=frozenset({"node-9"}), failures={"b": 1})
    assert gone(placed) == {"a", "c", "d"} and placed.kept == {}
    assert [p.id for p in placed.held] == ["b"] and placed.create == [(1, "node-1")]


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.integers(0, 8),
    existing=st.lists(
        st.tuples(st.integers(0, 10), st.integers(0, 3), st.booleans(), st.booleans()),
        max_size=14,
    ),
    failing=st.sets(st.integers(0, 13)),
    unselected=st.booleans(),
)
def test_no_leased_profile_is_ever_deleted_and_each_slot_is_held_once(
    replicas: int,
    existing: list[tuple[int, int, bool, bool]],
    failing: set[int],
    unselected: bool,
) -> None:
    alive = {"n0", "n1", "n2"}
    nodes = ["n0", "n1", "n2", "n9"]  # n9: lost, or no longer selected
    profiles = [
        NodeProfile(f"p{k}", slot, nodes[node], is_open)
        for k, (slot, node, is_open, _) in enumerate(existing)
    ]
    leased = {f"p{k}" for k, (*_, is_leased) in enumerate(existing) if is_leased}
    placed = run(
        replicas,
        profiles,
        alive,
        leased=leased,
        failures={f"p{k}": 3 for k in failing},
        unselected=frozenset({"n9"}) if unselected else frozenset(),
        lost=frozenset() if unselected else frozenset({"n9"}),
    )
    assert not gone(placed) & leased
    assert set(placed.kept) <= leased and not set(placed.kept) & gone(placed)
    held_ids = [p.id for p in placed.held]
    # Never counted beyond replicas, never deleted and held at once.
    after = [p.slot for p in placed.held if p.id not in gone(placed)]
    after += [slot for slot, _ in placed.create]
    assert sorted(after) == list(range(replicas)), (placed, leased)
    assert len(held_ids) == len(set(held_ids))
    # What would go without the leases stays: kept, or holding its slot.
    free = run(
        replicas,
        profiles,
        alive,
        failures={f"p{k}": 3 for k in failing},
        unselected=frozenset({"n9"}) if unselected else frozenset(),
        lost=frozenset() if unselected else frozenset({"n9"}),
    )
    assert gone(free) & leased <= set(placed.kept) | set(held_ids), (placed, free)


# ---------------------------------------------------------------------- what the book is told


def seen_of(
    profiles: list[NodeProfile],
    *,
    alive: frozenset[str] = frozenset(TWO),
    lost: frozenset[str] = frozenset(),
    failed: frozenset[str] = frozenset(),
    troubles: dict[str, NodeTrouble] | None = None,
    replicas: int = 2,
) -> Observed:
    return Observed(
        spec=BrowserPoolSpec(replicas=replicas),
        now=NOW,
        generation=1,
        profiles=tuple(profiles),
        alive=alive,
        lost=lost,
        failed=failed,
        troubles=troubles or {},
    )


def test_a_lost_nodes_profiles_are_no_members_and_their_leases_end() -> None:
    profiles = [NodeProfile("p0", 0, "node-1", True), NodeProfile("p1", 1, "node-2", True)]
    seen = seen_of(profiles, alive=frozenset({"node-2"}), lost=frozenset({"node-1"}))
    assert leasable.members(seen) == {"p1"}
    # A node that beats but whose Local API is silent past nodeLostAfterSeconds: its
    # profiles are counted lost and made again elsewhere, so their leases end too.
    silent = NodeTrouble("NodeUnreachable", "timeout", since=NOW - timedelta(minutes=5), lost=True)
    seen = seen_of(profiles, failed=frozenset({"node-1"}), troubles={"node-1": silent})
    assert leasable.members(seen) == {"p1"}


def test_no_listing_answered_is_no_knowledge_and_ends_no_lease() -> None:
    """Every listed node failed this pass: the pass saw no profile, which says nothing of
    them (a lease ended for it would be a stale observation taking a profile away)."""
    seen = seen_of([], failed=frozenset(TWO))
    assert leasable.members(seen) is None
    # One answered: a listing shows every profile of the account.
    one = seen_of([NodeProfile("p0", 0, "node-1")], failed=frozenset({"node-2"}))
    assert leasable.members(one) == {"p0"}
    # No live node at all: the pool's profiles are on lost nodes (or none).
    assert leasable.members(seen_of([], alive=frozenset())) == set()


def test_a_profile_kept_for_its_lease_or_used_is_no_candidate() -> None:
    profiles = [NodeProfile(f"p{i}", i, "node-1", True) for i in range(3)]
    spec = BrowserPoolSpec(replicas=3)
    seen = seen_of(profiles, replicas=3)
    placed = run(3, profiles, TWO, failures={"p1": 3}, leased={"p1"})
    assert "p1" in placed.kept
    ids = [c.id for c in leasable.candidates(spec, seen, placed, {}, used=["p2"])]
    assert ids == ["p0"]


def test_a_release_of_a_held_profile_needs_no_pass() -> None:
    assert leasable.after_leases([ended("p0")], replace=False, kept={}, used=[]) == ([], False)


def test_the_end_of_a_lease_that_kept_a_profile_makes_a_pass_due() -> None:
    kept = {"p3": "slot 3 is above replicas 2"}
    assert leasable.after_leases([ended("p3")], replace=False, kept=kept, used=[]) == ([], True)
    idle = ended("p3", EndReason.IDLE)
    assert leasable.after_leases([idle], replace=False, kept=kept, used=[]) == ([], True)


def test_a_release_with_replace_marks_the_profile_used_once() -> None:
    assert leasable.after_leases([ended("p0")], replace=True, kept={}, used=[]) == (["p0"], True)
    assert leasable.after_leases([ended("p0")], replace=True, kept={}, used=["p0"]) == ([], False)
    # A lost profile, or the pool going: nothing to replace; an offer never claimed: its
    # holder never had it (a new profile would cost a create and the slot's cookies).
    for reason in (EndReason.DEVICE_LOST, EndReason.POOL_DELETED, EndReason.UNCLAIMED):
        lost = ended("p0", reason)
        assert leasable.after_leases([lost], replace=True, kept={}, used=[]) == ([], False)


def test_used_profiles_are_forgotten_once_no_listing_shows_them() -> None:
    profiles = [NodeProfile("p0", 0, "node-1"), NodeProfile("p1", 1, "node-2")]
    assert leasable.forget_used(["p0", "x9", "p1"], profiles) == ["p0", "p1"]


def test_what_the_status_says_of_profiles_kept_for_their_leases() -> None:
    kept = {"p3": "slot 3 is above replicas 2", "p2": "slot 2 is above replicas 2"}
    said = leasable.kept_message(kept)
    assert said == (
        "2 profile(s) kept for their leases, deleted once released: "
        "p2 (slot 2 is above replicas 2), p3 (slot 3 is above replicas 2)"
    )
    assert leasable.kept_message({}) == ""


def test_the_status_says_progressing_while_profiles_are_kept_for_their_leases() -> None:
    kept = {"p1": "slot 1 is above replicas 1"}
    status = leasable.kept_status(BrowserPoolStatus(), kept, now=NOW, generation=3)
    progressing = status.condition(BrowserConditionType.PROGRESSING)
    assert progressing is not None
    assert (progressing.status.value, progressing.reason) == ("True", "LeasesHeld")
    assert progressing.message == leasable.kept_message(kept)
    assert leasable.kept_status(status, {}, now=NOW, generation=3) is status


def test_decide_passes_the_leases_and_the_used_profiles_to_the_plan() -> None:
    profiles = [NodeProfile("p0", 0, "node-1", True), NodeProfile("p1", 1, "node-2", True)]
    seen = seen_of(profiles, replicas=0)
    placed = decide(seen, failures={}, failure_limit=3, replacements=[], leased={"p0"}, used=[])
    assert placed.delete == [("p1", "node-2")] and list(placed.kept) == ["p0"]
    seen = seen_of(profiles)
    placed = decide(seen, failures={}, failure_limit=3, replacements=[], leased=set(), used=["p1"])
    assert placed.why == {"p1": REPLACED_AFTER_USE}


# ---------------------------------------------------------------------- the kind


class FakeHost(SimpleNamespace):
    """The shell as `BrowserKind.leases_ended` sees it: state, `dirty`, events."""

    def __init__(self) -> None:
        super().__init__(
            s=BrowserPoolState(),
            spec=BrowserPoolSpec(replicas=2),
            dirty=False,
            events=[],
            name="bp-l",
        )

    def happened(self, *happened: Any) -> None:
        self.events.extend(happened)


def kind_after(placement: Placement) -> tuple[BrowserKind, FakeHost]:
    host = FakeHost()
    kind = BrowserKind(host)  # type: ignore[arg-type]
    kind._last = Outcome(seen_of([]), placement)
    return kind, host


def test_the_kind_asks_for_a_pass_only_when_the_end_changes_the_plan() -> None:
    kind, host = kind_after(Placement(kept={"p3": "slot 3 is above replicas 2"}))
    kind.leases_ended([ended("p0")], replace=False)
    assert host.dirty is False and host.events == []
    kind.leases_ended([ended("p3")], replace=False)
    assert host.dirty is True


def test_the_kind_carries_the_profiles_to_replace_and_says_so() -> None:
    kind, host = kind_after(Placement())
    kind.leases_ended([ended("p0"), ended("p1", EndReason.DEVICE_LOST)], replace=True)
    assert host.dirty is True and host.s.replace_after_use == ["p0"]
    assert [(e.reason, e.message) for e in host.events] == [
        ("ReplaceRequested", "p0 replaced after use (lease released)")
    ]
    # Carried across continue-as-new, and defaulted for a state that had none.
    state = BrowserPoolState.model_validate(host.s.model_dump(mode="json", by_alias=True))
    assert state.replace_after_use == ["p0"]
    assert BrowserPoolState.model_validate({}).replace_after_use == []


def test_profiles_kept_for_their_leases_are_not_counted() -> None:
    profiles = [NodeProfile(f"p{i}", i, "node-1", True) for i in range(3)]
    placed = run(1, profiles, {"node-1"}, leased={"p1", "p2"})
    assert placed.by_node() == {"node-1": 1}
    assert sorted(placed.kept) == ["p1", "p2"] and placed.delete == []


def test_before_any_node_is_seen_no_label_is_known_to_be_missing() -> None:
    # A new run's first look, or every selected node silent: a node label may yet exist.
    spec = BrowserPoolSpec(replicas=2)
    assert leasable.problem({"gpu": "yes"}, spec=spec, seen=None, node_labels={}) is None
    known = {"node-1": {"gpu": "no"}}
    refused = leasable.problem({"color": "red"}, spec=spec, seen=None, node_labels=known)
    assert refused is not None and "can never match" in refused
    assert leasable.problem({"gpu": "yes"}, spec=spec, seen=None, node_labels=known) is None


# ---------------------------------------------------------------------- autoscaled


def autoscaled_kind(replicas: int, seen: Observed) -> tuple[BrowserKind, FakeHost]:
    """A kind whose host's spec is autoscaled at `replicas`, and `seen` this pass's look."""
    host = FakeHost()
    host.spec = BrowserPoolSpec.model_validate(
        {"replicas": replicas, "autoscale": {"maxReplicas": 20}}
    )
    host.s.generation = seen.generation
    host.settings = SimpleNamespace(failure_streak_limit=3)
    kind = BrowserKind(host)  # type: ignore[arg-type]
    kind._seeing = seen
    return kind, host


def test_the_pass_plans_from_the_size_the_autoscaler_wrote_in_it() -> None:
    """The autoscaler writes `replicas` after the pass looked: its plan takes that size (not
    the next pass's, a resync later, on a profile that may have been leased and given back
    in between)."""
    profiles = [NodeProfile(f"p{i}", i, "node-1", True) for i in range(4)]
    kind, host = autoscaled_kind(3, seen_of(profiles, replicas=4))
    # Looked at 4; the autoscaler wrote 3 after the look.
    seen = replace(seen_of(profiles), spec=host.spec.model_copy(update={"replicas": 4}))
    placed = kind.decide(seen)
    assert placed is not None and placed.delete == [("p3", "node-1")]
    # A change applied since the look (another generation) is the next pass's.
    host.s.generation += 1
    later = kind.decide(seen)
    assert later is not None and later.delete == []


def test_the_autoscaler_judges_the_members_of_this_passs_look() -> None:
    """Not the last pass's: a profile made since (slot 3) is the first a scale-down takes,
    and is judged before the plan drops its slot."""
    old = seen_of([NodeProfile(f"p{i}", i, "node-1", True) for i in range(3)], replicas=3)
    now = seen_of([NodeProfile(f"p{i}", i, "node-1", True) for i in range(4)], replicas=4)
    kind, _ = autoscaled_kind(4, now)
    kind._last = Outcome(old, Placement())
    assert kind.scale_down_order() == ["p3", "p2", "p1", "p0"]
    assert kind.autoscale_members() == {"p0", "p1", "p2", "p3"}


def test_tickets_no_selected_node_can_serve_are_no_demand() -> None:
    """A new profile carries its node's labels: a ticket for a value no selected node has
    grows the autoscaled pool by none."""
    nodes = {"node-1": {"os": "linux"}, "node-2": {"os": "linux"}}
    assert not leasable.grows_for({"os": "mac"}, node_labels=nodes)
    assert leasable.grows_for({"os": "linux", "node": "node-2"}, node_labels=nodes)
    assert not leasable.grows_for({"node": "node-9"}, node_labels=nodes)
    # No node seen yet: nothing is known to refuse.
    assert leasable.grows_for({"os": "mac"}, node_labels={})
