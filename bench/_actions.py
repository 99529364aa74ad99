"""What Temporal Cloud bills, counted: Actions by category, for a window.

Two sources, and why each:

- **The server's own `action` counter** (`temporal server start-dev --metrics-port N`,
  `GET /metrics`), the figure the benches print. The frontend counts it in its telemetry
  interceptor, by `action_type`, with the rules Temporal Cloud meters by: `grpc_<call>` for
  the billed calls (start, signal, signal-with-start, query but the SDK's own
  `__temporal_workflow_metadata`, heartbeat, reset, schedules, ...), `command_<type>` for
  the billed commands of each completed workflow task (timer, activity, upsert, memo,
  continue-as-new, child workflow twice, external signal, Nexus), one `command_BatchMarkers`
  for all the markers of one task (local activities, side effects, patches),
  `message_UpdateWorkflowExecution_Acceptance`/`_Rejection` for updates, `activity_retry`
  for each retry polled. It is the only source for what never reaches a history:
  queries, heartbeats, rejected updates. It counts the whole namespace, whoever caused it
  (the worker's gauges, a `devicepool get`, the CLI), which is what a bill counts too.
  One difference from the bill: it counts an upsert of `TemporalChangeVersion` alone (the
  SDK's record of a `workflow.patched`), which Temporal Cloud does not bill; at most one per
  patch per run.
- **Histories** (`history_actions`), for what one workflow costs: the categories a history
  records (starts, continue-as-new, timers, activities scheduled and the retries their
  `ActivityTaskStarted.attempt` shows, upserts less `TemporalChangeVersion`, memo, marker
  batches, children, signals, accepted updates). Not queries, heartbeats or rejected
  updates; and an activity still retrying shows none of its retries yet.

The categories and what Temporal Cloud bills for each: docs/scaling.md, "What Temporal bills".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

# The server's `action_type`s (Prometheus spells `:` as `_`), by the category this bench
# prints. One Action each; a child workflow is two (`_Extra` is the second).
CATEGORIES: dict[str, str] = {
    "grpc_StartWorkflowExecution": "workflow start",
    "grpc_ExecuteMultiOperation": "workflow start",
    "grpc_SignalWithStartWorkflowExecution": "signal-with-start",
    "command_ContinueAsNewWorkflowExecution": "continue-as-new",
    "command_StartChildWorkflowExecution": "child workflow",
    "command_StartChildWorkflowExecution_Extra": "child workflow",
    "grpc_SignalWorkflowExecution": "signal",
    "command_SignalExternalWorkflowExecution": "signal",
    "grpc_QueryWorkflow": "query",
    "message_UpdateWorkflowExecution_Acceptance": "update accepted",
    "message_UpdateWorkflowExecution_Rejection": "update rejected",
    "command_StartTimer": "timer",
    "command_UpsertWorkflowSearchAttributes": "search-attribute upsert",
    "command_ModifyWorkflowProperties": "memo upsert",
    "command_ScheduleActivityTask": "activity start",
    "activity_retry": "activity retry",
    "grpc_RecordActivityTaskHeartbeat": "heartbeat",
    "grpc_RecordActivityTaskHeartbeatById": "heartbeat",
    "command_BatchMarkers": "markers",
    "grpc_ResetWorkflowExecution": "reset",
    "grpc_UpdateWorkflowExecutionOptions": "options update",
    "grpc_StartWorkflowExecution_UpdateWorkflowExecutionOptions": "options update",
    "grpc_ExecuteMultiOperation_UpdateWorkflowExecutionOptions": "options update",
    "grpc_CreateSchedule": "schedule",
    "grpc_UpdateSchedule": "schedule",
    "grpc_PatchSchedule": "schedule",
    "grpc_DeleteSchedule": "schedule",
    "command_ScheduleNexusOperation": "nexus",
    "command_RequestCancelNexusOperation": "nexus",
    "grpc_PauseWorkflowExecution": "pause",
    "grpc_UnpauseWorkflowExecution": "pause",
}
CHANGE_VERSION = "TemporalChangeVersion"  # the SDK's patch record: not billed
_LINE = re.compile(r"^action\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_actions(text: str, *, namespace: str = "default") -> Counter[str]:
    """The server's `action` counter in a Prometheus scrape, by `action_type`, for
    `namespace` (the server's own `temporal_system` work is not the user's bill)."""
    found: Counter[str] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        if labels.get("namespace") != namespace:
            continue
        # A newer server may spell the update messages with `:`; same Action.
        kind = labels.get("action_type", "").replace(":", "_")
        found[kind] += int(float(match["value"]))
    return found


def categorise(actions: Mapping[str, float]) -> Counter[str]:
    """`action_type` counts by category; a type this table does not know keeps its own
    name (`other <type>`), so a new billed call shows instead of vanishing."""
    found: Counter[str] = Counter()
    for kind, n in actions.items():
        if n:
            found[CATEGORIES.get(kind, f"other {kind}")] += int(n)
    return found


def since(before: Mapping[str, float], after: Mapping[str, float]) -> Counter[str]:
    """What a counter gained between two scrapes (a type first seen in `after`: all of it)."""
    gained: Counter[str] = Counter()
    for kind, n in after.items():
        if n - before.get(kind, 0):
            gained[kind] = int(n - before.get(kind, 0))
    return gained


async def scrape(port: int, *, namespace: str = "default") -> Counter[str]:
    """The dev server's `action` counter now (its `--metrics-port`), by `action_type`."""
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"http://127.0.0.1:{port}/metrics")
        response.raise_for_status()
    return parse_actions(response.text, namespace=namespace)


def breakdown(categories: Mapping[str, float], *, scale: float = 1.0) -> str:
    """`query 33.0, heartbeat 21.0, ...`: categories times `scale`, largest first (under 1:
    two significant digits, so a rare category does not read 0.0)."""
    ordered = sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{name} {_figure(n * scale)}" for name, n in ordered if n)


def _figure(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.2g}"


def heartbeat_interval(timeout: float, *, cap: float) -> float:
    """How often the SDK lets an activity's heartbeats reach the server, for one that beats
    at least that often: 0.8 x its heartbeat timeout, or its worker's throttle cap (the SDK's
    `max_heartbeat_throttle_interval`) if shorter."""
    return min(0.8 * timeout, cap)


def heartbeats_per_hour(timeouts: Iterable[float], *, cap: float) -> float:
    """The heartbeats an hour that reach the server from activities of these heartbeat
    timeouts (seconds; 0: none) that beat at every poll. A window shorter than a few of their
    intervals cannot count them: activities started together beat together, and a
    two-minute window can fall between two eight-minute beats."""
    return sum(3600 / heartbeat_interval(t, cap=cap) for t in timeouts if t > 0)


def history_actions(events: Iterable[HistoryEvent]) -> Counter[str]:
    """The Actions a run of history events records, by category (what it cannot show:
    see the module docstring). A run's own start counts when a client started it; one
    continued-as-new is counted by the run before (its `continue-as-new`), a child by its
    parent. A signal-with-start that started the run shows as a start and a signal: two
    here, one Action on the bill."""
    found: Counter[str] = Counter()
    marker_tasks: set[int] = set()
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            if not started.continued_execution_run_id and not started.HasField(
                "parent_workflow_execution"
            ):
                found["workflow start"] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            found["continue-as-new"] += 1
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            found["child workflow"] += 2
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            found["timer"] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            found["activity start"] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            retries = event.activity_task_started_event_attributes.attempt - 1
            if retries > 0:
                found["activity retry"] += retries
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes
            if set(fields.search_attributes.indexed_fields) - {CHANGE_VERSION}:
                found["search-attribute upsert"] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            found["memo upsert"] += 1
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            task = event.marker_recorded_event_attributes.workflow_task_completed_event_id
            if task not in marker_tasks:
                marker_tasks.add(task)
                found["markers"] += 1
        elif kind == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            found["signal"] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            # A workflow's signal is billed once, at its sender (the event above).
            if not event.workflow_execution_signaled_event_attributes.HasField(
                "external_workflow_execution"
            ):
                found["signal"] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            found["update accepted"] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
            found["options update"] += 1
    return found
