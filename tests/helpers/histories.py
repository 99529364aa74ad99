"""Every run of a workflow, read from the runs' own histories, and a readable digest of them.

Tests that read a chain of continue-as-new runs walk it back from the latest
run (each run's started event names the run it continued), not through
visibility (`list_workflows`), which lags the server on a loaded machine.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS


async def run_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """The history of every run of `workflow_id`, first run first."""
    runs: list[WorkflowHistory] = []
    run_id: str | None = None  # the latest run
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id
        if not run_id:
            break
    runs.reverse()
    return runs


async def replay_every_run(
    client: Client, workflow_id: str, *, marked_by: str
) -> list[WorkflowHistory]:
    """Every run of `workflow_id` replayed on this build's workflows (a nondeterministic one
    raises), the marker of the patch `marked_by` (a changed path) found in one of them; the
    runs' histories, first run first."""
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    runs = await run_histories(client, workflow_id)
    for history in runs:
        await replayer.replay_workflow(history)
    patch = marked_by.encode()
    marked = any(patch in e.SerializeToString() for history in runs for e in history.events)
    assert marked, f"the marker of patch {marked_by!r} in no run"
    return runs


async def task_failures(client: Client, workflow_id: str) -> list[str]:
    """Every failed workflow task in every run of `workflow_id`, with its message.

    Not the server's `UnhandledCommand`: it refuses a task that would close the run (a
    continue-as-new) while a new event (a signal) arrived, and the SDK runs the task again
    with it. That is Temporal's race handling, not the workflow's code failing; a loaded CI
    machine made one in test_pool_versioned_upgrade (a `wake` during the hand-over)."""
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    failures = []
    for history in await run_histories(client, workflow_id):
        run_id = history.events[
            0
        ].workflow_execution_started_event_attributes.original_execution_run_id
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attributes = event.workflow_task_failed_event_attributes
                if attributes.cause == unhandled:
                    continue
                failures.append(f"{workflow_id} {run_id}: {attributes.failure.message[:300]}")
    return failures


async def history_digest(client: Client, workflow_id: str) -> str:
    """A compact, readable trace of a workflow's runs (for failure messages)."""
    lines: list[str] = []
    for history in await run_histories(client, workflow_id):
        for event in history.events:
            kind = event.WhichOneof("attributes") or ""
            if "workflow_task" in kind:
                continue
            detail = ""
            if event.HasField("activity_task_scheduled_event_attributes"):
                detail = event.user_metadata.summary.data.decode()
            elif event.HasField("workflow_execution_signaled_event_attributes"):
                attrs = event.workflow_execution_signaled_event_attributes
                detail = attrs.signal_name + " " + attrs.input.payloads[0].data.decode()[:160]
            elif event.HasField("activity_task_failed_event_attributes"):
                detail = event.activity_task_failed_event_attributes.failure.message[:160]
            elif event.HasField("timer_started_event_attributes"):
                detail = str(
                    event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
                )
            stamp = event.event_time.ToDatetime().strftime("%M:%S.%f")[:-3]
            lines.append(f"{stamp} {kind.removesuffix('_event_attributes')} {detail}")
    return "\n".join(lines)
