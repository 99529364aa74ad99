"""What one BrowserPool pass sees, frozen (`Observed`), and what it decides from it: pure.

Each step takes what it needs as arguments, so a pass's outcome is tested without a
server (tests/browserpool/test_bp_status.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from devicepool.activities.node_models import NodeInfo, ProfileView
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.api.v1alpha1 import resolve_max_unhealthy
from devicepool.workflows.browserpool.accounts import link, prune, remember
from devicepool.workflows.browserpool.plan import NodeProfile, Placement, plan

__all__ = [
    "LOCAL_API_REFUSED",
    "NODE_UNREACHABLE",
    "NodeTrouble",
    "Observed",
    "decide",
    "known_nodes",
    "listed_nodes",
    "merge_listings",
    "mixed_accounts",
    "node_troubles",
    "trouble_news",
]

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
class Observed:
    """One pass's view: the spec it plans from and what the registry and listings said."""

    spec: BrowserPoolSpec
    now: datetime
    # The generation of `spec` (the status says it observed it once the pass acted).
    generation: int = 0
    # The live selected nodes name more than one account (node -> account): the pass
    # holds, nothing is created, opened or deleted (`mixed_accounts`).
    mixed: Mapping[str, str] = field(default_factory=dict)
    # The pool's profiles, each once (`open` as the node it runs on says).
    profiles: tuple[NodeProfile, ...] = ()
    # Live nodes the selector picks (the troubled ones included).
    alive: frozenset[str] = frozenset()
    # Selected nodes the registry counts lost (silent past `nodeLostAfterSeconds`).
    lost: frozenset[str] = frozenset()
    # Live nodes the selector no longer picks that were listed: their profiles go.
    unselected: frozenset[str] = frozenset()
    # Listed nodes whose listing failed.
    failed: frozenset[str] = frozenset()
    # Live selected nodes whose listing failed: why, and whether counted lost by now.
    troubles: Mapping[str, NodeTrouble] = field(default_factory=dict)

    @property
    def gone(self) -> frozenset[str]:
        """Live nodes whose Local API has not answered for `nodeLostAfterSeconds`."""
        return frozenset(n for n, t in self.troubles.items() if t.lost)

    @property
    def all_lost(self) -> frozenset[str]:
        """Nodes whose profiles are counted lost: silent, or not answering for long."""
        return self.lost | self.gone


def decide(
    seen: Observed,
    *,
    failures: Mapping[str, int],
    failure_limit: int,
    replacements: Sequence[str],
    leased: Set[str] = frozenset(),
    used: Sequence[str] = (),
) -> Placement:
    """The pass's placement (`leased`: the profiles held by a lease, never deleted;
    `used`: the profiles to replace after use)."""
    spec = seen.spec
    return plan(
        replicas=spec.replicas,
        profiles=seen.profiles,
        alive=seen.alive - seen.gone,
        lost=seen.all_lost,
        open_wanted=spec.open,
        failures=failures,
        failure_limit=failure_limit,
        max_unhealthy=resolve_max_unhealthy(spec.health.max_unhealthy, spec.replicas),
        unselected=seen.unselected - seen.failed,
        unreachable=set(seen.troubles) - seen.gone,
        replacements=replacements,  # oldest first
        leased=leased,
        used=used,
    )


def merge_listings(
    answers: Mapping[str, Sequence[ProfileView] | tuple[str, str]],
) -> tuple[list[NodeProfile], dict[str, tuple[str, str]], dict[str, set[str]]]:
    """Node -> its listing (or why it failed: reason, cause) as one view: the pool's
    profiles, each once, `open` from the node it runs on; the nodes that failed; for each
    of the others, the nodes that made the profiles it showed (empty: it showed none)."""
    failed = {n: a for n, a in answers.items() if isinstance(a, tuple)}
    listed = {n: a for n, a in answers.items() if not isinstance(a, tuple)}
    seen: dict[str, NodeProfile] = {}
    for node, profiles in listed.items():
        for p in profiles:
            slot = _slot(p.slot)
            if slot is None:
                continue
            mine = p.node == node
            if p.id not in seen or mine:
                seen[p.id] = NodeProfile(id=p.id, slot=slot, node=p.node, open=p.open and mine)
    makers = {n: {p.node for p in profiles} for n, profiles in listed.items()}
    return sorted(seen.values(), key=lambda p: (p.slot, p.id)), failed, makers


def node_troubles(
    failed: Mapping[str, tuple[str, str]],
    live: Sequence[NodeInfo],
    since: Mapping[str, datetime],
    *,
    now: datetime,
    lost_after: timedelta,
) -> tuple[dict[str, NodeTrouble], dict[str, datetime]]:
    """The live selected nodes whose listing failed, with since when; and the carried
    `unreachable_since` after this pass (a node that answered, or is no longer listed,
    is forgotten)."""
    beats = {n.node: n for n in live}
    kept = {node: when for node, when in since.items() if node in failed}
    troubles: dict[str, NodeTrouble] = {}
    for node, (reason, cause) in sorted(failed.items()):
        first = kept.setdefault(node, now)
        info = beats.get(node)
        if info is None:
            continue  # a node the selector no longer picks: only its profiles wait
        if info.api_healthy is False and info.api_error:
            cause = f"{cause}; its last beat: {info.api_error}"
        troubles[node] = NodeTrouble(
            reason=reason, cause=cause, since=first, lost=now - first >= lost_after
        )
    return troubles, kept


Said = tuple[str, str, bool]


def trouble_news(
    troubles: Mapping[str, NodeTrouble], said: Mapping[str, Said]
) -> tuple[list[tuple[str, str]], dict[str, Said]]:
    """The warnings to record for the troubled nodes (reason, message), once a change, not
    every pass; and what has been said of each troubled node after them."""
    news: list[tuple[str, str]] = []
    now_said: dict[str, Said] = {}
    for node, t in sorted(troubles.items()):
        now_said[node] = (t.reason, t.cause, t.lost)
        if said.get(node) != now_said[node]:
            lost = " (counted lost: its profiles are held elsewhere)" if t.lost else ""
            news.append((t.reason, f"node {node}: {t.cause}{lost}"))
    return news, now_said


def mixed_accounts(alive: Sequence[NodeInfo]) -> dict[str, str]:
    """Node -> account of the live nodes when they name more than one account ({} else).
    A node that names none (no `--node-account`) is not compared."""
    named = {n.node: n.account for n in alive if n.account}
    return named if len(set(named.values())) > 1 else {}


def listed_nodes(
    everywhere: Mapping[str, str], *, alive: Set[str], known: Mapping[str, str], account: str
) -> tuple[set[str], list[str]]:
    """Which live nodes a pass lists: (the unselected ones, every one to list).

    Live nodes the selector no longer picks: their profiles go (closed where they run).
    A node naming another account lists none of them: it is not asked, unless it showed
    or made some (the selector moved to another account's nodes: the old account's
    profiles go too)."""
    unselected = {
        node
        for node, named in everywhere.items()
        if node in known or not (named and account and named != account)
    } - set(alive)
    return unselected, sorted(set(alive) | unselected)


def _slot(text: object) -> int | None:
    try:
        slot = int(text)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return slot if slot >= 0 else None


def known_nodes(
    nodes: Mapping[str, str],
    groups: Mapping[str, str],
    *,
    live: Mapping[str, str],
    answered: Mapping[str, set[str]],
    holders: Set[str],
) -> tuple[dict[str, str], dict[str, str]]:
    """The pool's nodes and their groups after a pass's listings (`accounts.py`): `live`,
    live node -> the account it names; `answered`, for the nodes that answered, the nodes
    that made what each showed; `holders`, the nodes the listed profiles are on."""
    known = remember(
        nodes, live=live, answered={n: len(saw) for n, saw in answered.items()}, holders=holders
    )
    linked = link(groups, known=known, saw=answered)
    known = prune(known, linked, answered=set(answered), holders=holders)
    return known, {n: g for n, g in linked.items() if n in known}
