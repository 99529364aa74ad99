"""What a pool says is what the provider has, and what happened to it (issue 15, items 5-7).

- `provisioningDevices` counts devices that exist at the provider and boot;
  creates planned or waiting for the window are `pendingDevices`. Progressing
  stays True while anything is being created or booting.
- A scale-down removes a device that is still booting before a serving one.
- Devices that vanish from the provider while they boot (a restarted
  in-memory provider forgot them) are no evidence against the region:
  ProviderAvailable stays True and creates are not paused.
- `describe` shows the pool's own events (scaled, created, terminated), not
  raw history.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_SCALE
from devicepool.client.pool_client import PoolClient
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import condition, pool_devices, start_pool

pytestmark = pytest.mark.devserver

# Waits for states that last (creates held, boots stalled, a pool converged) check a status
# query or a provider listing (~5 ms of the test's and the server's CPU) twice a second.
POLL = 0.5


async def _faults(control: httpx.AsyncClient, faults: dict[str, float]) -> None:
    (await control.post("/_emulator/faults", json=faults)).raise_for_status()


async def test_creates_waiting_are_pending_and_booting_devices_keep_it_progressing(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    gate = asyncio.Event()
    TimedASGITransport.create_gate, TimedASGITransport.at_gate = gate, 0
    await _faults(control, {"provisionStallRate": 1})  # the devices keep booting
    handle = await start_pool(env.client, pool_name, 2)
    try:

        async def held() -> bool:
            return TimedASGITransport.at_gate_of[pool_name] == 2

        await eventually(held, what="2 creates held before the provider")

        async def planned() -> dict[str, Any] | None:
            status = await handle.query("status")
            return status if status.get("pendingDevices") == 2 else None

        # Nothing exists at the provider yet: nothing is provisioning there.
        status = await eventually(planned, what="2 pending creates", every=POLL)
        assert status["provisioningDevices"] == 0, status
        progressing = await condition(handle, "Progressing")
        assert progressing and progressing["status"] == "True", progressing
        gate.set()

        async def booting() -> dict[str, Any] | None:
            status = await handle.query("status")
            at_provider = await pool_devices(control, pool_name)
            if (
                len(at_provider) == 2
                and status["provisioningDevices"] == 2
                and status["pendingDevices"] == 0
            ):
                return status
            return None

        status = await eventually(booting, what="2 devices booting, none pending", every=POLL)
        progressing = status and next(c for c in status["conditions"] if c["type"] == "Progressing")
        assert progressing["status"] == "True", status
        assert progressing["reason"] == "Provisioning", progressing
    finally:
        TimedASGITransport.create_gate = None
        gate.set()
        await _faults(control, {})
        await handle.cancel()


async def test_scale_down_removes_a_booting_device_before_a_ready_one(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    try:

        async def ready(n: int) -> list[dict[str, Any]] | None:
            devices = await pool_devices(control, pool_name)
            ok = len(devices) == n and all(d["status"] == "ready" for d in devices)
            return devices if ok else None

        serving = await eventually(lambda: ready(2), what="2 ready devices", every=POLL)
        await _faults(control, {"provisionStallRate": 1})
        try:
            await handle.execute_update(
                UPDATE_SCALE, ScaleRequest(replicas=3), result_type=Accepted
            )

            async def booting() -> list[dict[str, Any]]:
                devices = await pool_devices(control, pool_name)
                return [d for d in devices if d["status"] == "provisioning"]

            stalled = (await eventually(booting, what="a third device booting", every=POLL))[0]
        finally:
            await _faults(control, {})
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2), result_type=Accepted)

        async def booting_one_gone() -> list[dict[str, Any]] | None:
            devices = await pool_devices(control, pool_name)
            live = [d for d in devices if d["status"] != "terminating"]
            return live if stalled["id"] not in {d["id"] for d in live} else None

        await eventually(booting_one_gone, what="the booting device terminated", every=POLL)
        await asyncio.sleep(1)  # a wrong pick would have gone by now too
        live = {d["id"]: d["status"] for d in await pool_devices(control, pool_name)}
        assert {d["id"] for d in serving} <= set(live), live
        assert all(live[d["id"]] == "ready" for d in serving), live
        # The pool says what it did, and not that the device it removed "vanished".
        events = (await PoolClient(env.client).describe(pool_name))["events"]
        said = [(e["reason"], e["message"]) for e in events]
        assert ("ScaledDown", f"terminated 1 device(s): {stalled['id']}") in said, said
        assert not [m for r, m in said if r == "Vanished"], said
    finally:
        await handle.cancel()


async def test_devices_that_vanish_while_booting_do_not_blame_the_region(
    env: WorkflowEnvironment,
    worker: DeviceActivities,
    control: httpx.AsyncClient,
    emulator: Any,
    pool_name: str,
) -> None:
    handle = await start_pool(env.client, pool_name, 4)
    try:
        before = await eventually(
            lambda: condition(handle, "ProviderAvailable"), what="a first status"
        )

        async def created() -> list[dict[str, Any]] | None:
            devices = await pool_devices(control, pool_name)
            return devices if len(devices) == 4 else None

        devices = await eventually(created, what="4 devices created")
        # Forgotten by the provider while they boot, as by a restarted
        # in-memory emulator (the issue's `make demo` restart).
        assert all(d["status"] == "provisioning" for d in devices), devices
        for device in devices:
            del emulator.state.emulator.devices[device["id"]]
        seen: list[dict[str, Any] | None] = []

        async def replaced() -> bool:
            seen.append(await condition(handle, "ProviderAvailable"))
            now = await pool_devices(control, pool_name)
            return len(now) == 4 and all(d["status"] == "ready" for d in now)

        await eventually(replaced, what="4 new devices ready")
        bad = [c for c in seen if c and c["status"] != "True"]
        assert not bad, bad[0]
        after = await condition(handle, "ProviderAvailable")
        assert before and after and after["lastTransitionTime"] == before["lastTransitionTime"]
    finally:
        await handle.cancel()


async def test_describe_shows_what_happened_to_the_pool(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    pools = PoolClient(env.client)

    def said(last: str) -> Any:
        async def check() -> list[dict[str, Any]] | None:
            events = (await pools.describe(pool_name))["events"]
            return events if events and events[-1]["reason"] == last else None

        return check

    try:
        await eventually(said("Ready"), what="the batch's Ready event", every=POLL)
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
        events = await eventually(said("ScaledDown"), what="the scale-down's event", every=POLL)
        assert [(e["type"], e["reason"]) for e in events] == [
            ("Normal", "Created"),
            ("Normal", "Creating"),
            ("Normal", "Created"),
            ("Normal", "Ready"),
            ("Normal", "Scaled"),
            ("Normal", "ScaledDown"),
        ], events
        messages = [e["message"] for e in events]
        assert messages[0] == "pool created with 2 replica(s)"
        assert messages[1] == "creating 2 device(s)"
        assert messages[2].startswith("created 2 device(s): dev-")
        assert messages[3] == "2 device(s) ready"
        assert messages[4] == "replicas 2 -> 1 (generation 2)"
        assert messages[5].startswith("terminated 1 device(s): dev-")
        assert all(e["time"] for e in events)
    finally:
        await handle.cancel()


async def test_a_pool_that_cannot_list_its_devices_does_not_say_ready(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    """Issue 23 #4: the key revoked (listings answer 401), the pool keeps its last
    listing for planning but says it cannot see: ProviderAvailable=False
    (Unauthenticated), Ready=Unknown, lastReconciled not advanced; nothing rented."""
    handle = await start_pool(env.client, pool_name, 2)

    async def converged() -> dict[str, Any] | None:
        ready = await condition(handle, "Ready")
        return ready if ready and ready["status"] == "True" else None

    await eventually(converged, what="Ready=True", every=POLL)
    created = len(await pool_devices(control, pool_name))
    TimedASGITransport.unauthenticated_lists.add(pool_name)
    # A change at the provider, which the pool can no longer see.
    device = (await pool_devices(control, pool_name))[0]["id"]
    (await control.post(f"/_emulator/devices/{device}/offline")).raise_for_status()

    async def blind() -> dict[str, Any] | None:
        provider = await condition(handle, "ProviderAvailable")
        return provider if provider and provider["status"] == "False" else None

    provider = await eventually(blind, what="ProviderAvailable=False", timeout=20, every=POLL)
    assert provider["reason"] == "Unauthenticated", provider
    # A pass that had listed before the key went may still have published after
    # it: lastReconciled is read once the pool is blind, then must stand still.
    last = (await handle.query("status"))["lastReconciled"]
    await asyncio.sleep(1)  # a few more passes
    status = await handle.query("status")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown", status
    assert status["phase"] != "Ready", status
    assert status["lastReconciled"] == last, status
    assert len(status["deviceIds"]) == 2, status  # the last listing, kept

    TimedASGITransport.unauthenticated_lists.discard(pool_name)
    (await control.post(f"/_emulator/devices/{device}/online")).raise_for_status()
    await eventually(converged, what="Ready=True again", timeout=20, every=POLL)
    provider = await condition(handle, "ProviderAvailable")
    assert provider is not None and provider["status"] == "True", provider
    assert len(await pool_devices(control, pool_name)) == created  # nothing rented on a guess
    await handle.cancel()
