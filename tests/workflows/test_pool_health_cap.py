"""A device the health check terminated counts against the spend cap until it is gone.

Against the dev server: a pool of 3 under `spendCap: {maxDevices: 3}`. The health
check reports it terminated one device, which the provider (slowly, here: the
pool's listings keep showing it terminating) has not terminated yet. The pool
dropped reported devices from its view, so the cap did not count it and the
replacement was created at once: 4 billed for the length of the termination.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from temporalio import activity
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import pool_workflow_id
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import PoolInput
from tests.helpers.manifests import beta_pool
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    OwnQueueActivities,
    pool_counts,
    report_terminated,
)

pytestmark = pytest.mark.devserver


class SlowToTerminate(OwnQueueActivities):
    """The provider lists `terminating` as terminating, whatever it is really."""

    def __init__(self, real: DeviceActivities) -> None:
        super().__init__(real)
        self.terminating: set[str] = set()

    def _slow(self, devices: list[am.DeviceInfo]) -> list[am.DeviceInfo]:
        return [
            d.model_copy(update={"status": am.TERMINATING}) if d.id in self.terminating else d
            for d in devices
        ]

    @activity.defn(name="list_devices")
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult:
        answer = await self.real.list_devices(input)
        return am.ListDevicesResult(devices=self._slow(answer.listing(input.pool)))

    @activity.defn(name="watch_devices")
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        answer = await self.real.watch_devices(input)
        devices = self._slow(answer.listing(input.pool))
        return answer.model_copy(update={"devices": devices, "rows": []})


async def test_a_device_the_health_check_terminated_counts_against_the_cap_until_gone(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    activities = SlowToTerminate(worker)
    queue = f"hcap-{pool_name}"
    async with activities.serving(env.client, queue):
        pool = beta_pool(pool_name, 2, spendCap={"maxDevices": 2})
        handle = await env.client.start_workflow(
            "DevicePool",
            PoolInput(metadata=pool.metadata, spec=pool.spec, settings=FAST),
            id=pool_workflow_id(pool_name),
            task_queue=queue,
        )

        async def two_ready() -> list[str] | None:
            status = await handle.query("status")
            return status["deviceIds"] if status["readyDevices"] == 2 else None

        devices = await eventually(two_ready, what="2 ready", timeout=60)
        victim = devices[0]
        activities.terminating = {victim}  # the provider still bills it
        await report_terminated(handle, {victim: "offline"}, devices=2, max_unhealthy=2)
        await asyncio.sleep(4)  # several passes: the report, listings after it
        assert (await pool_counts(control, pool_name))["created"] == 2, "created beside it"
        # Gone at the provider: its replacement now.
        activities.terminating = set()
        key = {"Authorization": f"Bearer {ACCOUNTS['default']}"}
        (await control.delete(f"/api/v1/devices/{victim}", headers=key)).raise_for_status()

        async def replaced() -> bool:
            return (await pool_counts(control, pool_name))["created"] == 3

        await eventually(replaced, what="the replacement", timeout=60)
        await handle.cancel()
