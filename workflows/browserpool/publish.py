"""What a BrowserPool shows outside its status query: search attributes, summary, details.

Pure; the shell writes what changed. The keys are DevicePool's, platform `browser`
(docs/browserpools.md, "In the Web UI").
"""

from __future__ import annotations

from temporalio.common import SearchAttributePair, TypedSearchAttributes

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserPoolSpec,
    BrowserPoolStatus,
)
from devicepool.api.names import SA_DESIRED, SA_PHASE, SA_PLATFORM, SA_READY
from devicepool.api.v1alpha1 import Condition, ConditionStatus, Phase
from devicepool.workflows.reconciler.conditions import condition_lines, figure_block
from devicepool.workflows.reconciler.search_attributes import KEYS

__all__ = [
    "BROWSER_PLATFORM",
    "details",
    "fine",
    "initial_search_attributes",
    "search_attributes",
    "static_summary",
]

# The platform of a BrowserPool, in its search attributes and on the pool gauges.
BROWSER_PLATFORM = "browser"

# The status each condition has when all is well (Progressing: either is).
_FINE: dict[str, ConditionStatus] = {
    BrowserConditionType.READY: ConditionStatus.TRUE,
    BrowserConditionType.NODES_AVAILABLE: ConditionStatus.TRUE,
    BrowserConditionType.REMEDIATION_PAUSED: ConditionStatus.FALSE,
    BrowserConditionType.SPEC_REJECTED: ConditionStatus.FALSE,
    BrowserConditionType.TEARDOWN_BLOCKED: ConditionStatus.FALSE,
}
# NodesAvailable stays True while some nodes live and others are lost: the reason says.
_FINE_REASONS: dict[str, str] = {BrowserConditionType.NODES_AVAILABLE: "NodesAlive"}


def _desired(spec: BrowserPoolSpec, status: BrowserPoolStatus) -> int:
    """What the pool keeps: its replicas, nothing once it is being deleted."""
    return 0 if status.phase in (Phase.DELETING, Phase.DELETED) else spec.replicas


def search_attributes(spec: BrowserPoolSpec, status: BrowserPoolStatus) -> dict[str, str | int]:
    """What the pool's search attributes say now, by name (the shell writes what changed)."""
    return {
        SA_PLATFORM: BROWSER_PLATFORM,
        SA_PHASE: status.phase.value,
        SA_DESIRED: _desired(spec, status),
        SA_READY: status.ready_profiles,
    }


def initial_search_attributes(spec: BrowserPoolSpec) -> TypedSearchAttributes:
    """What a BrowserPool starts with: its size, nothing ready, phase Pending."""
    wanted = search_attributes(spec, BrowserPoolStatus(phase=Phase.PENDING))
    return TypedSearchAttributes([SearchAttributePair(KEYS[k], v) for k, v in wanted.items()])


def static_summary(name: str, spec: BrowserPoolSpec) -> str:
    """The Web UI's one line for the pool, fixed at start (the details are live)."""
    selector = ", ".join(f"{k}={v}" for k, v in sorted(spec.node_selector.items()))
    return (
        f"BrowserPool **{name}**: BitBrowser profiles on "
        + (f"nodes `{selector}`" if selector else "any node")
        + (", browsers open" if spec.open else ", kept closed")
        + (f", proxy `{spec.proxy.pool_ref}`" if spec.proxy else "")
    )


def fine(condition: Condition) -> bool:
    """Whether a condition says nothing the operator must read (unknown types: never)."""
    if condition.type == BrowserConditionType.PROGRESSING:
        return True
    good = _FINE.get(condition.type)
    reason = _FINE_REASONS.get(condition.type)
    return condition.status == good and (reason is None or condition.reason == reason)


def details(name: str, spec: BrowserPoolSpec, generation: int, status: BrowserPoolStatus) -> str:
    """The Markdown the Web UI shows on the pool's page, as DevicePool's
    (`workflows/pool/status.py`, `details`), then the profiles by node; only the
    conditions that are not fine."""
    s = status
    figures = [
        ("phase", s.phase.value),
        ("desired", _desired(spec, s)),
        ("ready", s.ready_profiles),
        ("open", s.open_profiles),
        # Those a lease holds (shown while there are any).
        *([("leased", s.leased_devices)] if s.leased_devices else []),
        ("lost", s.lost_profiles),
    ]
    selector = ", ".join(f"{k}={v}" for k, v in sorted(spec.node_selector.items())) or "any"
    lines = [
        f"**{name}** · BrowserPool · nodes `{selector}` · "
        + ("browsers open" if spec.open else "kept closed")
        + f" · generation {generation}",
        "",
        *figure_block(figures),
        "",
        "**By node**",
        "",
    ]
    lines += figure_block(list(s.by_node.items())) if s.by_node else ["no profile placed"]
    troubles = [c for c in s.conditions if not fine(c)]
    lines += ["", "**Conditions**", "", *(condition_lines(troubles) or ["all fine"])]
    return "\n".join(lines)
