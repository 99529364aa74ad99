"""A BrowserPool's status after a pass, and at the end of its teardown: pure, no Temporal.

How a node that beats but cannot serve shows: docs/browserpools.md, "How a BrowserPool
runs".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserPoolSpec,
    BrowserPoolStatus,
)
from devicepool.api.v1alpha1 import ConditionStatus, Phase
from devicepool.workflows.browserpool.messages import ProfileRow
from devicepool.workflows.browserpool.observe import (
    LOCAL_API_REFUSED,
    NODE_UNREACHABLE,
    NodeTrouble,
    Observed,
)
from devicepool.workflows.browserpool.plan import Placement
from devicepool.workflows.reconciler.conditions import ConditionUpdate, set_condition

__all__ = [
    "LOCAL_API_REFUSED",
    "NODE_UNREACHABLE",
    "ConfigProblem",
    "NodeTrouble",
    "Published",
    "mixed_status",
    "profile_rows",
    "publish",
    "teardown_status",
]

TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE
Types = BrowserConditionType


@dataclass(frozen=True)
class ConfigProblem:
    """A create a node refused for its configuration: creating is held, tried again so often."""

    reason: str
    message: str
    retry_seconds: float


@dataclass(frozen=True)
class Published:
    status: BrowserPoolStatus
    rows: list[ProfileRow]


def publish(
    prior: BrowserPoolStatus,
    seen: Observed,
    placement: Placement,
    *,
    config_problem: ConfigProblem | None,
    failure_limit: int,
    node_lost_after_seconds: float,
    now: datetime,
    generation: int,
) -> Published:
    """The pass's status and profile rows at `now`, from the spec it planned from
    (`generation`: the one that spec had once it acted; before its act, the last pass's:
    `--wait` must not take a plan for its outcome). The status says the limits the pass
    ran by (`failure_limit` in force, the worker's `node_lost_after_seconds`)."""
    spec = seen.spec
    held = placement.held
    open_ = sum(1 for p in held if p.open)
    ready = open_ if spec.open else len(held)
    status = prior.model_copy(
        update={
            "phase": _phase(seen, placement, ready),
            "desired_replicas": spec.replicas,
            "ready_profiles": ready,
            "open_profiles": open_,
            "lost_profiles": len(placement.lost),
            "by_node": placement.by_node(),
            "profile_ids": sorted(p.id for p in held),
            "last_reconciled": now,
            "observed_generation": generation,
            "failure_streak_limit": failure_limit,
            "node_lost_after_seconds": node_lost_after_seconds,
        }
    )
    trouble = _trouble(seen.troubles, placement)
    conditions = [
        _ready(seen, placement, ready, trouble, config_problem),
        _progressing(placement),
        _nodes(seen, trouble),
        _remediation(spec, placement, failure_limit),
    ]
    for cond in conditions:
        status = set_condition(status, cond, now=now, generation=generation)
    return Published(status, profile_rows(seen, placement))


def mixed_status(
    prior: BrowserPoolStatus, accounts: Mapping[str, str], *, now: datetime, generation: int
) -> tuple[BrowserPoolStatus, str]:
    """The status of a pass that holds because the live selected nodes name two BitBrowser
    accounts (node -> account), and what it says. Why: docs/browserpools.md, "One account"."""
    named = ", ".join(f"{node} ({account})" for node, account in sorted(accounts.items()))
    message = (
        f"the live nodes nodeSelector picks are logged into different BitBrowser "
        f"accounts: {named}; nothing is created or deleted until it picks one account's"
    )
    status = prior.model_copy(update={"phase": Phase.DEGRADED, "last_reconciled": now})
    for cond in (
        ConditionUpdate(Types.NODES_AVAILABLE, FALSE, "MixedAccounts", message),
        ConditionUpdate(Types.PROGRESSING, FALSE, "MixedAccounts", message),
    ):
        status = set_condition(status, cond, now=now, generation=generation)
    return status, message


def profile_rows(seen: Observed, placement: Placement) -> list[ProfileRow]:
    """The `devices` query's rows: each profile held, lost (its node is silent), waiting
    (its node's Local API does not answer) or leaving (being deleted)."""
    leaving = {pid for pid, _ in placement.delete}
    waiting = {p.id for p in placement.waiting}
    lost = seen.all_lost

    def state(pid: str, node: str) -> str:
        if pid in leaving:
            return "leaving"
        if node in lost:
            return "lost"
        return "waiting" if pid in waiting else "held"

    return [
        ProfileRow(id=p.id, slot=p.slot, node=p.node, open=p.open, state=state(p.id, p.node))
        for p in seen.profiles
    ]


def _working(placement: Placement) -> bool:
    return bool(placement.create or placement.delete or placement.open)


def _phase(seen: Observed, placement: Placement, ready: int) -> Phase:
    enough = ready >= seen.spec.replicas
    if enough:
        return Phase.SCALING_DOWN if placement.delete else Phase.READY
    usable = seen.alive - seen.gone
    if not usable or placement.lost or seen.troubles:
        return Phase.DEGRADED
    return Phase.PROVISIONING


def _ready(
    seen: Observed,
    placement: Placement,
    ready: int,
    trouble: _Said | None,
    config_problem: ConfigProblem | None,
) -> ConditionUpdate:
    spec = seen.spec
    if ready >= spec.replicas:
        return ConditionUpdate(Types.READY, TRUE, "Converged")
    if config_problem is not None:
        return ConditionUpdate(
            Types.READY,
            FALSE,
            config_problem.reason,
            f"{config_problem.message} — creating held, tried again every "
            f"{config_problem.retry_seconds:g}s",
        )
    counted = f"{ready}/{spec.replicas} profiles ready"
    if trouble is not None and (placement.waiting or not _working(placement)):
        # Only while the troubled nodes hold what is missing, or nothing else moves: a
        # refused spare, or a lost node being replaced elsewhere, is NodesAvailable's.
        return ConditionUpdate(Types.READY, FALSE, trouble.reason, f"{counted}; {trouble.message}")
    reason = "NoNodes" if not seen.alive else "BelowDesired"
    return ConditionUpdate(Types.READY, FALSE, reason, counted + (" (open)" if spec.open else ""))


def _progressing(placement: Placement) -> ConditionUpdate:
    working = _working(placement)
    return ConditionUpdate(
        Types.PROGRESSING, TRUE if working else FALSE, "Reconciling" if working else "Stable"
    )


def _nodes(seen: Observed, trouble: _Said | None) -> ConditionUpdate:
    if trouble is not None:
        return ConditionUpdate(Types.NODES_AVAILABLE, FALSE, trouble.reason, trouble.message)
    pairs = sorted(seen.spec.node_selector.items())
    selector = ", ".join(f"{k}={v}" for k, v in pairs) or "any"
    lost = seen.all_lost
    lost_note = (
        f"; lost: {', '.join(sorted(lost))} (its profiles are replaced elsewhere)" if lost else ""
    )
    if not seen.alive:
        return ConditionUpdate(
            Types.NODES_AVAILABLE,
            FALSE,
            "NoLiveNode",
            f"no live node worker matches nodeSelector ({selector}){lost_note}",
        )
    live = f"{len(seen.alive)} live node(s) match nodeSelector ({selector})"
    if lost:
        return ConditionUpdate(Types.NODES_AVAILABLE, TRUE, "NodesLost", live + lost_note)
    return ConditionUpdate(Types.NODES_AVAILABLE, TRUE, "NodesAlive", live)


def _remediation(spec: BrowserPoolSpec, placement: Placement, limit: int) -> ConditionUpdate:
    if not placement.paused:
        return ConditionUpdate(Types.REMEDIATION_PAUSED, FALSE, "Healthy")
    return ConditionUpdate(
        Types.REMEDIATION_PAUSED,
        TRUE,
        "TooManyUnhealthy",
        f"{placement.paused} profiles failed to open {limit} times in a row, more than "
        f"maxUnhealthy ({spec.health.max_unhealthy}): none is deleted until fewer fail "
        "(a node or the account is likely the trouble)",
    )


@dataclass(frozen=True)
class _Said:
    reason: str
    message: str


def _trouble(troubles: Mapping[str, NodeTrouble], placement: Placement) -> _Said | None:
    """One reason and one message for every troubled node (a refused key first)."""
    if not troubles:
        return None
    refused = any(t.reason == LOCAL_API_REFUSED for t in troubles.values())
    waiting = Counter(p.node for p in placement.waiting)
    parts = []
    for node, t in sorted(troubles.items()):
        what = "refuses its key" if t.reason == LOCAL_API_REFUSED else "does not answer"
        held = (
            "its profiles are counted lost and held elsewhere"
            if t.lost
            else f"{waiting[node]} profile(s) there wait for it"
        )
        parts.append(f"node {node}'s Local API {what} ({t.cause}); {held}")
    return _Said(LOCAL_API_REFUSED if refused else NODE_UNREACHABLE, "; ".join(parts))


def teardown_status(
    status: BrowserPoolStatus, *, done: bool, now: datetime, generation: int
) -> BrowserPoolStatus:
    """The status while the pool deletes its profiles (`done`: once every one is gone):
    nothing served or desired, and once done nothing held."""
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
