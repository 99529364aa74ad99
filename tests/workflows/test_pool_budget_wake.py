"""A scale-down a disruption budget holds waits without polling (issue 37, item 9).

Against the dev server: a pool of 2 scaled to 1 under `devices: 0` for ScaleDown
holds its idle devices (`ScaleDownBlocked`, reason `DisruptionBudget`). A held
idle device is no deadline: before, its idle time (already past) woke the pool
every second, a provider listing each time, for as long as the budget held.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import pool_workflow_id
from devicepool.client import PoolClient
from devicepool.testing import eventually
from tests.workflows.test_pool_device_control import _gone, ready_ids, start

pytestmark = pytest.mark.devserver


async def _listings(client: Client, workflow_id: str, since: datetime) -> int:
    """`list_devices` activities the pool scheduled since `since`, over all of its runs."""
    count = 0
    async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await client.get_workflow_handle(workflow_id, run_id=run.run_id).fetch_history()
        for event in history.events:
            if not event.HasField("activity_task_scheduled_event_attributes"):
                continue
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            if name == "list_devices" and event.event_time.ToDatetime(UTC) >= since:
                count += 1
    return count


# A freeze that always applies, and a scheduled one whose window is on (it fires every
# minute, each window 8 h): the pool wakes at the window's end, not every minute.
FREEZES = {
    "always": {"devices": 0, "reasons": ["ScaleDown"]},
    "scheduled": {
        "devices": 0,
        "reasons": ["ScaleDown"],
        "schedule": "* * * * *",
        "duration": "8h",
    },
}


@pytest.mark.parametrize("freeze", sorted(FREEZES))
async def test_a_budget_held_scale_down_does_not_list_every_second(
    env: WorkflowEnvironment,
    worker: DeviceActivities,
    control: httpx.AsyncClient,
    pool_name: str,
    freeze: str,
) -> None:
    budgets = {"budgets": [FREEZES[freeze]]}
    handle = await start(env, pool_name, 2, disruption=budgets)
    await eventually(lambda: ready_ids(control, pool_name, 2), timeout=60, what="2 ready")
    await PoolClient(env.client).scale(pool_name, 1)

    async def blocked() -> bool:
        status = await handle.query("status")
        held = {c["type"]: c for c in status["conditions"]}.get("ScaleDownBlocked", {})
        return held.get("status") == "True" and held.get("reason") == "DisruptionBudget"

    await eventually(blocked, what="ScaleDownBlocked while the budget is 0")
    await asyncio.sleep(2)  # the pass that said it settles
    since = datetime.now(UTC)
    # Five seconds of a held scale-down (a fixed wait: nothing must happen in it);
    # the defect listed every second.
    await asyncio.sleep(5)
    listings = await _listings(env.client, pool_workflow_id(pool_name), since)
    assert listings <= 1, f"{listings} listings in 5 s while the budget held the scale-down"
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown")
