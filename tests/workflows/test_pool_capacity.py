"""More pools than the pool queue has activity slots, each with its watch running.

Every pool keeps one `watch_devices` activity running (up to `watchMaxSeconds`).
On the pool's own queue, watches held every slot and the pools' short
activities (lists, terminations) never started: past ~100 pools per worker, no
scale or delete landed. Here the pools run on a queue of their own whose worker
(`worker.build.pool_queue_workers`, the production pair) has 2 activity slots,
so 4 pools are enough; their children and creates go to the session's workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_SCALE
from devicepool.testing import eventually
from devicepool.worker.build import pool_queue_workers
from devicepool.worker.config import WorkerCapacity
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.pool_waits import watching
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import pool_devices, start_pool

pytestmark = pytest.mark.devserver

SLOTS = 2
POOLS = SLOTS + 2
# A quiet pool's watch lasts far longer than the test: a watch in a short slot
# would hold it throughout.
SETTINGS = FAST.model_copy(
    update={"resync_seconds": 2.0, "health_seconds": 5.0, "watch_max_seconds": 120.0}
)
# "Within one resync", plus the time to act, on a machine busy with the rest of
# `make test` (a full run once needed more than resync + 5 s, the benchmark's
# goal, which bench/scale.py measures). A starved queue never lands at all: the
# issue's worker created none of 150 devices in ten minutes.
DEADLINE = SETTINGS.resync_seconds + 10


async def test_scale_and_delete_land_with_more_pools_than_activity_slots(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient
) -> None:
    run = uuid.uuid4().hex[:6]
    queue = f"capacity-{run}"
    names = [f"cap-{run}-{i}" for i in range(POOLS)]
    capacity = WorkerCapacity(
        max_concurrent_activities=SLOTS, max_concurrent_watches=50, max_cached_workflows=50
    )
    async with contextlib.AsyncExitStack() as stack:
        for w in pool_queue_workers(env.client, worker, task_queue=queue, capacity=capacity):
            await stack.enter_async_context(w)
        # No devices: a pool's watch runs all the same, and the scale and the delete
        # below are the short activities (a list, a termination) that need a slot.
        handles = [
            await start_pool(env.client, name, 0, settings=SETTINGS, task_queue=queue)
            for name in names
        ]
        try:

            async def saturated() -> bool:
                # Enough watches running to hold every short slot, were they there.
                return sum([await watching(h) for h in handles]) >= SLOTS

            await eventually(saturated, timeout=20, what=f"{SLOTS} watches running at once")
            last, name = handles[-1], names[-1]

            await last.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)

            async def scaled() -> bool:
                # Created, booted and observed by the pool (a list on its queue).
                status = await last.query("status")
                return status["readyDevices"] == 1 and len(await pool_devices(control, name)) == 1

            await eventually(scaled, timeout=DEADLINE, what="the pool scaled to 1 ready device")

            await last.cancel()

            async def deleted() -> bool:
                described = await last.describe()
                return (
                    described.status == WorkflowExecutionStatus.CANCELED
                    and await pool_devices(control, name) == []
                )

            await eventually(deleted, timeout=DEADLINE, what="the pool deleted, no device left")

            async def others_watching() -> bool:
                return all([await watching(h) for h in handles[:-1]])

            # More watches at once than the pool queue has slots: they never were there.
            await eventually(others_watching, timeout=5, what=f"{POOLS - 1} watches running")
        finally:
            for handle in handles:
                with contextlib.suppress(Exception):
                    await handle.cancel()
            await asyncio.wait_for(
                asyncio.gather(*(h.result() for h in handles), return_exceptions=True), 30
            )
    for name in names:
        assert await pool_devices(control, name) == []
