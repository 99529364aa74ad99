"""A pool's recent events for `describe`: the pool's own (query `events`), as kubectl shows them.

The pool keeps a small ring of what happened to it (`workflows/reconciler/events.py`):
scaled, created N, replaced a device, remediation paused, creates backed off,
teardown progress. Rows are `{time, type, reason, message, count, firstTime}`
(camelCase `PoolEvent` JSON). Raw Temporal history (`TimerStarted 659.532s`)
is for the Web UI, not for this.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError

from devicepool.api.names import QUERY_EVENTS
from devicepool.workflows.reconciler.events import PoolEvents


async def recent_events(
    handle: WorkflowHandle[Any, Any], *, limit: int, rpc_timeout: timedelta
) -> list[dict[str, Any]] | None:
    """The pool's last `limit` events, oldest first; None when no worker answers the query."""
    try:
        answer = await handle.query(QUERY_EVENTS, result_type=PoolEvents, rpc_timeout=rpc_timeout)
    except (
        RPCError,
        RPCTimeoutOrCancelledError,
        WorkflowQueryFailedError,
        WorkflowQueryRejectedError,
    ):
        # No worker, or one from before the query: `describe` says so.
        return None
    return [e.model_dump(mode="json", by_alias=True) for e in answer.events[-limit:]]
