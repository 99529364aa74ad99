"""Observations are ordered: a listing older than the one applied never overwrites it.

The pool's own activities run on the task queue of the pool's workflow (its
watch on that queue's watch queue), so a pool started on a queue of its own
gets scripted activities here (the watch), while its children and creates go
to the session's real worker and emulator.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.testing import eventually
from tests.helpers.workflow_stack import OwnQueueActivities, pool_counts, pool_devices, start_pool

pytestmark = pytest.mark.devserver


class ScriptedWatch(OwnQueueActivities):
    """The real activities, except that the first watch answers what the test says, when it says."""

    def __init__(self, real: DeviceActivities) -> None:
        super().__init__(real)
        self.release = asyncio.Event()
        self.held = asyncio.Event()
        self.stale: list[am.DeviceInfo] = []
        self.watches = 0

    @activity.defn(name="watch_devices")
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        self.watches += 1
        if self.watches == 1:
            # The first watch polled before the pool's creates landed, and its
            # answer is late: it comes back after fresher listings were applied.
            self.held.set()
            await self.release.wait()
            return am.WatchDevicesResult(devices=self.stale, fingerprint="stale", changed=True)
        return await self.real.watch_devices(input)


async def test_a_watch_answer_older_than_the_applied_listing_is_not_applied(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    scripted = ScriptedWatch(worker)
    async with scripted.serving(env.client, f"observations-{pool_name}") as queue:
        handle = await start_pool(env.client, pool_name, 2, proxy_ref=None, task_queue=queue)
        await asyncio.wait_for(scripted.held.wait(), 10)

        async def converged() -> bool:
            status = await handle.query("status")
            return status["readyDevices"] == 2

        # Fresh listings (after each batch report) see both devices ready...
        await eventually(converged, what="2 ready devices in the pool's status")
        # ...then the first watch answers with what it saw before the creates.
        scripted.release.set()
        await asyncio.sleep(3)  # several resyncs: a pass that trusted it would rent 2 more
        # This pool's own count (a new pool): another test's teardown moves the
        # session-wide one.
        assert (await pool_counts(control, pool_name))["created"] == 2
        assert len(await pool_devices(control, pool_name)) == 2
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):  # the run ends CANCELED
            await handle.result()
    assert await pool_devices(control, pool_name) == []
