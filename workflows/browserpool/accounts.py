"""Which nodes are a BrowserPool's account's, and when its teardown may end: pure, no Temporal.

The rules and why: docs/browserpools.md, "Delete"; tests/browserpool/test_bp_accounts.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from devicepool.workflows.browserpool.plan import NodeProfile

__all__ = [
    "TeardownStep",
    "groups_of",
    "link",
    "prune",
    "remember",
    "teardown_nodes",
    "teardown_step",
]

K = TypeVar("K", str, tuple[str, str])


class _Sets(Generic[K]):
    """Union-find: each set is led by its least member."""

    def __init__(self) -> None:
        self.parent: dict[K, K] = {}

    def find(self, n: K) -> K:
        while self.parent.setdefault(n, n) != n:
            n = self.parent[n]
        return n

    def union(self, a: K, b: K) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def remember(
    known: Mapping[str, str],
    *,
    live: Mapping[str, str],
    answered: Mapping[str, int],
    holders: Set[str] = frozenset(),
) -> dict[str, str]:
    """The pool's nodes after a listing (`live`: live node -> account it names; `answered`:
    node -> the pool's profiles its listing showed, for those that answered; `holders`:
    nodes that made a profile the listing showed, or that just made one)."""
    out = dict(known)
    for node, count in answered.items():
        if count:
            out[node] = live.get(node, out.get(node, ""))
        else:
            out.pop(node, None)
    for node in holders:
        out[node] = live.get(node, out.get(node, ""))
    for node in out:
        if live.get(node):
            out[node] = live[node]  # what it names now
    return out


def link(
    groups: Mapping[str, str], *, known: Mapping[str, str], saw: Mapping[str, Set[str]]
) -> dict[str, str]:
    """The pool's nodes grouped by what they saw (node -> a label: the least node name of
    its group), kept only for remembered nodes (`known`). `saw`: for each node that
    answered, the nodes that made the profiles its listing showed: a listing shows only
    its own account's profiles, so a node and those it saw are one account.

    A stored label joins the nodes stored under it, never the node of that name: a node
    forgotten and seen again (perhaps in another account) is not in its old group, and
    its answers prune none of that group's nodes."""
    sets: _Sets[tuple[str, str]] = _Sets()
    for node, label in groups.items():
        sets.union(("node", node), ("label", label))
    for node, others in saw.items():
        for other in others:
            sets.union(("node", node), ("node", other))
    linked = set(groups) | set(saw) | {o for others in saw.values() for o in others}
    least: dict[tuple[str, str], str] = {}
    for n in sorted(linked, reverse=True):
        least[sets.find(("node", n))] = n
    return {n: least[sets.find(("node", n))] for n in sorted(linked) if n in known}


def prune(
    known: Mapping[str, str],
    groups: Mapping[str, str],
    *,
    answered: Set[str],
    holders: Set[str],
) -> dict[str, str]:
    """`known` without the nodes that hold nothing: neither answered nor made a listed
    profile, while a node of their group answered (a listing shows every profile of its
    account). Keeps `nodes` to the pool's real holders, not every name ever seen."""
    answering = {groups[n] for n in answered if groups.get(n)}
    return {
        n: account
        for n, account in known.items()
        if n in answered or n in holders or not groups.get(n) or groups[n] not in answering
    }


def groups_of(
    known: Mapping[str, str], groups: Mapping[str, str] | None = None
) -> list[tuple[str, set[str]]]:
    """The accounts the pool's nodes stand for: (account named, "" if none; its nodes).
    Nodes naming one account are one; so are nodes that saw each other's profiles
    (`link`). A node neither names nor links (state from before `groups`) goes with the
    one account named among the pool's nodes, or with the other such nodes."""
    groups = groups or {}
    sets: _Sets[str] = _Sets()
    by_key: dict[str, str] = {}
    for node, account in sorted(known.items()):
        for key in (f"account:{account}" if account else "", f"group:{groups.get(node, '')}"):
            if key and key != "group:":
                sets.union(node, by_key.setdefault(key, node))
    named = {account for account in known.values() if account}
    loose = [n for n, account in known.items() if not account and not groups.get(n)]
    if loose:
        anchor = (
            next((n for n in sorted(known) if known[n] in named), None) if len(named) == 1 else None
        )
        for node in loose:
            sets.union(node, anchor or loose[0])
    members: dict[str, set[str]] = {}
    for node in known:
        members.setdefault(sets.find(node), set()).add(node)
    # Each group under the least account its nodes name ("" for none).
    out = [(min((known[n] for n in ns if known[n]), default=""), ns) for ns in members.values()]
    return sorted(out, key=lambda g: (g[0], sorted(g[1])))


@dataclass(frozen=True)
class TeardownStep:
    # (profile id, node) to close and delete, on the node it runs on
    delete: list[tuple[str, str]] = field(default_factory=list)
    # What holds the pool in Deleting even if every delete works ("": nothing; the pool
    # ends Deleted once they have): NodeDown (profiles on a node that is down or does not
    # answer), NoLiveNode (an account of the pool with no live node to list from).
    reason: str = ""
    message: str = ""


def teardown_nodes(
    known: Mapping[str, str],
    *,
    live: Mapping[str, str],
    selected: Set[str],
    groups: Mapping[str, str] | None = None,
) -> set[str]:
    """The live nodes teardown lists through (more than needed is harmless: only a
    remembered node, or one naming a remembered account, is taken for "none left")."""
    accounts = {a for a, _ in groups_of(known, groups) if a}
    return {n for n, account in live.items() if n in known or n in selected or account in accounts}


def teardown_step(
    known: Mapping[str, str],
    *,
    live: Mapping[str, str],
    listed: Set[str],
    failed: Mapping[str, str],
    profiles: Sequence[NodeProfile],
    groups: Mapping[str, str] | None = None,
) -> TeardownStep:
    """What teardown does after listing through `listed` (`live`: every live node -> the
    account it names; `failed`: listed nodes that did not answer, with the cause;
    `profiles`: what the others showed; `groups`: `link`'s)."""
    answered = set(listed) - set(failed)
    delete = [(p.id, p.node) for p in profiles if p.node in live and p.node not in failed]
    accounts = groups_of(known, groups)
    blind = [
        (account, nodes)
        for account, nodes in accounts
        if not any(n in nodes or (account and live.get(n) == account) for n in answered)
    ]
    # A node that did not answer holds the pool only if it may hold some of its profiles:
    # a listed one is on it, or no node of its account answered (with nothing remembered,
    # any). One that only made or showed some, while its account's others answer "none
    # left", holds nothing: a listing shows every profile of the account.
    unseen = {n for _, nodes in blind for n in nodes}
    holding = {p.node for p in profiles} | unseen
    # A remembered node that names no account and saw none of the others' profiles went
    # with the one account named; it may be another account's: silent, it holds.
    loose = {n for n, account in known.items() if not account and not live.get(n)}
    loose -= set((groups or {}).keys())
    silent = {n: cause for n, cause in failed.items() if n in holding or n in loose or not known}
    down = sorted({p.node for p in profiles if p.node not in live} | set(silent))
    if down:
        message = (
            f"profiles on node(s) {', '.join(down)} wait for the node to come back "
            "(start its BitBrowser desktop client and node worker; to leave them instead, "
            "terminate this pool's workflow and delete them in BitBrowser)"
        )
        message += "".join(f"; {n}: {cause}" for n, cause in sorted(silent.items()))
        return TeardownStep(delete, "NodeDown", message)
    if blind:
        parts = [
            (f"of BitBrowser account {account} " if account else "")
            + f"(the pool's profiles were on {', '.join(sorted(nodes))})"
            for account, nodes in blind
        ]
        others = sorted(set(live) - set(listed))
        message = (
            f"no live node worker {'; none '.join(parts)} to list the pool's profiles from; "
            "they are deleted once one beats again (to leave them instead, terminate this "
            "pool's workflow and delete them in BitBrowser)"
        ) + (f" (live nodes of other accounts: {', '.join(others)})" if others else "")
        return TeardownStep(delete, "NoLiveNode", message)
    return TeardownStep(delete)
