"""A health report while a pass awaits its terminations (issue 37, item 1).

The pass decided its batches before terminating; a replacement the health check's
report makes owed meanwhile is served by the next pass, never by a second device
for a slot already decided. Runs from v0.1.0 split the creates after the
terminations instead (`batches-split-as-decided`, replayed in
tests/replay/histories/v0.1.0/upgrade/health-report-during-terminations-1.json).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.testing import eventually
from tests.helpers.histories import run_histories
from tests.helpers.pool_waits import converged, delete
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    Workers,
    pool_counts,
    pool_devices,
    report_terminated,
    start_pool,
)

pytestmark = pytest.mark.devserver

# The terminations are held until the test lets them go: the wait for them reads the pool's
# histories (each check fetches them all) twice a second.
POLL = 0.5

PATCH = b"batches-split-as-decided"


async def test_a_health_report_during_terminations_rents_one_device_a_slot(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """1 ready scaled to 3, both new devices fail to boot: one pass removes the 2 failed
    and creates 2. While their DELETEs are held, the health check removes the ready
    device and says so. The pool ends at 3 ready having rented exactly 1 + 2 + 3."""
    handle = await start_pool(env.client, pool_name, 1, proxy_ref=None)
    (ready,) = [d["id"] for d in await converged(control, pool_name, 1)]
    gate = TimedASGITransport.delete_gate = asyncio.Event()
    try:
        await _faults(control, provisionFailureRate=1.0)
        await handle.signal("scale", {"replicas": 3})

        async def two_failed() -> bool:
            devices = await pool_devices(control, pool_name)
            return sum(1 for d in devices if d["status"] == "failed") == 2

        await eventually(two_failed, what="both new devices failed to boot", timeout=40)
        await _faults(control)

        async def terminating() -> bool:
            for history in await run_histories(env.client, handle.id):
                for event in history.events:
                    if event.HasField("activity_task_scheduled_event_attributes"):
                        kind = event.activity_task_scheduled_event_attributes.activity_type.name
                        if kind.startswith("terminate_device"):
                            return True
            return False

        await eventually(
            terminating, what="the failed devices' termination held", timeout=40, every=POLL
        )
        gone = await control.delete(
            f"/api/v1/devices/{ready}", headers={"Authorization": f"Bearer {ACCOUNTS['default']}"}
        )
        gone.raise_for_status()
        await report_terminated(handle, {ready: "offline for 3s"}, devices=3, max_unhealthy=1)
        await asyncio.sleep(1)  # the report lands while the terminations are held
    finally:
        gate.set()
        TimedASGITransport.delete_gate = None
        await _faults(control)

    devices = await converged(control, pool_name, 3)
    assert ready not in {d["id"] for d in devices}
    marked = any(
        PATCH in event.SerializeToString()
        for history in await run_histories(env.client, handle.id)
        for event in history.events
    )
    assert marked, "the pass never split its batches with more owed than decided"
    await asyncio.sleep(3)  # a few passes more: nothing else is rented
    assert len(await pool_devices(control, pool_name)) == 3
    assert (await pool_counts(control, pool_name))["created"] == 1 + 2 + 3
    await delete(handle, control, pool_name)


async def _faults(control: httpx.AsyncClient, **faults: float) -> None:
    (await control.post("/_emulator/faults", json=faults)).raise_for_status()
