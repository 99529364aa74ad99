"""What a BrowserPool pass does: a pure function of the profiles, the nodes and the spec.

No Temporal, no clock, no I/O (tests/browserpool/test_bp_plan.py). The rules and why:
docs/browserpools.md, "How a BrowserPool runs".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

__all__ = ["REPLACED_AFTER_USE", "NodeProfile", "Placement", "forget_replacements", "plan"]

# Why a profile whose lease ended with `replace` (`onRelease: replace`, `release --replace`)
# is deleted: a new one is made for its slot.
REPLACED_AFTER_USE = "replaced after use"


@dataclass(frozen=True)
class NodeProfile:
    """A profile of the pool as the listing shows it."""

    id: str
    slot: int
    node: str
    open: bool = False


@dataclass(frozen=True)
class Placement:
    # (slot, node) to create, in slot order
    create: list[tuple[int, str]] = field(default_factory=list)
    # (profile id, node) to close, confirm and delete; why, by id
    delete: list[tuple[str, str]] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)
    # (profile id, node) to open this pass
    open: list[tuple[str, str]] = field(default_factory=list)
    # what the status counts
    held: list[NodeProfile] = field(default_factory=list)
    lost: list[NodeProfile] = field(default_factory=list)
    # profiles past their failure limit kept because more than `max_unhealthy` are (0: none)
    paused: int = 0
    # profiles on a live node whose Local API did not answer: their slots kept, not ready
    waiting: list[NodeProfile] = field(default_factory=list)
    # Leased profiles this pass would have deleted, and why: kept until their lease ends.
    # One that does not hold its slot (above replicas, a second for its slot, on a node
    # no longer selected) is not in `held`: never counted beyond replicas.
    kept: dict[str, str] = field(default_factory=dict)

    def by_node(self) -> dict[str, int]:
        return dict(sorted(Counter(p.node for p in self.held).items()))


def plan(
    *,
    replicas: int,
    profiles: Sequence[NodeProfile],
    alive: Set[str],
    lost: Set[str],
    open_wanted: bool,
    failures: Mapping[str, int],
    failure_limit: int,
    max_unhealthy: int | None = None,
    unselected: Set[str] = frozenset(),
    unreachable: Set[str] = frozenset(),
    replacements: Sequence[str] = (),
    leased: Set[str] = frozenset(),
    used: Sequence[str] = (),
) -> Placement:
    """This pass's placement (`alive`: live nodes the selector picks; `lost`: silent ones;
    `unreachable`: live ones whose Local API did not answer this pass; `replacements`:
    oldest first; `leased`: never deleted, `kept` instead; `used`: replaced after use)."""
    # How recent a profile of a slot is: originals 0, then replacements by age.
    age = {pid: i + 1 for i, pid in enumerate(replacements)}
    usable = set(alive) - set(unreachable)
    on_live = [p for p in profiles if p.node in usable]
    waiting = [
        p for p in profiles if p.node in unreachable and p.node in alive and p.slot < replicas
    ]
    lost_profiles = [p for p in profiles if p.node in lost and p.slot < replicas]
    delete: dict[str, tuple[str, str]] = {}  # id -> (node, why)
    kept: dict[str, str] = {}  # leased: id -> why it would go
    replace = set(used)

    def drop(p: NodeProfile, why: str) -> None:
        if p.id in leased:  # its holder uses it: it goes once the lease ends
            kept.setdefault(p.id, why)
        else:
            delete.setdefault(p.id, (p.node, why))

    # A live node the selector no longer picks (`unselected`): its profiles go,
    # closed where they run, and their slots are held on the selected nodes.
    for p in profiles:
        if p.node in unselected:
            drop(p, f"node {p.node} no longer matches nodeSelector")
    failing = [p for p in on_live if p.slot < replicas and failures.get(p.id, 0) >= failure_limit]
    paused = len(failing) if max_unhealthy is not None and len(failing) > max_unhealthy else 0
    for p in on_live:
        if p.slot >= replicas:
            drop(p, f"slot {p.slot} is above replicas {replicas}")
        elif p.id in replace:
            drop(p, REPLACED_AFTER_USE)
        elif p in failing and not paused:
            drop(p, f"failed to open {failures[p.id]} times in a row")
    load = Counter(p.node for p in on_live if p.id not in delete)
    by_slot: dict[int, list[NodeProfile]] = {}
    for p in sorted(on_live, key=lambda p: (p.slot, p.id)):
        if p.id not in delete and p.slot < replicas:  # (a leased one above: kept, uncounted)
            by_slot.setdefault(p.slot, []).append(p)
    held: list[NodeProfile] = []
    # Originals back from a lost node, not open yet: opened while a replacement serves.
    restoring: list[NodeProfile] = []

    def rank(p: NodeProfile) -> tuple[int, bool, bool, int, str, str]:
        return (age.get(p.id, 0), p.id not in leased, not p.open, load[p.node], p.node, p.id)

    for slot, holders in sorted(by_slot.items()):
        # The original (not a replacement) wins: it has the cookies; between replacements,
        # the older (it served longest). Among equals keep a leased one (the other would be
        # billed on beside it until the lease ends), an open one, then the one on the least
        # loaded node; the rest go.
        keep = min(holders, key=rank)
        newer = [p for p in holders if age.get(p.id, 0) > age.get(keep.id, 0)]
        serving = None
        if newer and open_wanted and not keep.open:
            # A newer replacement serves on (counted) until the kept one is open.
            serving = min((p for p in newer if p.open), key=rank, default=None)
        if serving is not None:
            held.append(serving)
            restoring.append(keep)
        else:
            held.append(keep)
        for p in holders:
            if p is not keep and p is not serving:
                drop(
                    p,
                    f"slot {slot}'s original profile serves again"
                    if p in newer
                    else f"a second profile for slot {slot}",
                )
                if p.id in delete:
                    load[p.node] -= 1
    creates: list[tuple[int, str]] = []
    if usable:
        taken = {p.slot for p in held} | {p.slot for p in waiting}
        for slot in range(replicas):
            if slot in taken:
                continue
            node = min(sorted(usable), key=lambda n: load[n])
            creates.append((slot, node))
            load[node] += 1
    opens: list[tuple[str, str]] = []
    if open_wanted:
        busy: set[str] = set()
        for p in [*held, *restoring]:
            if not p.open and p.node not in busy:
                opens.append((p.id, p.node))
                busy.add(p.node)
    return Placement(
        create=creates,
        delete=[(pid, node) for pid, (node, _) in delete.items()],
        why={pid: why for pid, (_, why) in delete.items()},
        open=opens,
        held=held,
        lost=lost_profiles,
        paused=paused,
        waiting=waiting,
        kept=kept,
    )


def forget_replacements(
    replacements: Sequence[str], profiles: Sequence[NodeProfile], *, nodes: Set[str]
) -> list[str]:
    """The replacements still to rank below their original (oldest first): listed, and
    another profile of their slot is on a node the registry knows (`nodes`: live or lost).
    One gone, its slot's only profile, or whose original's node the registry forgot (7
    days silent: retired) is a profile like the others: its cookies are the slot's now."""
    listed = {p.id: p.slot for p in profiles}
    others = Counter(p.slot for p in profiles if p.node in nodes)
    mine = Counter(p.id for p in profiles if p.node in nodes)
    return [pid for pid in replacements if pid in listed and others[listed[pid]] > mine[pid]]
