"""`BrowserKind`'s pass code where it runs without a workflow: a run thrown away mid-call."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio import workflow

from devicepool.activities.node_models import LiveNodesResult, NodeInfo, ProfileView
from devicepool.activities.settings import PoolSettings
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.workflows.browserpool import act as acting
from devicepool.workflows.browserpool import calls
from devicepool.workflows.browserpool.kind import BrowserKind
from devicepool.workflows.browserpool.messages import BrowserPoolState
from devicepool.workflows.browserpool.observe import Observed
from devicepool.workflows.browserpool.plan import Placement


async def test_a_create_in_flight_when_the_run_is_thrown_away_closes_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run terminated (or evicted) while a create is in flight has its coroutines closed
    by the garbage collector, outside the workflow's event loop. `act.create` checked for a
    deletion in a `finally`, so the close called `workflow.cancellation_reason()` there and
    raised `Not in workflow event loop` ("Exception ignored in Reconciler._pass", which
    pytest turns into an error at the end of tests/browserpool/test_bp_node_trouble.py)."""
    held: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def create_on(*args: Any) -> Any:
        return await held

    monkeypatch.setattr(calls, "create_on", create_on)
    host: Any = SimpleNamespace(s=BrowserPoolState(), name="bp-gc")
    kind = BrowserKind(host)
    seen = Observed(spec=BrowserPoolSpec(replicas=1), now=datetime.now(UTC), generation=1)
    creating = acting.create(kind, Placement(create=[(0, "node-1")]), seen)
    assert creating.send(None) is held  # suspended in the create
    creating.close()  # as the collector closes a thrown-away run's coroutine
    held.cancel()


async def test_a_node_seen_lost_then_back_within_a_pass_keeps_its_profiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass read the node registry twice: the nodes the selector picks, then every live
    node. A node whose beat landed between the two reads was lost in the first and alive
    in the second, so it counted as "no longer matches nodeSelector" and its profiles
    (their cookies) were deleted (`devicepool dev` under load, issue 38's CI). One read
    now: a selected node is alive or lost in it, never unselected."""
    now = datetime.now(UTC)
    node_1 = NodeInfo(node="node-1", labels={"node": "node-1"}, account="acct", last_seen=now)
    node_2 = NodeInfo(node="node-2", labels={"node": "node-2"}, account="acct", last_seen=now)
    # node-1's beat lands between the first read and the next.
    reads = iter(
        [
            LiveNodesResult(alive=[node_2], lost=[node_1]),
            LiveNodesResult(alive=[node_1, node_2], lost=[]),
        ]
    )

    async def live_nodes(selector: Any, *, lost_after_seconds: float) -> LiveNodesResult:
        return next(reads)

    async def list_on(nodes: list[str], pool: str) -> dict[str, list[ProfileView]]:
        mine = [
            ProfileView(id=f"p{slot}", slot=str(slot), node=f"node-{slot % 2 + 1}", open=True)
            for slot in range(4)
        ]
        return {node: mine for node in nodes}

    monkeypatch.setattr(calls, "live_nodes", live_nodes)
    monkeypatch.setattr(calls, "list_on", list_on)
    monkeypatch.setattr(workflow, "now", lambda: now)
    monkeypatch.setattr(workflow, "cancellation_reason", lambda: None)
    host: Any = SimpleNamespace(
        s=BrowserPoolState(account="acct"),
        spec=BrowserPoolSpec(replicas=4),
        name="bp-race",
        settings=PoolSettings(node_lost_after_seconds=6.0),
        happened=lambda *happened: None,
    )
    kind = BrowserKind(host)
    seen = await kind.observe()
    placement = kind.decide(seen)
    assert placement is not None
    assert placement.delete == [], placement.why
    assert seen.lost == {"node-1"} and seen.unselected == set(), seen
    assert sorted(slot for slot, _ in placement.create) == [0, 2]  # held on node-2 meanwhile
