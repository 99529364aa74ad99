"""What a BrowserPool tells its lease book (`reconciler/leasing.py`): which profiles may be
leased now and which a selector can never match.

Pure. A profile's selector labels are its node's labels and `node`, `profile` (its id)."""

from __future__ import annotations

from collections.abc import Mapping

from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.workflows.browserpool.observe import Observed
from devicepool.workflows.browserpool.plan import NodeProfile, Placement
from devicepool.workflows.reconciler.leases import Candidate

__all__ = ["candidates", "labels_of", "members", "problem"]

_OWN_KEYS = {"node", "profile"}


def labels_of(profile: NodeProfile, node_labels: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    return {**node_labels.get(profile.node, {}), "node": profile.node, "profile": profile.id}


def candidates(
    spec: BrowserPoolSpec,
    seen: Observed,
    placement: Placement,
    node_labels: Mapping[str, Mapping[str, str]],
) -> list[Candidate]:
    """The profiles the pool holds and keeps, open if the pool opens them, on a node that
    answered this pass; in slot order."""
    going = {pid for pid, _ in placement.delete}
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


def members(seen: Observed) -> set[str]:
    """Every profile the pool has on a node not lost."""
    return {p.id for p in seen.profiles if p.node not in seen.lost}


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
    if profile is not None and seen is not None and profile not in members(seen):
        return f"selector profile={profile} can never match: not a profile of the pool"
    known = set(_OWN_KEYS) | set(spec.node_selector)
    for labels in node_labels.values():
        known.update(labels)
    unknown = sorted(k for k in selector if k not in known)
    if unknown:
        return (
            f"selector key {unknown[0]} can never match: no node of the pool has such a label"
            f" (known: {', '.join(sorted(known))})"
        )
    return None
