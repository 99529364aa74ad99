"""A pool terminated by hand and applied again adopts what it left and rents only the rest.

The earlier incarnation's devices carry slot labels of their own: the new
incarnation's creates in flight must not be taken as landed because an adopted
device shows the same slot number (issue 23 #2: 6 creates sent for 3 needed).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import provision_workflow_id
from devicepool.testing import eventually
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import POLL, pool_counts, pool_devices, start_pool

pytestmark = pytest.mark.devserver


async def test_a_pool_terminated_and_applied_again_rents_only_what_it_needs(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 3)

    async def ready(n: int) -> bool:
        devices = await pool_devices(control, pool_name)
        return len(devices) == n and all(d["status"] in ("ready", "busy") for d in devices)

    await eventually(lambda: ready(3), what="3 ready devices", every=POLL)
    await handle.terminate("by hand")
    # Its batch ends too (it waited for the boots), before the pool is applied again.
    batch = env.client.get_workflow_handle(provision_workflow_id(pool_name, 1, 0))
    await asyncio.wait_for(batch.result(), timeout=30)
    adopted = await pool_devices(control, pool_name)

    # The new incarnation's creates wait (as for the account's window) while it passes again.
    gate = TimedASGITransport.create_gate = asyncio.Event()
    handle = await start_pool(env.client, pool_name, 6)

    async def at_gate() -> bool:
        return TimedASGITransport.at_gate_of[pool_name] >= 3

    await eventually(at_gate, what="3 creates on their way")
    # A change at the provider wakes the pool: a pass while its creates wait.
    path = f"/_emulator/devices/{adopted[0]['id']}/session"
    (await control.post(path, json={"active": True})).raise_for_status()
    await asyncio.sleep(3)
    sent = TimedASGITransport.at_gate_of[pool_name]
    gate.set()
    await eventually(lambda: ready(6), what="6 devices", timeout=30, every=POLL)
    await asyncio.sleep(2)  # anything planned twice would land by now
    assert sent == 3, f"{sent} creates sent for 3 needed"
    assert (await pool_counts(control, pool_name))["created"] == 6
    assert len(await pool_devices(control, pool_name)) == 6
    await handle.cancel()


async def test_an_earlier_pools_batch_report_is_not_this_pools_failure(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # One failed boot would pause creates in the region, so a report taken as ours shows.
    settings = FAST.model_copy(update={"failure_streak_limit": 1})
    await control.post("/_emulator/faults", json={"provisionFailureRate": 1.0})
    try:
        handle = await start_pool(env.client, pool_name, 1, settings=settings)

        async def created() -> bool:
            return len(await pool_devices(control, pool_name)) == 1

        await eventually(created, what="the first incarnation's device")
        await handle.terminate("by hand")
    finally:
        await control.post("/_emulator/faults", json={})
    # Its batch still waits for the boot, which fails, and reports to the pool of that name.
    handle = await start_pool(env.client, pool_name, 1, settings=settings)
    batch = env.client.get_workflow_handle(provision_workflow_id(pool_name, 1, 0))
    await asyncio.wait_for(batch.result(), timeout=30)

    async def one_ready() -> bool:
        devices = await pool_devices(control, pool_name)
        return [d["status"] for d in devices] == ["ready"]

    await eventually(one_ready, what="1 ready device", timeout=30, every=POLL)
    events = (await handle.query("events"))["events"]
    reasons = [e["reason"] for e in events]
    assert "BackOff" not in reasons and "BootFailed" not in reasons, events
    await handle.cancel()
