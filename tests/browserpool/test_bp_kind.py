"""`BrowserKind`'s pass code where it runs without a workflow: a run thrown away mid-call."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.workflows.browserpool import calls
from devicepool.workflows.browserpool.kind import BrowserKind
from devicepool.workflows.browserpool.messages import BrowserPoolState
from devicepool.workflows.browserpool.observe import Observed
from devicepool.workflows.browserpool.plan import Placement


async def test_a_create_in_flight_when_the_run_is_thrown_away_closes_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run terminated (or evicted) while a create is in flight has its coroutines closed
    by the garbage collector, outside the workflow's event loop. `_create` checked for a
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
    creating = kind._create(Placement(create=[(0, "node-1")]), seen)
    assert creating.send(None) is held  # suspended in the create
    creating.close()  # as the collector closes a thrown-away run's coroutine
    held.cancel()
