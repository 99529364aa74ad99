"""Scaling down in the middle of a scale-up shrinks what is not yet rented first.

The account's ledger here (a stand-in) grants the first batch's request and
nothing more, as if other pools had the window: the second batch waits. The
pool is then scaled down to what it already serves: the waiting batch drops
its slots, no serving device is terminated, and nothing more is created.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import (
    SIGNAL_PERMIT_REQUEST,
    SIGNAL_PERMITS_GRANTED,
    UPDATE_SCALE,
    ledger_workflow_id,
)
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import (
    POLL,
    pool_counts,
    pool_devices,
    stand_in_worker,
    start_pool,
)

pytestmark = pytest.mark.devserver


ACCOUNT = "second"


@workflow.defn(name="OneGrant")
class OneGrant:
    """A ledger that grants the first request it gets, then nothing (the window is others')."""

    def __init__(self) -> None:
        self.granted = 0
        self.requests: list[dict[str, Any]] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(dynamic=True)
    async def anything(self, name: str, args: Sequence[RawValue]) -> None:
        if name != SIGNAL_PERMIT_REQUEST:
            return
        request = workflow.payload_converter().from_payload(args[0].payload, dict)
        self.requests.append(request)
        if self.granted:
            return
        self.granted = request["count"]
        grant = {"requestId": request["requestId"], "grantId": "g-1", "count": request["count"]}
        await workflow.get_external_workflow_handle(request["requester"]).signal(
            SIGNAL_PERMITS_GRANTED, grant
        )

    @workflow.query
    def seen(self) -> int:
        return len(self.requests)


async def test_scale_down_mid_scale_up_drops_unrented_slots_not_serving_devices(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient
) -> None:
    name = f"wf-{uuid.uuid4().hex[:8]}"
    queue = f"one-grant-{name}"
    async with stand_in_worker(env.client, queue, OneGrant):
        ledger = await env.client.start_workflow(
            OneGrant.run, id=ledger_workflow_id(ACCOUNT), task_queue=queue
        )
        try:
            handle = await start_pool(env.client, name, 8, settings=FAST, account=ACCOUNT)

            async def four_ready() -> bool:
                devices = await live_devices(control, name)
                return len(devices) == 4 and all(d["status"] == "ready" for d in devices)

            await eventually(four_ready, what="the first batch's 4 devices ready", every=POLL)
            serving = sorted(d["id"] for d in await live_devices(control, name))
            await handle.execute_update(
                UPDATE_SCALE, ScaleRequest(replicas=4), result_type=Accepted
            )

            async def settled() -> dict[str, Any] | None:
                status = await handle.query("status")
                return status if status["phase"] == "Ready" else None

            status = await eventually(settled, what="the pool Ready at 4", every=POLL)
            assert status["provisioningDevices"] == 0
            await asyncio.sleep(2)  # a few passes: nothing of the serving four goes
            assert sorted(d["id"] for d in await live_devices(control, name)) == serving
        finally:
            await ledger.terminate("test over")
    # With the window free again, the dropped slots are not created after all.
    await asyncio.sleep(2 * FAST.startup_timeout_seconds / 5)
    # This pool's own counts: another test's teardown moves the session-wide ones.
    assert await pool_counts(control, name, account=ACCOUNT) == {"created": 4, "terminated": 0}
    assert sorted(d["id"] for d in await live_devices(control, name)) == serving
    await handle.cancel()


async def live_devices(control: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    devices = await pool_devices(control, name, account=ACCOUNT)
    return [d for d in devices if d["status"] != "terminating"]
