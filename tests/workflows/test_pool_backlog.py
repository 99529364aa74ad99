"""A batch that waits for the account's window is never forgotten, however long it waits.

The account's ledger here is a stand-in that takes every permit request and
grants nothing (a window spent by other pools for longer than the pool's old
"forget a batch after 2 x startup timeout + 60 s" deadline). When it goes away,
the waiting batch creates its devices; the pool must not have planned them
again under new keys meanwhile.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import ledger_workflow_id
from devicepool.testing import eventually
from devicepool.worker.build import new_worker
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import pool_counts, pool_devices, start_pool

pytestmark = pytest.mark.devserver

ACCOUNT = "second"
STARTUP = 3.0  # the old deadline: 2 x 3 + 60 = 66 s


@workflow.defn(name="SpentWindow")
class SpentWindow:
    """A ledger whose window never frees up: permit requests are taken, nothing is granted."""

    def __init__(self) -> None:
        self.requests = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(dynamic=True)
    def anything(self, name: str, args: Sequence[RawValue]) -> None:
        self.requests += 1

    @workflow.query
    def requests_seen(self) -> int:
        return self.requests


async def test_a_batch_waiting_past_the_old_deadline_is_not_planned_again(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient
) -> None:
    name = f"wf-{uuid.uuid4().hex[:8]}"
    queue = f"spent-window-{name}"
    settings = FAST.model_copy(update={"startup_timeout_seconds": STARTUP})
    # A test stand-in: no sandbox (this module imports httpx and the fixtures).
    async with new_worker(
        env.client,
        task_queue=queue,
        workflows=[SpentWindow],
        activities=[],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        ledger = await env.client.start_workflow(
            SpentWindow.run, id=ledger_workflow_id(ACCOUNT), task_queue=queue
        )
        handle = await start_pool(env.client, name, 2, settings=settings, account=ACCOUNT)

        async def asked() -> bool:
            return await ledger.query(SpentWindow.requests_seen) > 0

        await eventually(asked, what="the batch to ask for permits")
        await asyncio.sleep(2 * STARTUP + 60 + 5)  # past the old deadline, still waiting
        # This pool's own counts (a new pool): another test's teardown moves the
        # session-wide ones.
        assert (await pool_counts(control, name, account=ACCOUNT))["created"] == 0
        await ledger.terminate("the window is free again")

    async def ready() -> Any:
        devices = await pool_devices(control, name, account=ACCOUNT)
        return len(devices) == 2 and all(d["status"] == "ready" for d in devices)

    await eventually(ready, what="2 ready devices", timeout=40)
    await asyncio.sleep(2)  # a few passes after convergence
    assert await pool_counts(control, name, account=ACCOUNT) == {"created": 2, "terminated": 0}
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert await pool_devices(control, name, account=ACCOUNT) == []
