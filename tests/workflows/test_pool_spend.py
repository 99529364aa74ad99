"""A pool's spend: `spendCap` stops growth at the cap and raising it resumes; the cost is shown.

Against the dev server and the emulator's ground truth: a pool of 5 capped at 3
rents 3 and says `SpendCapReached`; raising the cap (an `apply`) rents the other
2 and nothing more; the status says what the devices cost an hour, and the cost
it counts agrees with what the emulator bills (one pool for both: the count does
not depend on how the devices came).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE, UPDATE_APPLY, pool_workflow_id
from devicepool.client import PoolClient
from devicepool.client._cli_cost import cost_rows
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ApplyRequest, PoolInput
from tests.helpers.manifests import beta_pool
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import POLL, pool_counts, pool_devices

pytestmark = pytest.mark.devserver


def manifest(name: str, **spend_cap: Any) -> Any:
    return beta_pool(name, 5, spendCap=spend_cap)


async def test_a_spend_cap_stops_growth_and_raising_it_resumes(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    pool = manifest(pool_name, maxHourlyCost=0.3)  # 3 devices at the default $0.10
    handle = await env.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=pool.metadata, spec=pool.spec, settings=FAST),
        id=pool_workflow_id(pool_name),
        task_queue=TASK_QUEUE,
    )

    async def status_says(ready: int, cap: str) -> dict[str, Any] | None:
        status: dict[str, Any] = await handle.query("status")
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        if status["readyDevices"] == ready and conditions.get("SpendCapReached") == cap:
            return status
        return None

    capped = await eventually(
        lambda: status_says(3, "True"), what="3 ready, held at the cap", every=POLL
    )
    assert capped is not None and capped["phase"] == "Degraded"
    assert capped["hourlyCost"] == pytest.approx(0.3)
    assert len(await pool_devices(control, pool_name)) == 3
    events = (await handle.query("events"))["events"]
    assert any(e["reason"] == "SpendCapReached" and e["type"] == "Warning" for e in events), events

    raised = manifest(pool_name, maxHourlyCost=0.3, maxDevices=10)
    raised.spec.spend_cap.max_hourly_cost = None  # type: ignore[union-attr]
    await handle.execute_update(
        UPDATE_APPLY, ApplyRequest(metadata=raised.metadata, spec=raised.spec), result_type=Accepted
    )

    async def ready() -> dict[str, Any] | None:
        # The batch's report can land a pass after its devices list ready: Provisioning
        # with 5 of 5 ready is that pass (CI saw it), not a held pool.
        status = await status_says(5, "False")
        return status if status is not None and status["phase"] == "Ready" else None

    done = await eventually(ready, what="5 ready once the cap allows", every=POLL)
    assert done["costToDate"] > 0
    assert (await pool_counts(control, pool_name))["created"] == 5  # no create past either cap
    await _cost_agrees_with_what_the_emulator_bills(env, control, pool_name)
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), what="teardown", every=POLL)


async def _gone(control: httpx.AsyncClient, name: str) -> bool:
    return not await pool_devices(control, name)


async def _cost_agrees_with_what_the_emulator_bills(
    env: WorkflowEnvironment, control: httpx.AsyncClient, pool_name: str
) -> None:
    # What the emulator bills a device (`deviceHoursBilled`): from its creation until
    # it is terminated. The pool counts from its first listing of it, so a little less.
    devices = await pool_devices(control, pool_name)
    assert sum(d["status"] == "ready" for d in devices) == 5, devices
    # Let the devices bill a while after they are ready, so the hours counted since have
    # to grow with the clock (a count stuck at the ready moment would fall below `billed`).
    await asyncio.sleep(3)
    answers = await PoolClient(env.client).costs(pool_name)
    now = datetime.now(UTC)
    [(name, seen)] = answers
    assert name == pool_name and seen is not None and seen.account == "default"
    billed = sum((now - datetime.fromisoformat(d["createdAt"])).total_seconds() for d in devices)
    slack = 5 * (2 + FAST.resync_seconds)  # per device: the create's answer, then a listing
    hours, dollars = seen.totals(now)
    assert (billed - slack) / 3600 <= hours <= billed / 3600 + 1e-4
    assert dollars == pytest.approx(hours * 0.10, abs=1e-4)
    counted = sum(h.device_hours for h in seen.hours)
    assert counted == pytest.approx(seen.device_hours_to_date, abs=1e-3)
    report = cost_rows(answers, since=now - timedelta(hours=1), now=now)
    assert report["accounts"][0]["deviceHours"] == pytest.approx(hours, abs=1e-3)
