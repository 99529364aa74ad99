"""Review of issue 37, defects 3-5, pure: which nodes are the pool's account's (accounts.py).

A node of another BitBrowser account lists none of the pool's profiles: its "none
left" must not end a teardown. The nodes that made or showed the pool's profiles are
the account's, named with `--node-account` or not; teardown waits for one of them
per account, and never for a node that beats and answers. The dev-server sequences:
tests/browserpool/test_bp_node_trouble.py.
"""

from __future__ import annotations

from devicepool.workflows.browserpool.accounts import (
    groups_of,
    link,
    prune,
    remember,
    teardown_nodes,
    teardown_step,
)
from devicepool.workflows.browserpool.plan import NodeProfile


def _on(node: str, *ids: str) -> list[NodeProfile]:
    return [NodeProfile(pid, i, node) for i, pid in enumerate(ids)]


def test_only_one_node_naming_the_account_is_no_reason_to_wait_for_ever() -> None:
    """Defect 3: node-1 names shop, node-2 none (the same real account): both are the
    pool's; a teardown that sees node-2's profiles deletes them there and ends."""
    live = {"node-1": "shop", "node-2": ""}
    known = remember({}, live=live, answered={"node-1": 2, "node-2": 2}, holders={"node-2"})
    assert groups_of(known) == [("shop", {"node-1", "node-2"})]
    listed = teardown_nodes(known, live=live, selected={"node-1", "node-2"})
    assert listed == {"node-1", "node-2"}
    profiles = _on("node-1", "a") + _on("node-2", "b")
    step = teardown_step(known, live=live, listed=listed, failed={}, profiles=profiles)
    assert step.reason == "" and sorted(step.delete) == [("a", "node-1"), ("b", "node-2")]
    # node-1 down: node-2 still lists and deletes; only node-1's profiles wait for it.
    live = {"node-2": ""}
    listed = teardown_nodes(known, live=live, selected={"node-2"})
    step = teardown_step(known, live=live, listed=listed, failed={}, profiles=profiles)
    assert step.delete == [("b", "node-2")] and step.reason == "NodeDown", step
    # ...and once none are left, it ends.
    assert teardown_step(known, live=live, listed=listed, failed={}, profiles=[]).reason == ""


def test_an_account_none_names_waits_for_the_pools_own_nodes() -> None:
    """Defect 5: no node names an account; the pool's nodes are down and another account's
    node is the only live one. Its empty listing is no proof: the pool waits."""
    known = remember(
        {}, live={"node-1": "", "node-2": "", "node-3": ""}, answered={"node-1": 2, "node-3": 0}
    )
    assert known == {"node-1": ""}
    live = {"node-3": ""}
    listed = teardown_nodes(known, live=live, selected=set())
    step = teardown_step(known, live=live, listed=listed, failed={}, profiles=[])
    assert step.reason == "NoLiveNode", step
    assert "node-1" in step.message and "node-3" in step.message, step.message
    # node-1 back, and it shows none left: done.
    live = {"node-1": "", "node-3": ""}
    listed = teardown_nodes(known, live=live, selected={"node-1"})
    assert teardown_step(known, live=live, listed=listed, failed={}, profiles=[]).reason == ""
    # node-1 beats but does not answer: it is named, never "done".
    step = teardown_step(known, live=live, listed=listed, failed={"node-1": "503"}, profiles=[])
    assert step.reason == "NodeDown" and "node-1: 503" in step.message, step


def test_a_selector_moved_to_another_account_keeps_the_old_accounts_nodes() -> None:
    """Defect 4: the pool's nodes were shop's, nodeSelector now picks ads's node-3. shop's
    nodes stay the pool's until they show none of its profiles; teardown needs both."""
    live = {"node-1": "shop", "node-2": "shop", "node-3": "ads"}
    known = remember({}, live=live, answered={"node-1": 2, "node-2": 2})
    known = remember(known, live=live, answered={"node-3": 0}, holders={"node-3"})
    assert groups_of(known) == [("ads", {"node-3"}), ("shop", {"node-1", "node-2"})]
    # Only ads's node-3 live: shop's profiles cannot be seen, the pool waits for shop.
    only = {"node-3": "ads"}
    listed = teardown_nodes(known, live=only, selected={"node-3"})
    step = teardown_step(known, live=only, listed=listed, failed={}, profiles=[])
    assert step.reason == "NoLiveNode" and "account shop" in step.message, step
    # Both: every profile deleted where it is, then done.
    listed = teardown_nodes(known, live=live, selected={"node-3"})
    assert listed == {"node-1", "node-2", "node-3"}
    profiles = _on("node-1", "s0", "s1") + _on("node-3", "a0")
    step = teardown_step(known, live=live, listed=listed, failed={}, profiles=profiles)
    assert step.reason == "" and len(step.delete) == 3
    # Once shop's nodes show none, they are forgotten: the pool no longer waits for them.
    after = remember(known, live=live, answered={"node-1": 0, "node-2": 0, "node-3": 2})
    assert groups_of(after) == [("ads", {"node-3"})]


def test_a_pool_with_nothing_known_ends_when_its_nodes_show_none() -> None:
    step = teardown_step({}, live={"node-1": ""}, listed={"node-1"}, failed={}, profiles=[])
    assert step.reason == "" and step.delete == []


def test_a_spare_node_that_does_not_answer_holds_no_teardown() -> None:
    """A selected spare node whose key is refused, that never made or showed one of the
    pool's profiles, does not hold the pool in Deleting for ever; a remembered one does."""
    live = {"node-2": "", "node-3": ""}
    known = {"node-2": ""}
    listed = teardown_nodes(known, live=live, selected={"node-2", "node-3"})
    failed = {"node-3": "unauthenticated (HTTP 403)"}
    step = teardown_step(known, live=live, listed=listed, failed=failed, profiles=[])
    assert step.reason == "", step
    step = teardown_step(
        known, live=live, listed=listed, failed={"node-2": "server_error"}, profiles=[]
    )
    assert step.reason == "NodeDown" and "node-2" in step.message, step


def test_a_silent_node_that_only_showed_the_profiles_holds_no_teardown() -> None:
    """Second review, defect 3: replicas 2 on n1, n2; n3, a spare, listed both (so it was
    remembered). At delete n3's desktop closed; n1 and n2 delete everything and answer
    "none left". The pool sat in NodeDown "profiles on node(s) n3 wait" for ever, with
    no profile on n3. A silent node holds the pool only if a listed profile is on it, or
    if no node of its account answered."""
    live = {"n1": "", "n2": "", "n3": ""}
    known = remember({}, live=live, answered={"n1": 2, "n2": 2, "n3": 2}, holders={"n1", "n2"})
    groups = link({}, known=known, saw={"n1": {"n1", "n2"}, "n2": {"n1", "n2"}, "n3": {"n1", "n2"}})
    failed = {"n3": "its Local API refuses the key"}
    listed = {"n1", "n2", "n3"}
    step = teardown_step(known, live=live, listed=listed, failed=failed, profiles=[], groups=groups)
    assert step.reason == "" and step.delete == [], step
    # A profile shown on n3 still holds it, and the message says what the user can do.
    profiles = _on("n3", "p")
    step = teardown_step(
        known, live=live, listed=listed, failed=failed, profiles=profiles, groups=groups
    )
    assert step.reason == "NodeDown" and "n3" in step.message, step
    assert "terminate" in step.message, step.message
    # n3 alone answered nothing, and nobody else of its account did: it holds.
    step = teardown_step(
        known,
        live=live,
        listed=listed,
        failed={**failed, "n1": "x", "n2": "y"},
        profiles=[],
        groups=groups,
    )
    assert step.reason == "NodeDown" and "n3" in step.message, step


def test_unnamed_nodes_of_two_accounts_are_told_apart_by_what_they_saw() -> None:
    """Second review, defect 5: the pool on n1, n2 (no --node-account, really account A);
    both go down; nodeSelector moves to n5 (no --node-account, really B), which makes a
    profile. At delete n5 answers "none": with at most one account named, every
    remembered node was one group, and the pool ended Deleted with A's profiles left."""
    live = {"n1": "", "n2": ""}
    known = remember({}, live=live, answered={"n1": 2, "n2": 2})
    groups = link({}, known=known, saw={"n1": {"n1", "n2"}, "n2": {"n1", "n2"}})
    live = {"n5": ""}
    known = remember(known, live=live, answered={"n5": 0}, holders={"n5"})
    known = remember(known, live=live, answered={"n5": 1})
    groups = link(groups, known=known, saw={"n5": {"n5"}})
    assert known == {"n1": "", "n2": "", "n5": ""}
    assert sorted(sorted(nodes) for _, nodes in groups_of(known, groups)) == [["n1", "n2"], ["n5"]]
    listed = teardown_nodes(known, live=live, selected={"n5"}, groups=groups)
    step = teardown_step(known, live=live, listed=listed, failed={}, profiles=[], groups=groups)
    assert step.reason == "NoLiveNode" and "n1" in step.message, step
    # n1 back and showing none: done.
    live = {"n1": "", "n5": ""}
    listed = teardown_nodes(known, live=live, selected={"n5"}, groups=groups)
    step = teardown_step(known, live=live, listed=listed, failed={}, profiles=[], groups=groups)
    assert step.reason == "", step


def test_what_the_pool_remembers_of_nodes_is_bounded() -> None:
    """Minor: `groups` keeps only remembered nodes (a node forgotten is dropped)."""
    known = {"n1": ""}
    groups = link({"n9": "n9", "n1": "n1"}, known=known, saw={"n7": {"n7", "n1"}})
    assert set(groups) <= set(known), groups


def test_a_dead_node_that_holds_nothing_is_forgotten() -> None:
    """Minor: `nodes` never forgot a dead node (every node name ever seen, remarks too).
    One whose account's live nodes answer without a profile on it goes; one whose
    profiles nobody of its account can see stays."""
    known = {"n1": "", "n2": "", "n9": ""}
    groups = {"n1": "n1", "n2": "n1", "n9": "n1"}
    kept = prune(known, groups, answered={"n2"}, holders={"n1", "n2"})
    assert kept == {"n1": "", "n2": ""}, kept
    # nobody of n9's account answered: kept (it may hold profiles none can see).
    assert prune(known, groups, answered=set(), holders=set()) == known


def _pass(
    known: dict[str, str],
    groups: dict[str, str],
    live: dict[str, str],
    saw: dict[str, set[str]],
    profiles: list[NodeProfile],
) -> tuple[dict[str, str], dict[str, str]]:
    """What a pass keeps of nodes and groups after its listing (workflow.py `_pass`)."""
    holders = {p.node for p in profiles}
    answered = {n: len(s) for n, s in saw.items()}
    known = remember(known, live=live, answered=answered, holders=holders)
    groups = link(groups, known=known, saw=saw)
    known = prune(known, groups, answered=set(saw), holders=holders)
    return known, {n: g for n, g in groups.items() if n in known}


def test_a_node_is_not_pruned_through_a_label_another_node_reuses() -> None:
    """Review of issue 37 (rev37c), defect 1: labels were node names, and `link` joined
    every node to its stored label, so n1 (forgotten, then back in another account)
    joined the group n2 kept under the label "n1", its answers pruned n2, and the delete
    ended Deleted with account A's profiles still on n2."""
    a1, a2 = NodeProfile("a1", 0, "n1"), NodeProfile("a2", 1, "n2")
    both = {"n1": {"n1", "n2"}, "n2": {"n1", "n2"}}
    known, groups = _pass({}, {}, {"n1": "", "n2": ""}, both, [a1, a2])
    assert known == {"n1": "", "n2": ""} and groups == {"n1": "n1", "n2": "n1"}
    # n2 goes down; n1's desktop moves to account B: it lists none, and is forgotten.
    known, groups = _pass(known, groups, {"n1": ""}, {"n1": set()}, [])
    assert known == {"n2": ""}
    # The pool creates b1 on n1 (account B); the next listing shows it.
    known.setdefault("n1", "")
    b1 = NodeProfile("b1", 0, "n1")
    known, groups = _pass(known, groups, {"n1": ""}, {"n1": {"n1"}}, [b1])
    assert "n2" in known and groups["n1"] != groups["n2"]
    step = teardown_step(
        known, live={"n1": ""}, listed={"n1"}, failed={}, profiles=[], groups=groups
    )
    assert step.reason == "NoLiveNode" and "n2" in step.message, step


def test_a_silent_node_of_no_known_account_holds_the_teardown() -> None:
    """Review of issue 37 (rev37c), related to defect 1: n1 names A; n3 names none and
    has no group (it made b1, no listing has shown it yet), and may be another account's
    node. Its listing fails at delete: it went with A (the one account named), n1's
    "none left" ended the pool Deleted with b1 on n3. It holds until it answers."""
    known, groups = {"n1": "A", "n3": ""}, {"n1": "n1"}
    live = {"n1": "A", "n3": ""}
    step = teardown_step(
        known,
        live=live,
        listed={"n1", "n3"},
        failed={"n3": "HTTP refused"},
        profiles=[],
        groups=groups,
    )
    assert step.reason == "NodeDown" and "n3" in step.message, step
