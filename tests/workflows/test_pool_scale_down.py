"""Scale-down re-checks a device at the provider right before deleting it.

The listing a plan is made from can be seconds old (behind a busy queue,
minutes): a device it showed idle may have started a session since. The
deletion skips a device that is not idle any more; the pool stays above its
size (ScaleDownBlocked) or takes an idle one instead, as it does for devices it
knows are busy.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_SCALE
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import POLL, condition, pool_counts, pool_devices, start_pool

pytestmark = pytest.mark.devserver

# The in-process counters are read at the default pace, not POLL.


async def all_ready(control: httpx.AsyncClient, pool_name: str, count: int) -> bool:
    devices = await pool_devices(control, pool_name)
    return len(devices) == count and all(d["status"] == "ready" for d in devices)


async def test_a_device_that_became_busy_after_the_listing_is_not_terminated(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    await eventually(lambda: all_ready(control, pool_name, 2), what="2 ready devices", every=POLL)
    # This pool's own count: another test's teardown moves the session-wide one.
    before = await pool_counts(control, pool_name)
    # The oldest idle device is the one a scale-down to 1 picks.
    oldest = min(await pool_devices(control, pool_name), key=lambda d: (d["createdAt"], d["id"]))
    # Its listings' answers are held until the device is busy (a late answer whatever the
    # load: a 1.5-s timer lost the race on a loaded CI machine).
    held = TimedASGITransport.held_list_answers[pool_name] = asyncio.Event()
    try:
        seen = TimedASGITransport.lists[pool_name]
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)

        async def listed() -> bool:
            return TimedASGITransport.lists[pool_name] > seen

        await eventually(listed, what="the scale-down's listing")
        # Listed idle; busy by the time the (late) answer reaches the pool.
        started = await control.post(
            f"/_emulator/devices/{oldest['id']}/session", json={"active": True}
        )
        started.raise_for_status()
    finally:
        held.set()
        TimedASGITransport.held_list_answers.pop(pool_name, None)

    # The busy device stays; the other one, idle, goes instead: the pool is at size.
    async def at_size() -> list[dict[str, object]] | None:
        devices = await pool_devices(control, pool_name)
        statuses = {str(d["id"]): d["status"] for d in devices}
        assert statuses.get(oldest["id"]) == "busy", devices  # never terminated
        alive = {k: v for k, v in statuses.items() if v != "terminating"}
        return devices if alive == {oldest["id"]: "busy"} else None

    await eventually(at_size, what="the idle one gone, the busy one kept", timeout=20, every=POLL)
    cond = await condition(handle, "ScaleDownBlocked")
    assert cond is None or cond["status"] == "False"
    assert (await pool_counts(control, pool_name))["created"] == before["created"]
    await handle.cancel()


async def test_a_device_whose_scale_down_delete_failed_is_never_killed_busy(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    """Issue 23 #1: scale 2 -> 1, the idle device's DELETE is refused once (409); it
    becomes busy; it must stay a member (counted, in deviceIds) and never be killed."""
    handle = await start_pool(env.client, pool_name, 2)
    await eventually(lambda: all_ready(control, pool_name, 2), what="2 ready devices", every=POLL)
    before = await pool_counts(control, pool_name)
    devices = await pool_devices(control, pool_name)
    oldest = min(devices, key=lambda d: (d["createdAt"], d["id"]))
    other = next(d for d in devices if d["id"] != oldest["id"])
    TimedASGITransport.refuse_deletes[oldest["id"]] = 1

    async def session_starts(device_id: str) -> None:
        # Read idle, its DELETE refused, then a session starts on it.
        path = f"/_emulator/devices/{device_id}/session"
        (await control.post(path, json={"active": True})).raise_for_status()

    TimedASGITransport.after_refused_delete = session_starts
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)

    async def refused() -> bool:
        return TimedASGITransport.refuse_deletes[oldest["id"]] == 0

    await eventually(refused, what="the refused DELETE")

    # The busy device stays a member; the idle one goes instead.
    async def at_size() -> bool:
        statuses = {str(d["id"]): d["status"] for d in await pool_devices(control, pool_name)}
        assert statuses.get(oldest["id"]) == "busy", statuses  # never terminated
        return statuses.get(other["id"], "terminated") in ("terminating", "terminated")

    await eventually(at_size, what="the idle one gone, the busy one kept", timeout=20, every=POLL)
    await asyncio.sleep(2)  # passes that would retry a doomed device
    statuses = {str(d["id"]): d["status"] for d in await pool_devices(control, pool_name)}
    assert statuses.get(oldest["id"]) == "busy", statuses
    status = await handle.query("status")
    assert oldest["id"] in status["deviceIds"], status

    # A scale-up back to 2 rents one device, for the one that went: not a third.
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2), result_type=Accepted)

    async def two_alive() -> bool:
        alive = [d for d in await pool_devices(control, pool_name) if d["status"] != "terminating"]
        return len(alive) == 2

    await eventually(two_alive, what="back at 2", timeout=20, every=POLL)
    # Passes after it: a wrong pick (the busy oldest) would be terminating by now.
    await asyncio.sleep(1)
    statuses = {str(d["id"]): d["status"] for d in await pool_devices(control, pool_name)}
    assert statuses.get(oldest["id"]) == "busy", statuses
    assert (await pool_counts(control, pool_name))["created"] == before["created"] + 1
    await handle.cancel()


async def test_the_status_after_a_scale_down_counts_what_it_terminated_as_gone(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    """8 -> 3 in the article's words (3 -> 1 here): right after the pass that terminated them,
    `status` must not show them ready beside `Ready=True Converged` (issue 28)."""
    handle = await start_pool(env.client, pool_name, 3)
    await eventually(lambda: all_ready(control, pool_name, 3), what="3 ready devices", every=POLL)
    # Every listing after the scale-down answers late: the status the terminating
    # pass publishes stands for seconds before a listing shows the devices leaving.
    TimedASGITransport.late_list_answers[pool_name] = 3.0
    try:
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)

        async def published() -> dict[str, object] | None:
            status: dict[str, object] = await handle.query("status")
            return status if status["observedGeneration"] == 2 else None

        status = await eventually(published, timeout=15, what="the scale-down's status", every=POLL)
    finally:
        TimedASGITransport.late_list_answers.pop(pool_name, None)
    assert (await pool_counts(control, pool_name))["terminated"] == 2
    assert status["readyDevices"] == 1, status
    assert status["deviceIds"] and len(status["deviceIds"]) == 1, status  # type: ignore[arg-type]
