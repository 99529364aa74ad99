"""A pool workflow's recent history as `{time, type, detail}` rows, for `describe`.

Bookkeeping events (workflow tasks, activity starts, markers) are left out;
activity events are named by their activity type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import RPCTimeoutOrCancelledError, WorkflowHandle
from temporalio.service import RPCError

from devicepool.client._results import iso

_SKIPPED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
    EventType.EVENT_TYPE_MARKER_RECORDED,
}


async def recent_events(
    handle: WorkflowHandle[Any, Any], *, limit: int, rpc_timeout: timedelta
) -> list[dict[str, Any]]:
    """The last `limit` rows of the history; empty when the server does not answer."""
    events: list[dict[str, Any]] = []
    activity_names: dict[int, str] = {}
    try:
        async for event in _events(handle, rpc_timeout):
            row = event_row(event, activity_names)
            if row is not None:
                events.append(row)
    except (RPCError, RPCTimeoutOrCancelledError):
        return []
    return events[-limit:]


async def _events(
    handle: WorkflowHandle[Any, Any], rpc_timeout: timedelta
) -> AsyncIterator[HistoryEvent]:
    async for event in handle.fetch_history_events(rpc_timeout=rpc_timeout):
        yield event


def event_row(event: HistoryEvent, activity_names: dict[int, str]) -> dict[str, Any] | None:
    """One history event as `{time, type, detail}` (None for bookkeeping events).

    `activity_names` maps each scheduled event id to its activity type; it is
    filled as the scheduled events go by, so rows must be made in history order.
    """
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        activity_names[event.event_id] = (
            event.activity_task_scheduled_event_attributes.activity_type.name
        )
    if kind in _SKIPPED:
        return None
    name = EventType.Name(kind).removeprefix("EVENT_TYPE_")
    type_ = "".join(part.capitalize() for part in name.split("_"))
    detail = ""
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        detail = activity_names[event.event_id]
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        attrs = event.activity_task_completed_event_attributes
        detail = activity_names.get(attrs.scheduled_event_id, "")
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        attrs_f = event.activity_task_failed_event_attributes
        detail = f"{activity_names.get(attrs_f.scheduled_event_id, '')}: {attrs_f.failure.message}"
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
        attrs_t = event.activity_task_timed_out_event_attributes
        detail = activity_names.get(attrs_t.scheduled_event_id, "")
    elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        detail = event.workflow_execution_signaled_event_attributes.signal_name
    elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        detail = (
            event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        )
    elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
        timeout = event.timer_started_event_attributes.start_to_fire_timeout
        detail = f"{timeout.ToTimedelta().total_seconds():g}s"
    elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        detail = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
    elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
        detail = (
            event.child_workflow_execution_completed_event_attributes.workflow_execution.workflow_id
        )
    elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED:
        attrs_c = event.child_workflow_execution_failed_event_attributes
        detail = f"{attrs_c.workflow_execution.workflow_id}: {attrs_c.failure.message}"
    elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        detail = "history handed to a new run"
    elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
        detail = event.workflow_task_failed_event_attributes.failure.message
    return {"time": iso(event.event_time.ToDatetime(tzinfo=UTC)), "type": type_, "detail": detail}
