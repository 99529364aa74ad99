"""A BrowserPool's status after a pass and at the end of teardown (workflows/browserpool/status.py).

Pure, no server. Issue 37 items 10, 14 and 15: a node that cannot serve is said, never
hidden behind the last good status; a deleted pool does not say Ready, 8 desired.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec, BrowserPoolStatus
from devicepool.api.v1alpha1 import Phase
from devicepool.client._waits import cannot_fix
from devicepool.workflows.browserpool.observe import Observed, decide
from devicepool.workflows.browserpool.plan import NodeProfile, Placement
from devicepool.workflows.browserpool.status import (
    LOCAL_API_REFUSED,
    NODE_UNREACHABLE,
    ConfigProblem,
    NodeTrouble,
    Published,
    mixed_status,
    publish,
    teardown_status,
)

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
SPEC = BrowserPoolSpec(replicas=4)


def published(
    seen: Observed, placement: Placement, *, hold: ConfigProblem | None = None
) -> Published:
    """What a pass publishes once it acted on `placement` (failure limit 3, generation 2)."""
    return publish(
        BrowserPoolStatus(),
        seen,
        placement,
        config_problem=hold,
        failure_limit=3,
        node_lost_after_seconds=120.0,
        now=NOW,
        generation=2,
    )


def passed(seen: Observed) -> BrowserPoolStatus:
    """The status after a pass with no failures."""
    return published(seen, decide(seen, failures={}, failure_limit=3, replacements=[])).status


def after(profiles: list[NodeProfile], troubles: dict[str, NodeTrouble]) -> BrowserPoolStatus:
    failed = frozenset(troubles)
    seen = Observed(
        spec=SPEC,
        now=NOW,
        profiles=tuple(profiles),
        alive=frozenset({"node-1", "node-2"}),
        failed=failed,
        troubles=troubles,
    )
    return passed(seen)


def conditions(s: BrowserPoolStatus) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status.value, c.reason, c.message) for c in s.conditions}


PROFILES = [
    NodeProfile("a0", 0, "node-1", False),
    NodeProfile("a1", 1, "node-1", False),
    NodeProfile("b0", 2, "node-2", True),
    NodeProfile("b1", 3, "node-2", True),
]


def test_a_node_whose_key_is_refused_is_named_and_the_pool_is_not_ready() -> None:
    trouble = NodeTrouble(LOCAL_API_REFUSED, "unauthenticated (HTTP 403): key refused", NOW)
    s = after(PROFILES, {"node-1": trouble})
    cond = conditions(s)
    assert cond["NodesAvailable"][:2] == ("False", "LocalApiRefused")
    assert "node node-1's Local API refuses its key" in cond["NodesAvailable"][2]
    assert "unauthenticated (HTTP 403)" in cond["NodesAvailable"][2]
    assert "2 profile(s) there wait for it" in cond["NodesAvailable"][2]
    assert cond["Ready"][:2] == ("False", "LocalApiRefused")
    assert cond["Ready"][2].startswith("2/4 profiles ready; ")
    assert (s.phase, s.desired_replicas, s.ready_profiles) == (Phase.DEGRADED, 4, 2)
    assert s.observed_generation == 2 and s.last_reconciled == NOW


def test_a_node_lost_to_silence_is_still_said_once_the_pool_is_whole_again() -> None:
    trouble = NodeTrouble(NODE_UNREACHABLE, "server_error (HTTP 503)", NOW, lost=True)
    held = [
        *PROFILES,
        NodeProfile("c0", 0, "node-2", True),
        NodeProfile("c1", 1, "node-2", True),
    ]
    s = after(held, {"node-1": trouble})
    cond = conditions(s)
    assert cond["Ready"][:2] == ("True", "Converged")
    assert cond["NodesAvailable"][:2] == ("False", "NodeUnreachable")
    assert "counted lost" in cond["NodesAvailable"][2]
    assert s.lost_profiles == 2 and s.by_node == {"node-2": 4}


def test_no_trouble_says_nodes_alive() -> None:
    s = after([*PROFILES[2:], NodeProfile("c0", 0, "node-1", True)], {})
    assert conditions(s)["NodesAvailable"][:2] == ("True", "NodesAlive")


def test_a_deleted_pool_says_deleted_not_ready_and_holds_nothing() -> None:
    ready = BrowserPoolStatus.model_validate(
        {
            "phase": "Ready",
            "desiredReplicas": 8,
            "readyProfiles": 8,
            "openProfiles": 8,
            "byNode": {"node-1": 8},
            "profileIds": [f"p{i}" for i in range(8)],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Converged"},
                {"type": "TeardownBlocked", "status": "True", "reason": "NodeDown"},
            ],
        }
    )
    deleting = teardown_status(ready, done=False, now=NOW, generation=3)
    cond = conditions(deleting)
    assert deleting.phase == Phase.DELETING and deleting.desired_replicas == 0
    assert cond["Ready"][:2] == ("False", "Deleting")
    deleted = teardown_status(deleting, done=True, now=NOW + timedelta(seconds=5), generation=3)
    cond = conditions(deleted)
    assert deleted.phase == Phase.DELETED
    assert cond["Ready"][:2] == ("False", "Deleted")
    assert cond["Progressing"][:2] == ("False", "Deleted")
    assert cond["TeardownBlocked"][:2] == ("False", "Deleted")
    assert (deleted.desired_replicas, deleted.ready_profiles, deleted.open_profiles) == (0, 0, 0)
    assert deleted.by_node == {} and deleted.profile_ids == []


def test_a_deleted_pools_search_attributes_and_details_desire_nothing() -> None:
    from temporalio.common import TypedSearchAttributes

    from devicepool.workflows.browserpool.publish import details, search_attributes
    from devicepool.workflows.reconciler.search_attributes import updates

    ready = BrowserPoolStatus.model_validate(
        {"phase": "Ready", "desiredReplicas": 8, "readyProfiles": 8, "openProfiles": 8}
    )
    deleted = teardown_status(ready, done=True, now=NOW, generation=3)
    spec = BrowserPoolSpec(replicas=8)
    written = {
        u.key.name: u.value
        for u in updates(search_attributes(spec, deleted), TypedSearchAttributes.empty)
    }
    assert written["DevicePoolPhase"] == "Deleted"
    assert (written["DevicePoolDesired"], written["DevicePoolReady"]) == (0, 0), written
    text = details("shop", spec, 3, deleted)
    assert "desired  0" in text, text


def _with_spare(trouble: NodeTrouble, held: list[NodeProfile]) -> BrowserPoolStatus:
    """node-2 holds `held`; node-3, whose listing failed (`trouble`), holds nothing of the
    pool; replicas 4, so node-2 creates what is missing this pass."""
    seen = Observed(
        spec=SPEC,
        now=NOW,
        profiles=tuple(held),
        alive=frozenset({"node-2", "node-3"}),
        failed=frozenset({"node-3"}),
        troubles={"node-3": trouble},
    )
    assert decide(seen, failures={}, failure_limit=3, replacements=[]).create
    return passed(seen)


def test_a_refused_spare_node_does_not_stop_a_pool_that_converges_elsewhere() -> None:
    """Review of issue 37, defect 6: a spare node whose key is refused (holding nothing),
    and a scale 3 -> 4 that node-2 creates: Ready said LocalApiRefused, and `scale --wait`
    stopped at once (PoolBlocked). Ready says BelowDesired; NodesAvailable names node-3."""
    refused = NodeTrouble(LOCAL_API_REFUSED, "unauthenticated (HTTP 403)", NOW)
    held = [NodeProfile(f"p{i}", i, "node-2", True) for i in range(3)]
    for trouble in (refused, NodeTrouble(LOCAL_API_REFUSED, "unauthenticated", NOW, lost=True)):
        s = _with_spare(trouble, held)
        cond = conditions(s)
        assert cond["Ready"][:2] == ("False", "BelowDesired"), cond
        assert cond["NodesAvailable"][:2] == ("False", "LocalApiRefused"), cond
        assert "node-3" in cond["NodesAvailable"][2]
        # What `scale --wait` stops at (`CANNOT_FIX`): nothing.
        assert cannot_fix(s.to_json_dict(), 2) is None


# Issue 38: the status is a pure function of the pass's observed value and decision
# (`publish`). It was 103 lines of the workflow (`_publish`) reading the pass's locals, the
# carried state and the clock; the rows of the `devices` query were built there too.


def test_the_rows_say_which_profiles_are_held_lost_waiting_or_leaving() -> None:
    seen = Observed(
        spec=BrowserPoolSpec(replicas=2, open=False),
        now=NOW,
        profiles=(
            NodeProfile("h0", 0, "node-1"),
            NodeProfile("w1", 1, "node-2"),
            NodeProfile("l0", 0, "node-3"),
            NodeProfile("x5", 5, "node-1"),
        ),
        alive=frozenset({"node-1", "node-2"}),
        lost=frozenset({"node-3"}),
        failed=frozenset({"node-2"}),
        troubles={"node-2": NodeTrouble(NODE_UNREACHABLE, "no answer in 15s", NOW)},
    )
    placement = decide(seen, failures={}, failure_limit=3, replacements=[])
    out = published(seen, placement)
    assert {r.id: r.state for r in out.rows} == {
        "h0": "held",
        "w1": "waiting",
        "l0": "lost",
        "x5": "leaving",
    }
    s = out.status
    assert (s.phase, s.ready_profiles, s.lost_profiles) == (Phase.DEGRADED, 1, 1)
    assert conditions(s)["Ready"][:2] == ("False", "NodeUnreachable")
    assert conditions(s)["Progressing"][:2] == ("True", "Reconciling")


def test_a_node_lost_to_silence_is_counted_lost_in_the_rows_and_said_in_nodes() -> None:
    """A live node past nodeLostAfterSeconds without an answer: its profiles are lost, held
    elsewhere; NodesAvailable names the node (its trouble), not "NodesLost"."""
    seen = Observed(
        spec=BrowserPoolSpec(replicas=1, open=False),
        now=NOW,
        profiles=(NodeProfile("p0", 0, "node-1"),),
        alive=frozenset({"node-1", "node-2"}),
        failed=frozenset({"node-1"}),
        troubles={"node-1": NodeTrouble(NODE_UNREACHABLE, "no answer", NOW, lost=True)},
    )
    placement = decide(seen, failures={}, failure_limit=3, replacements=[])
    assert placement.create == [(0, "node-2")]
    out = published(seen, placement)
    assert [r.state for r in out.rows] == ["lost"]
    assert conditions(out.status)["NodesAvailable"][:2] == ("False", "NodeUnreachable")
    assert out.status.phase == Phase.DEGRADED


def test_a_config_hold_and_too_many_failures_are_said_by_ready_and_remediation() -> None:
    seen = Observed(
        spec=BrowserPoolSpec.model_validate({"replicas": 3, "health": {"maxUnhealthy": 1}}),
        now=NOW,
        profiles=(NodeProfile("p0", 0, "node-1"), NodeProfile("p1", 1, "node-1")),
        alive=frozenset({"node-1"}),
    )
    placement = decide(seen, failures={"p0": 3, "p1": 3}, failure_limit=3, replacements=[])
    assert placement.paused == 2 and not placement.delete
    hold = ConfigProblem("UnknownProxyPool", "node node-1: no proxy pool gw", 60.0)
    s = published(seen, placement, hold=hold).status
    cond = conditions(s)
    assert cond["Ready"][:2] == ("False", "UnknownProxyPool")
    assert "tried again every 60s" in cond["Ready"][2]
    assert cond["RemediationPaused"][:2] == ("True", "TooManyUnhealthy")
    assert "2 profiles failed to open 3 times" in cond["RemediationPaused"][2]


def test_the_status_says_the_limits_the_pool_runs_by_as_numbers() -> None:
    """Issue 43, item 11: `describe` said "the worker's" for failureStreakLimit and had no
    nodeLostAfterSeconds. The status carries the values in force (the spec's limit, else the
    worker's), kept while the pool holds or deletes; a status from before them has none."""
    seen = Observed(spec=SPEC, now=NOW, profiles=tuple(PROFILES), alive=frozenset({"node-1"}))
    s = passed(seen)
    assert (s.failure_streak_limit, s.node_lost_after_seconds) == (3, 120.0)
    said = s.to_json_dict()
    assert (said["failureStreakLimit"], said["nodeLostAfterSeconds"]) == (3, 120.0)
    held, _ = mixed_status(s, {"node-1": "a", "node-2": "b"}, now=NOW, generation=2)
    deleting = teardown_status(s, done=False, now=NOW, generation=2)
    for kept in (held, deleting):
        assert (kept.failure_streak_limit, kept.node_lost_after_seconds) == (3, 120.0)
    older = BrowserPoolStatus.model_validate({"phase": "Ready"})
    assert (older.failure_streak_limit, older.node_lost_after_seconds) == (None, None)
    assert "failureStreakLimit" not in older.to_json_dict()
