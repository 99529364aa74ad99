"""Is my pool running? The one place activities ask Temporal (not the provider) about workflows.

`pool_running` (a health check, a batch): the pool's workflow id runs a run of the
same chain (first run id) as the run that started the asker, so a hand-over never
misfires and a pool applied again under the name is another pool. `check_pool` (the
orphan sweep): any chain, but the same account. `still_running` and
`workflows_running` ask of any workflow id. Why: docs/pools.md, "Health".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import PoolRunInput, PoolRunResult
from devicepool.api.names import SA_ACCOUNT, pool_workflow_id

__all__ = [
    "NOT_FOUND",
    "PoolCheck",
    "check_pool",
    "pool_running",
    "still_running",
    "workflows_running",
]

NOT_FOUND = "NOT_FOUND"
_KEY_ACCOUNT = SearchAttributeKey.for_keyword(SA_ACCOUNT)


async def pool_running(client: Client, input: PoolRunInput) -> PoolRunResult:
    """Describe the pool's latest run (and, once, the run that started the asker)."""
    found, _ = await _pool_run(client, input)
    return found


@dataclass(frozen=True)
class PoolCheck:
    """What Temporal says of the pool a device names."""

    orphaned: bool
    # RUNNING, TERMINATED, ..., NOT_FOUND, or "runs on account X"
    state: str


async def check_pool(client: Client, pool: str, account: str) -> PoolCheck:
    """Whether devices of `pool` at `account` are orphans: no pool of that name runs there.

    Raises `RPCError` when Temporal does not answer (not knowing is not orphaned).
    """
    try:
        found, latest = await _pool_run(client, PoolRunInput(workflow_id=pool_workflow_id(pool)))
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            # No workflow can have that id (a label devicepool never wrote):
            # no pool will ever list the device either.
            return PoolCheck(orphaned=True, state="no such pool (invalid name)")
        raise
    if not found.running or latest is None:
        return PoolCheck(orphaned=True, state=found.status)
    # A pool started without its attributes (a bare test, the stock CLI) is
    # taken to be on this account: when in doubt, a device is not an orphan.
    runs_on = latest.typed_search_attributes.get(_KEY_ACCOUNT)
    if runs_on and runs_on != account:
        return PoolCheck(orphaned=True, state=f"runs on account {runs_on}")
    return PoolCheck(orphaned=False, state=found.status)


async def still_running(client: Client, workflow_id: str) -> bool:
    """Whether the id's latest run runs; not knowing (an RPC error) counts as running."""
    try:
        return _runs(await _describe(client, workflow_id))
    except RPCError:
        return True


async def workflows_running(client: Client, workflow_ids: Iterable[str]) -> list[str]:
    """The ids whose latest run runs; an id Temporal does not know is not running."""
    return [wid for wid in workflow_ids if _runs(await _describe(client, wid))]


def _runs(described: WorkflowExecutionDescription | None) -> bool:
    return described is not None and described.status == WorkflowExecutionStatus.RUNNING


async def _pool_run(
    client: Client, input: PoolRunInput
) -> tuple[PoolRunResult, WorkflowExecutionDescription | None]:
    latest = await _describe(client, input.workflow_id)
    if latest is None:
        # Unknown to Temporal: ended and past its retention, or never there.
        found = PoolRunResult(running=False, first_run_id=input.first_run_id, status=NOT_FOUND)
        return found, None
    current_chain = _first_run_id(latest)
    chain = input.first_run_id
    if not chain and input.run_id:
        started = await _describe(client, input.workflow_id, run_id=input.run_id)
        chain = _first_run_id(started) if started is not None else ""
    # Nothing to compare with (asked without a chain, or the asker's parent
    # run is past retention): trust the id.
    chain = chain or current_chain
    status = WorkflowExecutionStatus(latest.status).name if latest.status else ""
    running = latest.status == WorkflowExecutionStatus.RUNNING and current_chain == chain
    found = PoolRunResult(
        running=running, first_run_id=chain, status=status, latest_first_run_id=current_chain
    )
    return found, latest


async def _describe(
    client: Client, workflow_id: str, *, run_id: str | None = None
) -> WorkflowExecutionDescription | None:
    """The run's description; None when Temporal does not know it."""
    try:
        return await client.get_workflow_handle(workflow_id, run_id=run_id or None).describe()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return None


def _first_run_id(described: WorkflowExecutionDescription) -> str:
    info = described.raw_description.workflow_execution_info
    return info.first_run_id or info.execution.run_id
