"""A protection that ran out while the pool cannot list its devices is no wake (1-s loop).

Against the dev server: `protect DEVICE --for 1s`, then the pool's listings fail
(a revoked key). A protection is forgotten only on a fresh listing, so its end
stayed the pool's next deadline, in the past: the pool woke every second and
asked the provider each time, for as long as the listings failed, instead of
once a resync (30 s here).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx
import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import pool_workflow_id
from devicepool.client import PoolClient
from devicepool.testing import eventually
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import POLL, OwnQueueActivities, start_pool
from tests.workflows.test_pool_budget_wake import _listings

pytestmark = pytest.mark.devserver


class Refused(OwnQueueActivities):
    refusing = False

    @activity.defn(name="list_devices")
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult:
        if self.refusing:
            raise ApplicationError("listing refused", type="Unauthorized", non_retryable=True)
        return await self.real.list_devices(input)

    @activity.defn(name="watch_devices")
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        if self.refusing:
            raise ApplicationError("listing refused", type="Unauthorized", non_retryable=True)
        return await self.real.watch_devices(input)


async def test_a_protection_run_out_during_failed_listings_sets_no_wake(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    activities = Refused(worker)
    queue = f"prot-{pool_name}"
    slow = FAST.model_copy(update={"resync_seconds": 30})
    async with activities.serving(env.client, queue):
        handle = await start_pool(env.client, pool_name, 1, task_queue=queue, settings=slow)

        async def one_ready() -> list[str] | None:
            status = await handle.query("status")
            return status["deviceIds"] if status["readyDevices"] == 1 else None

        (device,) = await eventually(one_ready, what="1 ready", timeout=60, every=POLL)
        activities.refusing = True
        await PoolClient(env.client).protect_device(pool_name, device, duration="1s")

        async def blind() -> bool:
            events = (await handle.query("events"))["events"]
            return any(e["reason"] == "ListFailed" for e in events)

        await eventually(blind, what="a failed listing", timeout=30, every=POLL)
        await asyncio.sleep(2)  # the protection has run out
        since = datetime.now(UTC)
        # Five seconds of a 30-s resync (a fixed wait: nothing must happen in it);
        # the defect listed every second.
        await asyncio.sleep(5)
        listings = await _listings(env.client, pool_workflow_id(pool_name), since)
        assert listings <= 1, f"{listings} listings in 5 s with a resync of 30 s"
        activities.refusing = False
        await handle.cancel()
