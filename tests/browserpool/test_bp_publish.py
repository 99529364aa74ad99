"""What a BrowserPool shows the Web UI: its search attributes, summary and details (pure)."""

from __future__ import annotations

from temporalio.common import SearchAttributePair, TypedSearchAttributes

from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec, BrowserPoolStatus
from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.api.v1alpha1 import Condition, ConditionStatus, Phase
from devicepool.workflows.browserpool.publish import (
    details,
    fine,
    initial_search_attributes,
    search_attributes,
    static_summary,
)
from devicepool.workflows.reconciler.search_attributes import (
    KEY_DESIRED,
    KEY_PHASE,
    KEY_PLATFORM,
    KEY_READY,
    updates,
)

T, F = ConditionStatus.TRUE, ConditionStatus.FALSE
SPEC = BrowserPoolSpec(replicas=6, node_selector={"os": "windows"})


def status(**kw: object) -> BrowserPoolStatus:
    return BrowserPoolStatus.model_validate(
        {"phase": "Ready", "readyProfiles": 6, "openProfiles": 6, **kw}
    )


def applied(
    current: TypedSearchAttributes, spec: BrowserPoolSpec, s: BrowserPoolStatus
) -> dict[str, object]:
    """The attributes after the updates are written over `current`."""
    pairs = {p.key.name: p.value for p in current}
    for update in updates(search_attributes(spec, s), current):
        pairs[update.key.name] = update.value
    return pairs


def test_a_pool_starts_with_its_size_nothing_ready_and_phase_pending() -> None:
    start = initial_search_attributes(SPEC)
    assert {p.key.name: p.value for p in start} == {
        "DevicePoolPlatform": "browser",
        "DevicePoolPhase": "Pending",
        "DevicePoolDesired": 6,
        "DevicePoolReady": 0,
    }
    # Only registered attributes (an unregistered one fails the start).
    assert {p.key.name for p in start} <= set(SEARCH_ATTRIBUTES)


def test_only_the_attributes_that_changed_are_written() -> None:
    start = initial_search_attributes(SPEC)
    pending = BrowserPoolStatus(phase=Phase.PENDING)
    assert updates(search_attributes(SPEC, pending), start) == []
    ready = status()
    written = {u.key.name: u.value for u in updates(search_attributes(SPEC, ready), start)}
    assert written == {"DevicePoolPhase": "Ready", "DevicePoolReady": 6}
    now = TypedSearchAttributes(
        [
            SearchAttributePair(KEY_PLATFORM, "browser"),
            SearchAttributePair(KEY_PHASE, "Ready"),
            SearchAttributePair(KEY_DESIRED, 6),
            SearchAttributePair(KEY_READY, 6),
        ]
    )
    assert updates(search_attributes(SPEC, ready), now) == []
    scaled = SPEC.model_copy(update={"replicas": 8})
    assert applied(now, scaled, ready)["DevicePoolDesired"] == 8


def test_a_pool_started_without_attributes_gets_all_of_them() -> None:
    pairs = applied(TypedSearchAttributes([]), SPEC, status(phase="Degraded", readyProfiles=3))
    assert pairs == {
        "DevicePoolPlatform": "browser",
        "DevicePoolPhase": "Degraded",
        "DevicePoolDesired": 6,
        "DevicePoolReady": 3,
    }


def test_the_summary_names_the_nodes_and_what_is_kept() -> None:
    assert static_summary("shop", SPEC) == (
        "BrowserPool **shop**: BitBrowser profiles on nodes `os=windows`, browsers open"
    )
    closed = BrowserPoolSpec.model_validate(
        {"replicas": 2, "open": False, "proxy": {"poolRef": "eu", "sessionTTL": "15m"}}
    )
    assert static_summary("shop", closed) == (
        "BrowserPool **shop**: BitBrowser profiles on any node, kept closed, proxy `eu`"
    )


def cond(type_: str, s: ConditionStatus, reason: str, message: str = "") -> Condition:
    return Condition(type=type_, status=s, reason=reason, message=message)


def test_fine_conditions_are_the_good_status_and_progressing_either_way() -> None:
    assert fine(cond("Ready", T, "Converged"))
    assert not fine(cond("Ready", F, "BelowDesired"))
    assert fine(cond("Progressing", T, "Reconciling"))
    assert fine(cond("Progressing", F, "Stable"))
    assert fine(cond("NodesAvailable", T, "NodesAlive"))
    assert not fine(cond("NodesAvailable", T, "NodesLost"))  # some nodes lost: read it
    assert not fine(cond("NodesAvailable", F, "NoLiveNode"))
    assert fine(cond("RemediationPaused", F, "Healthy"))
    assert not fine(cond("RemediationPaused", T, "TooManyUnhealthy"))
    assert not fine(cond("TeardownBlocked", T, "NodeDown"))
    assert not fine(cond("SomethingNew", T, "Whatever"))


def test_details_show_the_counts_by_node_and_only_the_conditions_not_fine() -> None:
    s = status(
        phase="Degraded",
        readyProfiles=4,
        openProfiles=4,
        lostProfiles=2,
        byNode={"node-2": 4, "node-10": 0},
        conditions=[
            cond("Ready", F, "BelowDesired", "4/6 profiles ready (open)"),
            cond("Progressing", T, "Reconciling"),
            cond("NodesAvailable", T, "NodesLost", "1 live node(s); lost: node-1"),
            cond("RemediationPaused", F, "Healthy"),
        ],
    )
    text = details("shop", SPEC, 3, s)
    assert text.splitlines()[0] == (
        "**shop** · BrowserPool · nodes `os=windows` · browsers open · generation 3"
    )
    assert "```\nphase    Degraded\ndesired  6\nready    4\nopen     4\nlost     2\n```" in text
    assert "**By node**\n\n```\nnode-2   4\nnode-10  0\n```" in text
    assert "- **Ready** False · BelowDesired: 4/6 profiles ready (open)" in text
    assert "- **NodesAvailable** True · NodesLost: 1 live node(s); lost: node-1" in text
    assert "Progressing" not in text and "RemediationPaused" not in text
    assert "|" not in text  # the UI's Markdown renders no tables


def test_details_of_a_fresh_pool_say_nothing_is_placed_and_all_is_fine() -> None:
    text = details("shop", SPEC, 1, BrowserPoolStatus())
    assert "Pending" in text
    assert "no profile placed" in text
    assert text.endswith("**Conditions**\n\nall fine")
    # Written only when it changed: the same status is the same text.
    assert details("shop", SPEC, 1, BrowserPoolStatus()) == text
