"""Which nodes are a BrowserPool's account's, and when its teardown may end: pure, no Temporal.

Profiles belong to a BitBrowser account, so a node of another account lists none of
the pool's, and "none left" from it is no proof. A node's own word (`--node-account`)
is optional, so the pool keeps what it has seen instead (`remember`): a node that
made one of its profiles, or whose listing showed some, is of the account those
profiles are in (`BrowserPoolState.nodes`: node -> the account it names, "" if
none). A node whose listing shows none is forgotten.

Teardown (`teardown_step`) lists through every live node that may hold some (the
remembered ones, the ones naming one of their accounts, the ones the selector
picks), deletes what it sees, and ends only when each account the remembered
nodes stand for had a remembered node (or one naming it) answer with none left.
With one account named among them (or none), every remembered node stands for the
same account (`--node-account` set on some nodes only); with several (nodeSelector
moved to another account's nodes), each named account is its own, and nodes naming
none count together.

tests/browserpool/test_bp_accounts.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from devicepool.workflows.browserpool.plan import NodeProfile

__all__ = ["TeardownStep", "accounts_of", "remember", "teardown_step"]


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


def accounts_of(known: Mapping[str, str]) -> dict[str, set[str]]:
    """The accounts the pool's nodes stand for: account -> its remembered nodes ("" for
    nodes naming none, unless one account is named among them: then theirs)."""
    named = {account for account in known.values() if account}
    if len(named) <= 1:
        only = next(iter(named), "")
        return {only: set(known)} if known else {}
    groups: dict[str, set[str]] = {}
    for node, account in known.items():
        groups.setdefault(account, set()).add(node)
    return groups


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
    known: Mapping[str, str], *, live: Mapping[str, str], selected: Set[str]
) -> set[str]:
    """The live nodes teardown lists through (more than needed is harmless: only a
    remembered node, or one naming a remembered account, is taken for "none left")."""
    accounts = {a for a in accounts_of(known) if a}
    return {n for n, account in live.items() if n in known or n in selected or account in accounts}


def teardown_step(
    known: Mapping[str, str],
    *,
    live: Mapping[str, str],
    listed: Set[str],
    failed: Mapping[str, str],
    profiles: Sequence[NodeProfile],
) -> TeardownStep:
    """What teardown does after listing through `listed` (`live`: every live node -> the
    account it names; `failed`: listed nodes that did not answer, with the cause;
    `profiles`: what the others showed)."""
    answered = set(listed) - set(failed)
    delete = [(p.id, p.node) for p in profiles if p.node in live and p.node not in failed]
    # A node that did not answer holds the pool only if it may hold some of its profiles:
    # one it made or showed some (with nothing remembered, any).
    holders = set(known) | {p.node for p in profiles}
    silent = {n: cause for n, cause in failed.items() if n in holders or not known}
    down = sorted({p.node for p in profiles if p.node not in live} | set(silent))
    if down:
        message = f"profiles on node(s) {', '.join(down)} wait for the node to come back"
        message += "".join(f"; {n}: {cause}" for n, cause in sorted(silent.items()))
        return TeardownStep(delete, "NodeDown", message)
    blind = [
        (account, nodes)
        for account, nodes in sorted(accounts_of(known).items())
        if not any(n in nodes or (account and live.get(n) == account) for n in answered)
    ]
    if blind:
        parts = [
            (f"of BitBrowser account {account} " if account else "")
            + f"(the pool's profiles were on {', '.join(sorted(nodes))})"
            for account, nodes in blind
        ]
        others = sorted(set(live) - set(listed))
        message = (
            f"no live node worker {'; none '.join(parts)} to list the pool's profiles from; "
            "they are deleted once one beats again"
        ) + (f" (live nodes of other accounts: {', '.join(others)})" if others else "")
        return TeardownStep(delete, "NoLiveNode", message)
    return TeardownStep(delete)
