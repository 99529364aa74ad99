"""A pool's terminations say whose they are (`TerminateDeviceInput.pool`).

An adapter with one request budget shared by every pool of the account (cloud
phones: 1 a second) hands its turns out by pool and finds a pool's devices in
that pool's listing. A scale-down's terminations named no pool: they took their
turns as a pool of their own, and the adapter had to work the pool out itself
(after a worker restart, by listing every pool's profiles for each device).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_SCALE
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.workflow_stack import POLL, OwnQueueActivities, pool_devices, start_pool

pytestmark = pytest.mark.devserver


class Recorded(OwnQueueActivities):
    def __init__(self, real: DeviceActivities) -> None:
        super().__init__(real)
        self.terminations: list[am.TerminateDeviceInput] = []

    @activity.defn(name="terminate_device")
    async def terminate_device(self, input: am.TerminateDeviceInput) -> am.TerminateDeviceResult:
        self.terminations.append(input)
        return await self.real.terminate_device(input)


async def test_a_scale_down_names_its_pool_in_each_termination(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    recorded = Recorded(worker)
    async with recorded.serving(env.client, f"named-{pool_name}") as queue:
        handle = await start_pool(env.client, pool_name, 3, task_queue=queue)

        async def ready() -> bool:
            return (await handle.query("status"))["readyDevices"] == 3

        await eventually(ready, what="3 ready devices", every=POLL)
        await handle.execute_update(
            UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted
        )  # fmt: skip

        async def one_left() -> Any:
            return len(await pool_devices(control, pool_name)) == 1

        try:
            await eventually(one_left, what="1 device left", every=POLL)
            assert len(recorded.terminations) >= 2
            assert {t.pool for t in recorded.terminations} == {pool_name}, recorded.terminations
            assert all(t.only_if_idle for t in recorded.terminations)
        finally:
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 30)
