"""A pool deleted while it awaits an activity still runs the finalizer.

Deleting a pool cancels its workflow while it may be awaiting an activity (here
the references check a spec change triggers). Whether the SDK hands the
cancel to the workflow as a `CancelledError` or as that activity's
`ActivityError`, the run must tear its devices down, not end CANCELED with
them billing. (The `ActivityError` form was seen in a failing history of
`test_worker_restart_inside_the_offline_window_keeps_the_clock`; this test
has not been seen to produce it.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_APPLY, pool_workflow_id
from devicepool.api.v1beta1 import DevicePoolSpec, ObjectMeta
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ApplyRequest, PoolInput
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import OwnQueueActivities, pool_devices

pytestmark = pytest.mark.devserver


class SlowRefs(OwnQueueActivities):
    """The pool's own activities; once armed, the references check hangs until released.

    Armed by the test, not by counting checks: on a busy machine the first
    check can time out and be retried, and that retry must not hang.
    """

    def __init__(self, real: DeviceActivities) -> None:
        super().__init__(real)
        self.armed = False
        self.hanging = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name="check_pool_refs")
    async def check_pool_refs(self, input: am.CheckRefsInput) -> am.CheckRefsResult:
        if self.armed:
            self.hanging.set()
            await self.release.wait()
        return await self.real.check_pool_refs(input)


async def start_own_pool(
    client: Client, queue: str, name: str, spec: dict[str, Any]
) -> WorkflowHandle[Any, Any]:
    """A DevicePool of `spec` on `queue` (served by `SlowRefs.serving`), the fast settings."""
    return await client.start_workflow(
        "DevicePool",
        PoolInput(
            metadata=ObjectMeta(name=name),
            spec=DevicePoolSpec.model_validate(spec),
            settings=FAST,
        ),
        id=pool_workflow_id(name),
        task_queue=queue,
    )


async def test_a_delete_while_a_check_is_awaited_still_tears_down(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    slow = SlowRefs(worker)
    spec = {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": 2}
    try:
        async with slow.serving(env.client, f"absorbed-{pool_name}") as queue:
            handle = await start_own_pool(env.client, queue, pool_name, spec)

            async def ready() -> bool:
                return (await handle.query("status"))["readyDevices"] == 2

            await eventually(ready, what="2 ready devices")
            # A spec change makes the next pass check the references again...
            slow.armed = True
            changed = DevicePoolSpec.model_validate({**spec, "health": {"maxUnhealthy": 1}})
            await handle.execute_update(
                UPDATE_APPLY, ApplyRequest(metadata=ObjectMeta(name=pool_name), spec=changed),
                result_type=Accepted,
            )  # fmt: skip
            await asyncio.wait_for(slow.hanging.wait(), 10)
            # ...and the pool is deleted while that check is awaited.
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 30)
            assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    finally:
        slow.release.set()
    assert await pool_devices(control, pool_name) == []
