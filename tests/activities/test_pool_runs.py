"""`pool_running`: is a health check's pool still there? (activities/pool_runs.py)

Against a stand-in for the Temporal client: the answers a describe gives are
the whole input, so every branch is checked without a server (the workflow
tests run it against the dev server).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import PoolRunInput
from devicepool.activities.pool_runs import NOT_FOUND, pool_running

POOL = "devicepool/p"


def run(status: WorkflowExecutionStatus, first_run_id: str, run_id: str = "r") -> Any:
    info = SimpleNamespace(first_run_id=first_run_id, execution=SimpleNamespace(run_id=run_id))
    return SimpleNamespace(
        status=status, raw_description=SimpleNamespace(workflow_execution_info=info)
    )


class FakeClient:
    """Runs by (workflow id, run id or None for the latest); absent ones are NOT_FOUND."""

    def __init__(self, runs: dict[tuple[str, str | None], Any]) -> None:
        self.runs = runs
        self.asked: list[tuple[str, str | None]] = []

    def get_workflow_handle(self, workflow_id: str, *, run_id: str | None = None) -> Any:
        async def describe() -> Any:
            self.asked.append((workflow_id, run_id))
            if (workflow_id, run_id) not in self.runs:
                raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
            return self.runs[(workflow_id, run_id)]

        return SimpleNamespace(describe=describe)


async def ask(client: FakeClient, **fields: Any) -> Any:
    return await pool_running(client, PoolRunInput(workflow_id=POOL, **fields))  # type: ignore[arg-type]


async def test_the_same_pool_running_is_running() -> None:
    client = FakeClient({(POOL, None): run(WorkflowExecutionStatus.RUNNING, "chain-a")})
    found = await ask(client, first_run_id="chain-a")
    assert (found.running, found.first_run_id, found.status) == (True, "chain-a", "RUNNING")


async def test_a_pool_continued_as_new_is_the_same_pool() -> None:
    # The check was started by run 1; the pool is at run 3 of the same chain.
    client = FakeClient(
        {
            (POOL, None): run(WorkflowExecutionStatus.RUNNING, "run-1", run_id="run-3"),
            (POOL, "run-1"): run(WorkflowExecutionStatus.CONTINUED_AS_NEW, "run-1", "run-1"),
        }
    )
    found = await ask(client, run_id="run-1")
    assert (found.running, found.first_run_id) == (True, "run-1")


@pytest.mark.parametrize(
    "status",
    [
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.COMPLETED,
        WorkflowExecutionStatus.CANCELED,
        WorkflowExecutionStatus.TIMED_OUT,
    ],
)
async def test_an_ended_pool_is_not_running(status: WorkflowExecutionStatus) -> None:
    client = FakeClient({(POOL, None): run(status, "chain-a")})
    found = await ask(client, first_run_id="chain-a")
    assert (found.running, found.status) == (False, status.name)


async def test_a_pool_applied_again_under_the_same_name_is_another_pool() -> None:
    client = FakeClient({(POOL, None): run(WorkflowExecutionStatus.RUNNING, "chain-b")})
    found = await ask(client, first_run_id="chain-a")
    assert (found.running, found.status) == (False, "RUNNING")
    assert (found.first_run_id, found.latest_first_run_id) == ("chain-a", "chain-b")


async def test_the_chain_is_learned_from_the_parent_run_once() -> None:
    client = FakeClient(
        {
            (POOL, None): run(WorkflowExecutionStatus.RUNNING, "chain-b", run_id="b-1"),
            (POOL, "a-2"): run(WorkflowExecutionStatus.TERMINATED, "a-1", run_id="a-2"),
        }
    )
    found = await ask(client, run_id="a-2")
    assert (found.running, found.first_run_id) == (False, "a-1")
    # Once known, the parent run is not asked about again.
    client.asked.clear()
    await ask(client, run_id="a-2", first_run_id="a-1")
    assert client.asked == [(POOL, None)]


async def test_unknown_to_temporal_is_not_running() -> None:
    found = await ask(FakeClient({}), first_run_id="chain-a")
    assert (found.running, found.status) == (False, NOT_FOUND)


async def test_without_a_chain_to_compare_the_running_id_is_trusted() -> None:
    # Started without a parent, or the parent run is past retention.
    client = FakeClient({(POOL, None): run(WorkflowExecutionStatus.RUNNING, "chain-b")})
    assert (await ask(client)).running
    assert (await ask(client, run_id="purged")).running


async def test_other_errors_are_raised_for_the_retry_policy() -> None:
    class Broken(FakeClient):
        def get_workflow_handle(self, workflow_id: str, *, run_id: str | None = None) -> Any:
            async def describe() -> Any:
                raise RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b"")

            return SimpleNamespace(describe=describe)

    with pytest.raises(RPCError):
        await ask(Broken({}))
