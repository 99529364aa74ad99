"""Activity `pool_running`: asks Temporal (not the provider) whether a health check's pool is still there.

A health check is started with `ParentClosePolicy.ABANDON`, so nothing ends it
when its pool is terminated, fails or completes. Each cycle it asks this first
(`workflows/health/workflow.py`), and ends when the answer is no.

"Still there" means: the pool's workflow id has a running run, and that run
belongs to the same chain of runs as the one that started the check (same
first run id). A pool continuing-as-new keeps its id running throughout (the
next run starts in the same server transaction that closes the last), so this
never misfires on a hand-over; a pool deleted and applied again under the same
name is another chain, and its new run must not keep an old pool's check.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import PoolRunInput, PoolRunResult

__all__ = ["NOT_FOUND", "pool_running"]

NOT_FOUND = "NOT_FOUND"


async def pool_running(client: Client, input: PoolRunInput) -> PoolRunResult:
    """Describe the pool's latest run (and, once, the run that started the check)."""
    latest = await _describe(client, input.workflow_id)
    if latest is None:
        # Unknown to Temporal: ended and past its retention, or never there.
        return PoolRunResult(running=False, first_run_id=input.first_run_id, status=NOT_FOUND)
    current_chain = _first_run_id(latest)
    chain = input.first_run_id
    if not chain and input.run_id:
        started = await _describe(client, input.workflow_id, run_id=input.run_id)
        chain = _first_run_id(started) if started is not None else ""
    # Nothing to compare with (a check started without a parent, or its
    # parent's run is past retention): trust the id, as before chains were known.
    chain = chain or current_chain
    status = WorkflowExecutionStatus(latest.status).name if latest.status else ""
    running = latest.status == WorkflowExecutionStatus.RUNNING and current_chain == chain
    return PoolRunResult(
        running=running, first_run_id=chain, status=status, latest_first_run_id=current_chain
    )


async def _describe(
    client: Client, workflow_id: str, *, run_id: str | None = None
) -> WorkflowExecutionDescription | None:
    try:
        return await client.get_workflow_handle(workflow_id, run_id=run_id or None).describe()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return None


def _first_run_id(described: WorkflowExecutionDescription) -> str:
    info = described.raw_description.workflow_execution_info
    return info.first_run_id or info.execution.run_id
