"""Every run of a workflow, read from the runs' own histories.

Tests that read a chain of continue-as-new runs walk it back from the latest
run (each run's started event names the run it continued), not through
visibility (`list_workflows`), which lags the server on a loaded machine.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowHistory


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
