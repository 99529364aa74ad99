"""A worker's graceful shutdown does not wait for the pools' watches.

`watch_devices` (and `watch_health`) are long, mostly sleeping polls: waiting
for them made every SIGTERM of a worker, and every Ctrl-C of `devicepool
dev`, take the whole graceful timeout (~20 s) although nothing was in flight.
The watch queue's worker cancels them at once; the watch's retry, on the
next worker, lists the pool again, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from datetime import timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_SCALE
from devicepool.testing import eventually
from devicepool.worker.build import pool_queue_workers
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.pool_waits import watching
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import POLL, pool_devices, start_pool

pytestmark = pytest.mark.devserver


GRACEFUL = timedelta(seconds=20)
# A quiet pool's watch lasts far longer than the test.
SETTINGS = FAST.model_copy(update={"resync_seconds": 2.0, "watch_max_seconds": 120.0})


def start(workers: list[Worker]) -> list[asyncio.Task[None]]:
    return [asyncio.ensure_future(w.run()) for w in workers]


async def stop(workers: list[Worker], tasks: list[asyncio.Task[None]]) -> float:
    began = time.monotonic()
    await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    return time.monotonic() - began


async def test_shutdown_does_not_wait_for_a_running_watch(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient
) -> None:
    run = uuid.uuid4().hex[:6]
    queue, name = f"shutdown-{run}", f"shut-{run}"

    def workers() -> list[Worker]:
        return pool_queue_workers(
            env.client, worker, task_queue=queue, graceful_shutdown_timeout=GRACEFUL
        )

    first = workers()
    tasks = start(first)
    handle = await start_pool(env.client, name, 1, settings=SETTINGS, task_queue=queue)
    second: list[Worker] = []
    try:

        async def ready() -> bool:
            return [d["status"] for d in await pool_devices(control, name)] == ["ready"]

        await eventually(ready, timeout=20, what="one ready device", every=POLL)
        await eventually(
            lambda: watching(handle), timeout=10, what="the pool's watch running", every=POLL
        )

        took = await stop(first, tasks)
        assert took < 5, f"the shutdown waited {took:.1f}s for the watch"

        # The next worker picks the watch up again; the pool carries on.
        second = workers()
        tasks = start(second)
        await eventually(
            lambda: watching(handle), timeout=15, what="the watch running again", every=POLL
        )
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2), result_type=Accepted)

        async def scaled() -> bool:
            status = await handle.query("status")
            return status["readyDevices"] == 2

        await eventually(scaled, timeout=20, what="the pool scaled to 2 ready devices", every=POLL)
    finally:
        if not second:
            second = workers()
            tasks = start(second)
        with contextlib.suppress(Exception):
            await handle.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 30)
        await stop(second, tasks)
    assert await pool_devices(control, name) == []
