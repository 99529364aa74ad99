"""Issue 37 item 10, pure: a live node whose Local API does not answer (plan.py).

Its profiles keep their slots but are not ready; nothing is created, opened or
deleted on it; the other nodes go on. No server.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from devicepool.workflows.browserpool.plan import NodeProfile, Placement, forget_replacements
from tests.helpers.browser_plan import place


def test_an_unreachable_nodes_profiles_keep_their_slots_and_the_others_go_on() -> None:
    profiles = [NodeProfile(f"a{i}", i, "node-1", True) for i in range(2)]
    profiles += [NodeProfile(f"b{i}", i + 2, "node-2", False) for i in range(2)]
    placed = place(5, profiles, {"node-1", "node-2"}, unreachable={"node-1"})
    # node-1's two keep slots 0 and 1: no create for them, none on node-1.
    assert placed.create == [(4, "node-2")]
    assert [p.id for p in placed.waiting] == ["a0", "a1"]
    # Counted neither ready nor lost; node-2's are held and opened.
    assert [p.id for p in placed.held] == ["b0", "b1"]
    assert placed.lost == []
    assert placed.delete == []
    assert placed.open == [("b0", "node-2")]


def test_nothing_is_touched_on_an_unreachable_node_even_past_replicas() -> None:
    profiles = [NodeProfile(f"a{i}", i, "node-1") for i in range(3)]
    placed = place(1, profiles, {"node-1", "node-2"}, failures={"a0": 9}, unreachable={"node-1"})
    assert placed.delete == [] and placed.open == [] and placed.create == []
    assert [p.id for p in placed.waiting] == ["a0"]


def test_with_every_node_unreachable_nothing_is_created() -> None:
    placed = place(3, [], {"node-1", "node-2"}, unreachable={"node-1", "node-2"})
    assert placed.create == [] and placed.held == []


def test_counted_lost_its_slots_are_held_again_on_the_others() -> None:
    """Past nodeLostAfterSeconds the workflow passes the node as lost, not alive."""
    profiles = [NodeProfile(f"a{i}", i, "node-1") for i in range(2)]
    placed = place(4, profiles, {"node-2", "node-3"}, {"node-1"}, open_wanted=False)
    assert Counter(node for _, node in placed.create) == {"node-2": 2, "node-3": 2}
    assert [p.id for p in placed.lost] == ["a0", "a1"]


def _back(open_originals: bool, *, open_wanted: bool = True) -> Any:
    """node-1 was counted lost and its slots 0..2 made again on node-2 (`rep*`); node-1's
    Local API answers again, its originals (their cookies) closed unless `open_originals`."""
    old = [NodeProfile(f"old{i}", i, "node-1", open_originals) for i in range(3)]
    own = [NodeProfile(f"n2-{i}", i, "node-2", True) for i in range(3, 6)]
    rep = [NodeProfile(f"rep{i}", i, "node-2", True) for i in range(3)]
    return place(
        6,
        old + own + rep,
        {"node-1", "node-2"},
        open_wanted=open_wanted,
        replacements=["rep0", "rep1", "rep2"],
    )


def test_a_lost_node_back_keeps_its_originals_and_the_replacements_serve_meanwhile() -> None:
    """Review of issue 37, defect 2: the rule "keep an open one" deleted node-1's originals
    (closed, as its desktop restarted) as "a second profile" and kept the replacements."""
    first = _back(open_originals=False)
    assert not {pid for pid, _ in first.delete} & {"old0", "old1", "old2"}, first.why
    # The replacements serve until the originals are open again; node-1 opens one a pass.
    assert first.delete == [], first.why
    assert {p.id for p in first.held} == {"rep0", "rep1", "rep2", "n2-3", "n2-4", "n2-5"}
    assert first.open == [("old0", "node-1")]
    assert first.create == []


def test_once_the_originals_serve_the_replacements_go() -> None:
    back = _back(open_originals=True)
    assert sorted(pid for pid, _ in back.delete) == ["rep0", "rep1", "rep2"], back.why
    assert {p.id for p in back.held} == {"old0", "old1", "old2", "n2-3", "n2-4", "n2-5"}
    assert "rep0" in back.why and "original" in back.why["rep0"], back.why
    # Without `open`, nothing waits for a browser: the replacements go at once.
    closed = _back(open_originals=False, open_wanted=False)
    assert sorted(pid for pid, _ in closed.delete) == ["rep0", "rep1", "rep2"], closed.why


def _two_replacements(open_wanted: bool = True, r_open: bool = False) -> Placement:
    """O (slot 0) on n1, lost for good but still listed; R made on n2 (a replacement, kept
    as one: slot 0 always lists O and R); months later n2 was lost a while and R3 made on
    n3; n2 is back with R closed."""
    return place(
        1,
        [
            NodeProfile("O", 0, "n1"),
            NodeProfile("R", 0, "n2", open=r_open),
            NodeProfile("R3", 0, "n3", open=True),
        ],
        {"n2", "n3"},
        {"n1"},
        open_wanted=open_wanted,
        replacements=["R", "R3"],  # oldest first
    )


def test_between_two_replacements_the_older_keeps_the_slot() -> None:
    """Second review, defect 2: both holders replacements, no original among them: the old
    rule "an open one first" kept R3 (minutes old) and deleted R, which had served for
    months (its cookies)."""
    back = _two_replacements()
    assert [pid for pid, _ in back.delete] == [], back.why
    # R3 serves on until R is open; R is opened.
    assert [p.id for p in back.held] == ["R3"] and back.open == [("R", "n2")]
    settled = _two_replacements(r_open=True)
    assert [pid for pid, _ in settled.delete] == ["R3"], settled.why
    assert [p.id for p in settled.held] == ["R"]
    closed = _two_replacements(open_wanted=False)
    assert [pid for pid, _ in closed.delete] == ["R3"] and [p.id for p in closed.held] == ["R"]


def test_a_replacement_whose_original_the_registry_forgot_is_one_like_the_others() -> None:
    """Second review, defect 2: O's node n1 retired for good; O stays in the account and in
    every listing, so R (made on n2 for O's slot) stayed a replacement for ever, and lost
    to any profile counted original. Once the registry forgot n1 (7 days silent: neither
    live nor lost), R is forgotten as a replacement: it holds the slot's cookies now."""
    profiles = [NodeProfile("O", 0, "n1"), NodeProfile("R", 0, "n2", open=True)]
    # n1 lost (the registry remembers it): R stays a replacement.
    kept = forget_replacements(["R"], profiles, nodes={"n1", "n2"})
    assert kept == ["R"]
    # n1 forgotten by the registry: R is an original now.
    assert forget_replacements(["R"], profiles, nodes={"n2"}) == []
    # Gone from the listings, or its slot's only profile: forgotten (as before).
    assert forget_replacements(["R", "X"], profiles[1:], nodes={"n1", "n2"}) == []
