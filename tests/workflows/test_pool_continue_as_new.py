"""Continue-as-new on the dev server (threshold lowered in conftest), with batches in flight."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment
from wf_support import FAST, eventually, pool_counts, pool_devices, start_pool, stats

from devicepool.activities.devices import DeviceActivities

pytestmark = pytest.mark.devserver


async def test_continue_as_new_with_batches_in_flight_keeps_every_device_once(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # One-device batches make many children, so history crosses the threshold while
    # some of them are still provisioning.
    settings = FAST.model_copy(update={"provision_batch_size": 1})
    handle = await start_pool(env.client, pool_name, 16, settings=settings)

    async def converged() -> bool:
        devices = await pool_devices(control, pool_name)
        return len(devices) == 16 and all(d["status"] == "ready" for d in devices)

    await eventually(converged, what="16 ready devices", timeout=40)

    # Walk the chain of runs: every hand-over carried its state, and at least
    # one carried provisioning batches that were still running.
    carried: list[dict[str, Any]] = []
    run_id = (await env.client.get_workflow_handle(handle.id).describe()).run_id
    first = env.client.get_workflow_handle(
        handle.id, first_execution_run_id=handle.first_execution_run_id
    )
    del first
    async for execution in env.client.list_workflows(f'WorkflowId = "{handle.id}"'):
        history = await env.client.get_workflow_handle(
            handle.id, run_id=execution.run_id
        ).fetch_history()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                payload = event.workflow_execution_continued_as_new_event_attributes.input.payloads[
                    0
                ]
                carried.append(json.loads(payload.data)["state"])
    n = len((await handle.fetch_history()).events)
    assert carried, (
        f"continue-as-new never happened ({n} events) (is the dev server threshold applied?)"
    )
    assert any(state["slots"]["inFlight"] for state in carried), carried  # PoolState.slots
    assert run_id != handle.first_execution_run_id

    # This pool's own count (a new pool): another test's teardown moves the session-wide one.
    assert (await pool_counts(control, pool_name))["created"] == 16

    async def reports_ready() -> bool:
        status = await env.client.get_workflow_handle(handle.id).query("status")
        return status["readyDevices"] == 16

    await eventually(reports_ready, what="the pool's own status to say 16 ready")

    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await env.client.get_workflow_handle(handle.id).result()
    assert (await stats(control))["devices"]["byPool"].get(pool_name, 0) == 0
