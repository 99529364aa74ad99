"""What one BrowserPool pass sees (workflows/browserpool/observe.py): pure, no server.

Issue 38: the pass's view was assembled inside the workflow (its listings merged, its
troubled nodes dated, their events said once) and could only be tested with a server.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.node_models import NodeInfo, ProfileView
from devicepool.workflows.browserpool.observe import (
    NODE_UNREACHABLE,
    NodeTrouble,
    listed_nodes,
    merge_listings,
    mixed_accounts,
    node_troubles,
    trouble_news,
)
from devicepool.workflows.browserpool.plan import NodeProfile

NOW = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


def info(node: str, account: str = "", *, error: str = "") -> NodeInfo:
    return NodeInfo(
        node=node, account=account, last_seen=NOW, api_healthy=not error, api_error=error
    )


def test_a_profile_is_open_only_where_it_runs_and_listed_once() -> None:
    a = ProfileView(id="a", slot="0", node="node-1", open=True)
    profiles, failed, makers = merge_listings(
        {
            # node-2 lists node-1's profile open too (an odd answer): only node-1 says it.
            "node-2": [
                a.model_copy(update={"open": True}),
                ProfileView(id="b", slot="1", node="node-2"),
            ],
            "node-1": [a, ProfileView(id="x", slot="-1", node="node-1")],
            "node-3": ("NodeUnreachable", "no answer in 15s"),
            "node-4": [],
        }
    )
    assert profiles == [NodeProfile("a", 0, "node-1", True), NodeProfile("b", 1, "node-2")]
    assert failed == {"node-3": ("NodeUnreachable", "no answer in 15s")}
    assert makers == {"node-2": {"node-1", "node-2"}, "node-1": {"node-1"}, "node-4": set()}

    closed = ProfileView(id="a", slot="0", node="node-1", open=False)
    again, _, _ = merge_listings({"node-1": [closed], "node-2": [a]})
    assert again == [NodeProfile("a", 0, "node-1", False)]


def test_a_node_not_answering_is_dated_from_its_first_failure_and_lost_past_the_limit() -> None:
    failed = {"node-1": (NODE_UNREACHABLE, "no answer in 15s"), "node-9": (NODE_UNREACHABLE, "x")}
    since = {"node-1": NOW - timedelta(seconds=50), "node-2": NOW - timedelta(seconds=500)}
    troubles, kept = node_troubles(
        failed,
        [info("node-1", error="timeout: /health"), info("node-2")],
        since,
        now=NOW,
        lost_after=timedelta(seconds=60),
    )
    # node-2 answered: forgotten; node-9 is not a live selected node: dated, not troubled.
    assert kept == {"node-1": NOW - timedelta(seconds=50), "node-9": NOW}
    assert list(troubles) == ["node-1"]
    t = troubles["node-1"]
    assert not t.lost and t.since == NOW - timedelta(seconds=50)
    assert t.cause == "no answer in 15s; its last beat: timeout: /health"
    later, _ = node_troubles(
        failed,
        [info("node-1")],
        kept,
        now=NOW + timedelta(seconds=10),
        lost_after=timedelta(seconds=60),
    )
    assert later["node-1"].lost


def test_a_nodes_trouble_is_said_once_a_change_not_every_pass() -> None:
    t = NodeTrouble(NODE_UNREACHABLE, "no answer", NOW)
    news, said = trouble_news({"node-1": t}, {})
    assert news == [(NODE_UNREACHABLE, "node node-1: no answer")]
    assert trouble_news({"node-1": t}, said)[0] == []
    lost = NodeTrouble(NODE_UNREACHABLE, "no answer", NOW, lost=True)
    news, said = trouble_news({"node-1": lost}, said)
    assert news == [
        (NODE_UNREACHABLE, "node node-1: no answer (counted lost: its profiles are held elsewhere)")
    ]
    # It answered: forgotten, so a new trouble is said again.
    assert trouble_news({}, said) == ([], {})


def test_nodes_of_two_accounts_are_mixed_and_a_foreign_node_is_not_listed() -> None:
    assert mixed_accounts([info("node-1", "a"), info("node-2", "b"), info("node-3")]) == {
        "node-1": "a",
        "node-2": "b",
    }
    assert mixed_accounts([info("node-1", "a"), info("node-3")]) == {}
    unselected, listed = listed_nodes(
        {"node-1": "a", "node-2": "a", "node-3": "b", "node-4": "b", "node-5": ""},
        alive={"node-1"},
        known={"node-4": "b"},
        account="a",
    )
    # node-3 names another account and never held the pool's: not asked. node-4 did.
    assert unselected == {"node-2", "node-4", "node-5"}
    assert listed == ["node-1", "node-2", "node-4", "node-5"]
