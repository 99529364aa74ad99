"""A BrowserPool's status after a pass, and at the end of its teardown: pure, no Temporal.

`pass_status` turns what a pass saw and decided (`plan.Placement`, the nodes, the
nodes whose Local API did not answer) into the status and its conditions;
`teardown_status` is the status while the pool deletes its profiles and once
it has (tests/browserpool/test_bp_status.py). A node that beats but whose Local
API refuses or does not answer is never hidden behind the last good status:
`NodesAvailable=False` names it with the cause, and `Ready` is False while the
profiles it holds cannot be counted (its reason the node's trouble while they wait
there or nothing else moves; else `BelowDesired`, as the pool converges elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserPoolSpec,
    BrowserPoolStatus,
)
from devicepool.api.v1alpha1 import ConditionStatus, Phase
from devicepool.workflows.browserpool.plan import Placement
from devicepool.workflows.pool.status import ConditionUpdate, set_condition

__all__ = [
    "LOCAL_API_REFUSED",
    "NODE_UNREACHABLE",
    "NodeTrouble",
    "pass_status",
    "teardown_status",
]

TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE
# The reasons a live node cannot be used: its Local API refuses this node's key (a
# configuration error: waiting does not fix it), or it does not answer (or the node
# worker took no call).
LOCAL_API_REFUSED = "LocalApiRefused"
NODE_UNREACHABLE = "NodeUnreachable"


@dataclass(frozen=True)
class NodeTrouble:
    """A live node whose listing failed this pass: why, and since when it has not answered."""

    reason: str
    cause: str
    since: datetime
    # Silent past `nodeLostAfterSeconds`: its profiles are counted lost and held elsewhere.
    lost: bool = False


@dataclass(frozen=True)
class ConfigProblem:
    reason: str
    message: str
    retry_seconds: float


def pass_status(
    status: BrowserPoolStatus,
    *,
    spec: BrowserPoolSpec,
    placement: Placement,
    alive: Set[str],
    lost: Set[str],
    troubles: Mapping[str, NodeTrouble],
    config_problem: ConfigProblem | None,
    failure_limit: int,
    now: datetime,
    generation: int,
) -> BrowserPoolStatus:
    """The status after a pass (`alive`: live selected nodes, the troubled ones included;
    `lost`: silent ones; `troubles`: live nodes whose Local API did not answer)."""
    held = placement.held
    open_ = sum(1 for p in held if p.open)
    ready = open_ if spec.open else len(held)
    usable = set(alive) - {n for n, t in troubles.items() if t.lost}
    working = bool(placement.create or placement.delete or placement.open)
    if ready >= spec.replicas and not placement.delete:
        phase = Phase.READY
    elif placement.delete and ready >= spec.replicas:
        phase = Phase.SCALING_DOWN
    elif not usable or placement.lost or troubles:
        phase = Phase.DEGRADED
    else:
        phase = Phase.PROVISIONING
    status = status.model_copy(
        update={
            "phase": phase,
            "desired_replicas": spec.replicas,
            "ready_profiles": ready,
            "open_profiles": open_,
            "lost_profiles": len(placement.lost),
            "by_node": placement.by_node(),
            "profile_ids": sorted(p.id for p in held),
            "last_reconciled": now,
            "observed_generation": generation,
        }
    )
    selector = ", ".join(f"{k}={v}" for k, v in sorted(spec.node_selector.items())) or "any"
    trouble = _trouble(troubles, placement, spec)
    if ready >= spec.replicas:
        ready_cond = ConditionUpdate(BrowserConditionType.READY, TRUE, "Converged")
    elif config_problem is not None:
        ready_cond = ConditionUpdate(
            BrowserConditionType.READY,
            FALSE,
            config_problem.reason,
            f"{config_problem.message} — creating held, tried again every "
            f"{config_problem.retry_seconds:g}s",
        )
    elif trouble is not None and (placement.waiting or not working):
        # Only while the troubled nodes hold what is missing, or nothing else moves: a
        # refused spare, or a lost node being replaced elsewhere, is NodesAvailable's.
        ready_cond = ConditionUpdate(
            BrowserConditionType.READY,
            FALSE,
            trouble.reason,
            f"{ready}/{spec.replicas} profiles ready; {trouble.message}",
        )
    else:
        ready_cond = ConditionUpdate(
            BrowserConditionType.READY,
            FALSE,
            "NoNodes" if not alive else "BelowDesired",
            f"{ready}/{spec.replicas} profiles ready" + (" (open)" if spec.open else ""),
        )
    lost_note = (
        f"; lost: {', '.join(sorted(lost))} (its profiles are replaced elsewhere)" if lost else ""
    )
    live = f"{len(alive)} live node(s) match nodeSelector ({selector})"
    if trouble is not None:
        nodes_cond = ConditionUpdate(
            BrowserConditionType.NODES_AVAILABLE, FALSE, trouble.reason, trouble.message
        )
    elif not alive:
        nodes_cond = ConditionUpdate(
            BrowserConditionType.NODES_AVAILABLE,
            FALSE,
            "NoLiveNode",
            f"no live node worker matches nodeSelector ({selector}){lost_note}",
        )
    elif lost:
        nodes_cond = ConditionUpdate(
            BrowserConditionType.NODES_AVAILABLE, TRUE, "NodesLost", live + lost_note
        )
    else:
        nodes_cond = ConditionUpdate(BrowserConditionType.NODES_AVAILABLE, TRUE, "NodesAlive", live)
    conditions = [
        ready_cond,
        ConditionUpdate(
            BrowserConditionType.PROGRESSING,
            TRUE if working else FALSE,
            "Reconciling" if working else "Stable",
        ),
        nodes_cond,
        ConditionUpdate(
            BrowserConditionType.REMEDIATION_PAUSED,
            TRUE,
            "TooManyUnhealthy",
            f"{placement.paused} profiles failed to open {failure_limit} times in a "
            f"row, more than maxUnhealthy ({spec.health.max_unhealthy}): none is deleted "
            "until fewer fail (a node or the account is likely the trouble)",
        )
        if placement.paused
        else ConditionUpdate(BrowserConditionType.REMEDIATION_PAUSED, FALSE, "Healthy"),
    ]
    for cond in conditions:
        status = set_condition(status, cond, now=now, generation=generation)
    return status


@dataclass(frozen=True)
class _Said:
    reason: str
    message: str


def _trouble(
    troubles: Mapping[str, NodeTrouble], placement: Placement, spec: BrowserPoolSpec
) -> _Said | None:
    """One reason and one message for every troubled node (a refused key first)."""
    if not troubles:
        return None
    refused = any(t.reason == LOCAL_API_REFUSED for t in troubles.values())
    waiting: dict[str, int] = {}
    for p in placement.waiting:
        waiting[p.node] = waiting.get(p.node, 0) + 1
    parts = []
    for node, t in sorted(troubles.items()):
        what = "refuses its key" if t.reason == LOCAL_API_REFUSED else "does not answer"
        held = (
            "its profiles are counted lost and held elsewhere"
            if t.lost
            else f"{waiting.get(node, 0)} profile(s) there wait for it"
        )
        parts.append(f"node {node}'s Local API {what} ({t.cause}); {held}")
    return _Said(LOCAL_API_REFUSED if refused else NODE_UNREACHABLE, "; ".join(parts))


def teardown_status(
    status: BrowserPoolStatus, *, done: bool, now: datetime, generation: int
) -> BrowserPoolStatus:
    """The status while the pool deletes its profiles (`done`: once every one is gone).

    Nothing is served any more: `Ready` is False (`Deleting`, then `Deleted`), nothing is
    desired, and once done nothing is held (no count of profiles that are gone)."""
    reason = "Deleted" if done else "Deleting"
    update: dict[str, object] = {
        "phase": Phase.DELETED if done else Phase.DELETING,
        "desired_replicas": 0,
        "last_reconciled": now,
    }
    if done:
        update |= {
            "ready_profiles": 0,
            "open_profiles": 0,
            "lost_profiles": 0,
            "by_node": {},
            "profile_ids": [],
        }
    status = status.model_copy(update=update)
    conditions = [
        ConditionUpdate(
            BrowserConditionType.READY,
            FALSE,
            reason,
            "every profile was closed and deleted" if done else "deleting every profile",
        ),
        ConditionUpdate(BrowserConditionType.PROGRESSING, FALSE if done else TRUE, reason),
    ]
    if done:
        conditions.append(ConditionUpdate(BrowserConditionType.TEARDOWN_BLOCKED, FALSE, "Deleted"))
    for cond in conditions:
        status = set_condition(status, cond, now=now, generation=generation)
    return status
