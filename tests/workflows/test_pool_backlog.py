"""A batch that waits for the account's window is never forgotten, however long it waits.

The account's ledger here is a stand-in that takes every permit request and
grants nothing (a window spent by other pools for longer than the pool's old
"forget a batch after 2 x startup timeout + 60 s" deadline). When it goes away,
the waiting batch creates its devices; the pool must not have planned them
again under new keys meanwhile.

The pool asks after a batch quiet for `2 x startup timeout + batch_check_grace_seconds`
(60 s by default; 1 s here): the test waits for two such checks, not for a clock.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import RawValue
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import WORKFLOW_PROVISION_BATCH, ledger_workflow_id, pool_workflow_id
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows import WORKFLOWS
from tests.helpers.histories import run_histories
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import pool_counts, pool_devices, stand_in_worker, start_pool

pytestmark = pytest.mark.devserver

ACCOUNT = "second"
STARTUP = 3.0
GRACE = 1.0  # a quiet batch is asked after every 2 x 3 + 1 = 7 s (the old deadline)


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


SETTINGS = FAST.model_copy(
    update={"startup_timeout_seconds": STARTUP, "batch_check_grace_seconds": GRACE}
)


@contextlib.asynccontextmanager
async def spent_window(env: WorkflowEnvironment, name: str) -> AsyncIterator[WorkflowHandle]:
    """The account's ledger replaced by a `SpentWindow` for the block (its worker, a test
    stand-in: no sandbox, this module imports httpx and the fixtures)."""
    queue = f"spent-window-{name}"
    async with stand_in_worker(env.client, queue, SpentWindow):
        with contextlib.suppress(RPCError):  # the account's real ledger, from another test
            await env.client.get_workflow_handle(ledger_workflow_id(ACCOUNT)).terminate()
        yield await env.client.start_workflow(
            SpentWindow.run, id=ledger_workflow_id(ACCOUNT), task_queue=queue
        )


async def test_a_batch_waiting_past_the_old_deadline_is_not_planned_again(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient
) -> None:
    name = f"wf-{uuid.uuid4().hex[:8]}"
    async with spent_window(env, name) as ledger:
        handle = await start_pool(env.client, name, 2, settings=SETTINGS, account=ACCOUNT)

        async def asked() -> bool:
            return await ledger.query(SpentWindow.requests_seen) > 0

        await eventually(asked, what="the batch to ask for permits")

        async def checked_twice() -> bool:
            # The second check starts in a pass after the first one's plan and acts.
            return (await pool_history(env, name))["running_workflows"] >= 2

        # Each check reads every run's whole history, and the pool's checks are 7 s apart.
        await eventually(
            checked_twice, what="the pool to ask after its batch twice", timeout=60, every=1.0
        )
        assert (await pool_history(env, name))[WORKFLOW_PROVISION_BATCH] == 1
        # This pool's own counts (a new pool): another test's teardown moves the
        # session-wide ones.
        assert (await pool_counts(control, name, account=ACCOUNT))["created"] == 0
        await ledger.terminate("the window is free again")

    async def ready() -> Any:
        devices = await pool_devices(control, name, account=ACCOUNT)
        return len(devices) == 2 and all(d["status"] == "ready" for d in devices)

    await eventually(ready, what="2 ready devices", timeout=40)
    # One batch, ever: nothing planned again could create later.
    assert (await pool_history(env, name))[WORKFLOW_PROVISION_BATCH] == 1
    assert await pool_counts(control, name, account=ACCOUNT) == {"created": 2, "terminated": 0}
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert await pool_devices(control, name, account=ACCOUNT) == []


async def pool_history(env: WorkflowEnvironment, name: str) -> Counter[str]:
    """The batches the pool started and the `running_workflows` checks it completed, by name."""
    seen: Counter[str] = Counter()
    for history in await run_histories(env.client, pool_workflow_id(name)):
        scheduled = {}
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = attrs.activity_type.name
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs_done = event.activity_task_completed_event_attributes
                seen[scheduled.get(attrs_done.scheduled_event_id, "")] += 1
            elif event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                child = event.start_child_workflow_execution_initiated_event_attributes
                seen[child.workflow_type.name] += 1
    return seen


async def test_a_pool_deleted_while_its_batch_never_reports_sweeps_and_ends(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient
) -> None:
    """A batch that ended without its report (terminated here, while it waits for a
    window) must not fail the delete: after `startup + batch_check_grace` the pool asks
    which batches still run, none does, it sweeps and ends CANCELED. From v0.1.0 the wait
    caught temporalio's TimeoutError (an activity's), not the timer's, so the pool failed
    there and its devices billed on until the orphan sweep's grace (review, issue 38)."""
    name = f"wf-{uuid.uuid4().hex[:8]}"
    async with spent_window(env, name) as ledger:
        handle = await start_pool(env.client, name, 2, settings=SETTINGS, account=ACCOUNT)

        async def batch_waiting() -> str | None:
            if not await ledger.query(SpentWindow.requests_seen):
                return None
            query = f"WorkflowType='{WORKFLOW_PROVISION_BATCH}' AND ExecutionStatus='Running'"
            async for found in env.client.list_workflows(query):
                if name in found.id:
                    return found.id
            return None

        batch = await eventually(batch_waiting, what="the pool's batch to wait for a window")
        await env.client.get_workflow_handle(batch).terminate("ends without its report")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert isinstance(failed.value.cause, CancelledError), failed.value.cause
        await ledger.terminate("done")
    assert await pool_devices(control, name, account=ACCOUNT) == []
    # The changed path (behind its patch) replays on this build.
    history = await handle.fetch_history()
    await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(history)
