"""What a BrowserPool tells its lease book (`reconciler/leasing.py`): which profiles may be
leased now, which a selector can never match, and what a lease's end does to the plan.

Pure. A profile's selector labels are its node's labels and `node`, `profile` (its id)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserPoolSpec,
    BrowserPoolStatus,
)
from devicepool.api.v1alpha1 import ConditionStatus
from devicepool.workflows.browserpool.observe import Observed
from devicepool.workflows.browserpool.plan import NodeProfile, Placement
from devicepool.workflows.reconciler.conditions import ConditionUpdate, set_condition
from devicepool.workflows.reconciler.events import Happened, PoolEvent
from devicepool.workflows.reconciler.lease_records import NOT_USED, Candidate, Ended

__all__ = [
    "RESET_IS_REPLACE",
    "after_leases",
    "candidates",
    "forget_used",
    "grows_for",
    "kept_message",
    "kept_status",
    "labels_of",
    "members",
    "problem",
    "replaced_after_use",
]

_OWN_KEYS = {"node", "profile"}
# The event that says `onRelease: reset` replaces: a fresh profile is a profile's reset.
RESET_IS_REPLACE = "ResetIsReplace"
# Profiles a status line names (the rest are counted).
_NAMED = 10


def labels_of(profile: NodeProfile, node_labels: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    return {**node_labels.get(profile.node, {}), "node": profile.node, "profile": profile.id}


def candidates(
    spec: BrowserPoolSpec,
    seen: Observed,
    placement: Placement,
    node_labels: Mapping[str, Mapping[str, str]],
    *,
    used: Collection[str] = (),
) -> list[Candidate]:
    """The profiles the pool holds and keeps, open if the pool opens them, on a node that
    answered this pass; in slot order. Not one kept only for its lease (it goes once the
    lease ends), nor one to replace after use (`used`)."""
    going = {pid for pid, _ in placement.delete} | set(placement.kept) | set(used)
    held = [
        p
        for p in placement.held
        if p.id not in going
        and (p.open or not spec.open)
        and p.node in seen.alive
        and p.node not in seen.failed
    ]
    held.sort(key=lambda p: (p.slot, p.id))
    return [Candidate(p.id, labels_of(p, node_labels)) for p in held]


def members(seen: Observed) -> set[str] | None:
    """Every profile the pool has on a node not counted lost (silent, or its Local API
    silent past `nodeLostAfterSeconds`: its profiles are made again elsewhere). None when no
    listing answered this pass: not seeing a profile then says nothing of it."""
    listed = seen.alive | seen.unselected
    if listed and listed <= seen.failed:
        return None
    lost = seen.all_lost
    return {p.id for p in seen.profiles if p.node not in lost}


def after_leases(
    ended: Sequence[Ended],
    *,
    replace: bool,
    kept: Collection[str],
    used: Collection[str],
) -> tuple[list[str], bool]:
    """What ended leases change: the profiles to replace after use that they add
    (`replace`), and whether a pass is due. Only when the plan would do something else now:
    a profile kept only for its lease goes, a used one is replaced. A profile back that
    the pool holds needs none (at 20 releases a second, a pass each would hammer the
    nodes)."""
    added: list[str] = []
    if replace:
        for one in ended:
            device = one.device
            if device and one.reason not in NOT_USED and device not in used:
                if device not in added:
                    added.append(device)
    due = bool(added) or any(one.device in kept for one in ended)
    return added, due


def replaced_after_use(
    added: Sequence[str], *, reset: bool, events: Sequence[PoolEvent]
) -> Happened:
    """The event for profiles replaced after use; under `onRelease: reset` it says why
    (`RESET_IS_REPLACE`) once, while that is among the pool's recent `events`."""
    named = ", ".join(added)
    if reset and not any(e.reason == RESET_IS_REPLACE for e in events):
        return Happened(
            RESET_IS_REPLACE,
            f"{named} replaced after use: a browser profile's reset is a fresh profile,"
            " so onRelease: reset makes a new one",
        )
    return Happened("ReplaceRequested", f"{named} replaced after use (lease released)")


def forget_used(used: Sequence[str], profiles: Sequence[NodeProfile]) -> list[str]:
    """The profiles still to replace after use: those a listing still shows (a listing
    that answered shows every profile of the account)."""
    listed = {p.id for p in profiles}
    return [pid for pid in used if pid in listed]


def kept_message(kept: Mapping[str, str]) -> str:
    """One line for the profiles kept for their leases ("" if none)."""
    if not kept:
        return ""
    named = [f"{pid} ({why})" for pid, why in sorted(kept.items())[:_NAMED]]
    more = f", and {len(kept) - _NAMED} more" if len(kept) > _NAMED else ""
    return (
        f"{len(kept)} profile(s) kept for their leases, deleted once released: "
        f"{', '.join(named)}{more}"
    )


def problem(
    selector: Mapping[str, str],
    *,
    spec: BrowserPoolSpec,
    seen: Observed | None,
    node_labels: Mapping[str, Mapping[str, str]],
) -> str | None:
    """Why no profile of this pool can ever match `selector` (None: one can, now or later)."""
    for key, value in selector.items():
        wanted = spec.node_selector.get(key)
        if wanted is not None and wanted != value:
            return (
                f"selector {key}={value} can never match: the pool's nodeSelector picks"
                f" {key}={wanted}"
            )
    profile = selector.get("profile")
    present = members(seen) if seen is not None else None
    if profile is not None and present is not None and profile not in present:
        return f"selector profile={profile} can never match: not a profile of the pool"
    known = set(_OWN_KEYS) | set(spec.node_selector)
    for labels in node_labels.values():
        known.update(labels)
    unknown = sorted(k for k in selector if k not in known)
    # With no selected node seen yet (a new run's first look, every node silent), no label
    # is known to be missing.
    if unknown and node_labels:
        return (
            f"selector key {unknown[0]} can never match: no node of the pool has such a label"
            f" (known: {', '.join(sorted(known))})"
        )
    return None


def grows_for(selector: Mapping[str, str], *, node_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether a profile the pool makes could serve a ticket of `selector`: what an
    autoscaled pool counts as demand. A new profile carries its node's labels, so some
    selected node must carry the selector's; with no node seen yet, nothing is known to
    refuse."""
    if not node_labels:
        return True
    wanted = {k: v for k, v in selector.items() if k != "profile"}
    return any(
        all({**labels, "node": node}.get(k) == v for k, v in wanted.items())
        for node, labels in node_labels.items()
    )


def kept_status(
    status: BrowserPoolStatus, kept: Mapping[str, str], *, now: datetime, generation: int
) -> BrowserPoolStatus:
    """While profiles are kept for their leases the pool is not yet what its spec says:
    `Progressing=True`, reason `LeasesHeld`, naming them (`get`, `describe`)."""
    if not kept:
        return status
    held = ConditionUpdate(
        BrowserConditionType.PROGRESSING, ConditionStatus.TRUE, "LeasesHeld", kept_message(kept)
    )
    return set_condition(status, held, now=now, generation=generation)
