"""Continue-as-new on the dev server (threshold lowered in conftest), with batches in flight."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import httpx
import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.testing import eventually, stats
from devicepool.workflows.pool.messages import DevicesView
from tests.helpers.histories import run_histories, task_failures
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    CAN_THRESHOLD,
    OwnQueueActivities,
    condition,
    pool_counts,
    pool_devices,
    start_pool,
)

pytestmark = pytest.mark.devserver

CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
FAILED = EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED


async def carried_states(client: Client, handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The `PoolState` each hand-over carried, first run to last."""
    return [
        json.loads(
            event.workflow_execution_continued_as_new_event_attributes.input.payloads[0].data
        )["state"]
        for history in await run_histories(client, handle.id)
        for event in history.events
        if event.event_type == CONTINUED
    ]


async def test_continue_as_new_with_batches_in_flight_keeps_every_device_once(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # One-device batches make a child each. Their creates wait at a closed
    # gate, so whenever the history crosses the threshold, however loaded the
    # machine, the hand-over carries batches that are still provisioning.
    gate = TimedASGITransport.create_gate = asyncio.Event()
    settings = FAST.model_copy(update={"provision_batch_size": 1})
    replicas = 2
    handle = await start_pool(env.client, pool_name, replicas, settings=settings)
    # Its own create: a batch of an earlier test's pool, cancelled but not yet ended, can
    # reach the gate first (then the hand-over came before this pool's first batch).
    await eventually(
        lambda: _true(TimedASGITransport.at_gate_of[pool_name] >= 1), what="a create at the gate"
    )

    # Signals that change nothing fill the history to the threshold; then scale up one
    # at a time until the pool has handed over: each step adds a signal, a pass and a
    # batch to the history (batches of two passes in flight at the hand-over).
    await fill_history(handle, replicas=replicas)
    carried: list[dict[str, Any]] = []
    try:
        for _ in range(40):
            carried = await carried_states(env.client, handle)
            if carried:
                break
            replicas += 1
            await handle.signal("scale", {"replicas": replicas})
            await asyncio.sleep(0.5)
        assert carried, "continue-as-new never happened (is the dev server threshold applied?)"
        assert carried[0]["slots"]["inFlight"], carried[0]  # PoolState.slots
        assert (await pool_counts(control, pool_name))["created"] == 0  # all still at the gate
    finally:
        gate.set()

    async def converged() -> bool:
        devices = await pool_devices(control, pool_name)
        return len(devices) == replicas and all(d["status"] == "ready" for d in devices)

    await eventually(converged, what=f"{replicas} ready devices", timeout=60)

    # This pool's own count (a new pool): another test's teardown moves the session-wide one.
    assert (await pool_counts(control, pool_name))["created"] == replicas

    async def reports_ready() -> bool:
        status = await env.client.get_workflow_handle(handle.id).query("status")
        return status["readyDevices"] == replicas

    await eventually(reports_ready, what=f"the pool's own status to say {replicas} ready")

    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await env.client.get_workflow_handle(handle.id).result()
    assert (await stats(control))["devices"]["byPool"].get(pool_name, 0) == 0


async def activity_outcomes(
    handle: WorkflowHandle[Any, Any], activity: str, outcome: EventType.ValueType
) -> int:
    """How many `activity` activities of the workflow's current run ended as `outcome`."""
    history = await handle.fetch_history()
    scheduled = {
        event.event_id
        for event in history.events
        if event.event_type == SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == activity
    }
    field = {
        COMPLETED: "activity_task_completed_event_attributes",
        FAILED: "activity_task_failed_event_attributes",
    }[outcome]
    return sum(
        1
        for event in history.events
        if event.event_type == outcome and getattr(event, field).scheduled_event_id in scheduled
    )


async def hand_over(handle: WorkflowHandle[Any, Any], *, replicas: int) -> None:
    """Make the pool continue as new after its next pass, its size unchanged.

    Signals that change nothing fill the history past the threshold without a
    pass; `wake` makes one pass, which then hands over. (One more replica and
    back, as this once sent, rented a device whenever the pool ran a pass
    between those two signals: seen on a loaded CI machine.)
    """
    await fill_history(handle, replicas=replicas)
    await handle.signal("wake")


async def fill_history(handle: WorkflowHandle[Any, Any], *, replicas: int) -> None:
    """`CAN_THRESHOLD` signals that change nothing, sent at once: the server hands them to
    the pool in a few workflow tasks instead of one task each (each costs the worker's
    and the server's CPU), and the history still gains one event per signal."""
    signal = {"replicas": replicas}
    await asyncio.gather(*(handle.signal("scale", signal) for _ in range(CAN_THRESHOLD)))


async def _true(value: bool) -> bool:
    return value


async def test_a_new_run_answers_devices_and_status_before_its_first_listing_lands(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Seen in a fresh-clone `make test`: `apply --wait` said 2/2 ready, then
    # `devicepool devices` printed [] — the pool had continued as new, and the
    # new run knew no device until its first listing came back. Here every
    # listing of the pool is answered late, so that window is long and certain.
    handle = await start_pool(env.client, pool_name, 2)

    async def ready() -> bool:
        status = await handle.query("status")
        return status["readyDevices"] == 2

    await eventually(ready, what="2 ready devices", timeout=60)
    truth = sorted(d["id"] for d in await pool_devices(control, pool_name))
    assert len(truth) == 2
    first_run = (await handle.describe()).run_id
    TimedASGITransport.late_list_answers[pool_name] = 8.0
    await hand_over(handle, replicas=2)

    async def new_run() -> bool:
        return (await handle.describe()).run_id != first_run

    await eventually(new_run, what="a continue-as-new", timeout=30, every=0.1)
    live = env.client.get_workflow_handle(handle.id)
    view = await live.query("devices", result_type=DevicesView)
    status = await live.query("status")
    # Asked inside the window: the new run's first listing had not landed yet.
    landed = await activity_outcomes(live, "list_devices", COMPLETED)
    assert not landed, "the first listing landed first: no window tested"
    assert sorted(d.id for d in view.devices) == truth
    assert status["readyDevices"] == 2 and sorted(status["deviceIds"]) == truth, status

    TimedASGITransport.late_list_answers.clear()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await env.client.get_workflow_handle(handle.id).result()
    assert (await pool_counts(control, pool_name))["created"] == 2


class RefusedListings(OwnQueueActivities):
    """The pool's own activities; its listings fail for good while `refusing` (a revoked key)."""

    refusing = False

    def _refuse(self) -> None:
        if self.refusing:
            raise ApplicationError(
                "provider refused the listing", type="Unauthorized", non_retryable=True
            )

    @activity.defn(name="list_devices")
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult:
        self._refuse()
        return await self.real.list_devices(input)

    @activity.defn(name="watch_devices")
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        self._refuse()
        return await self.real.watch_devices(input)


async def test_a_new_run_whose_first_listing_fails_still_publishes_the_devices_it_has(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The pool keeps its last observation when a listing fails ("never create
    # or terminate on a guess"); a run that had just continued as new had none,
    # and published 0 ready and no device ids for a pool of 2 ready devices.
    activities = RefusedListings(worker)
    async with activities.serving(env.client, f"can-{pool_name}"):
        handle = await start_pool(env.client, pool_name, 2, task_queue=f"can-{pool_name}")

        async def ready() -> bool:
            return (await handle.query("status"))["readyDevices"] == 2

        await eventually(ready, what="2 ready devices", timeout=60)
        truth = sorted(d["id"] for d in await pool_devices(control, pool_name))
        first_run = (await handle.describe()).run_id
        activities.refusing = True
        await hand_over(handle, replicas=2)

        async def new_run_published() -> tuple[Any, dict[str, Any]] | None:
            described = await handle.describe()
            if described.run_id == first_run:
                return None
            live = env.client.get_workflow_handle(handle.id, run_id=described.run_id)
            # A pass of the new run failed to list (a run says that once, when it
            # starts failing). A failed listing does not move lastReconciled (it is
            # not an observation), so the run is found by its event.
            events = (await live.query("events"))["events"]
            failed = [
                e
                for e in events
                if e["reason"] == "ListFailed"
                and datetime.fromisoformat(e["time"]) >= described.start_time
            ]
            return (live, dict(await live.query("status"))) if failed else None

        live, status = await eventually(new_run_published, what="a pass of the new run", timeout=30)
        ready_cond = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready_cond["status"] == "Unknown", status
        # That run's own activities (another hand-over may have followed it by now).
        assert await activity_outcomes(live, "list_devices", FAILED), "no listing failed"
        assert not await activity_outcomes(live, "list_devices", COMPLETED)
        assert status["readyDevices"] == 2 and sorted(status["deviceIds"]) == truth, status
        view = await handle.query("devices", result_type=DevicesView)
        assert sorted(d.id for d in view.devices) == truth

        activities.refusing = False
        await eventually(ready, what="2 ready devices again", timeout=30)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await env.client.get_workflow_handle(handle.id).result()
    assert (await pool_counts(control, pool_name))["created"] == 2


async def test_a_spec_change_during_the_handing_over_pass_reaches_the_health_check(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    """Issue 23 #6: a scale arrives while the pass that then continues as new awaits a
    termination; the next run must still tell the health check the new size."""
    handle = await start_pool(env.client, pool_name, 3)

    async def serving(n: int) -> bool:
        devices = await pool_devices(control, pool_name)
        return sum(d["status"] == "ready" for d in devices) == n

    await eventually(lambda: serving(3), what="3 ready devices", timeout=60)
    first_run = (await handle.describe()).run_id
    # History past the threshold without a pass: the next pass hands over.
    await fill_history(handle, replicas=3)
    gate = TimedASGITransport.delete_gate = asyncio.Event()
    await handle.signal("scale", {"replicas": 2})  # a pass that terminates one device

    async def deleting() -> bool:
        history = await handle.fetch_history()
        return any(
            e.activity_task_scheduled_event_attributes.activity_type.name == "terminate_device"
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        )

    await eventually(deleting, what="the scale-down's termination", timeout=30)
    await handle.signal("scale", {"replicas": 5})  # while that pass awaits it
    gate.set()

    async def new_run() -> bool:
        return (await handle.describe()).run_id != first_run

    await eventually(new_run, what="a continue-as-new", timeout=30, every=0.1)
    await eventually(lambda: serving(5), what="5 ready devices", timeout=60)
    # Two offline: within maxUnhealthy (40%) of 5, not of a stale 2 or 3 (1 each).
    offline = [d["id"] for d in await pool_devices(control, pool_name)][:2]
    for device in offline:
        (await control.post(f"/_emulator/devices/{device}/offline")).raise_for_status()

    async def replaced() -> bool:
        statuses = {d["id"]: d["status"] for d in await pool_devices(control, pool_name)}
        return all(statuses.get(d) in (None, "terminating") for d in offline)

    await eventually(replaced, what="both offline devices replaced", timeout=30)
    paused = await condition(env.client.get_workflow_handle(handle.id), "RemediationPaused")
    assert paused is None or paused["status"] == "False", paused
    await handle.cancel()


async def test_a_pool_started_in_v1alpha1_hands_over_in_v1beta1(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The input a v0.1.0 client started pools with: the article's v1alpha1 spec.
    alpha = {
        "provider": "bitcloudphone",
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 1,
        "proxy": {"poolRef": "proxyseller-us", "stickyTTL": 900},
        "providerCredentialRef": "default",
        "maxUnhealthy": 1,
    }
    handle = await env.client.start_workflow(
        "DevicePool",
        {"metadata": {"name": pool_name}, "spec": alpha, "settings": FAST.to_json_dict()},
        id=pool_workflow_id(pool_name),
        task_queue=TASK_QUEUE,
    )

    async def ready() -> bool:
        status = await env.client.get_workflow_handle(handle.id).query("status")
        return bool(status["readyDevices"] == 1)

    await eventually(ready, what="1 ready device")
    spec = (await handle.query("spec"))["spec"]  # read into v1beta1 from the first task
    assert spec["provider"] == {"name": "bitcloudphone", "account": "default"}, spec
    await hand_over(handle, replicas=1)

    async def handed_over() -> list[dict[str, Any]]:
        return [
            json.loads(
                event.workflow_execution_continued_as_new_event_attributes.input.payloads[0].data
            )["spec"]
            for history in await run_histories(env.client, handle.id)
            for event in history.events
            if event.event_type == CONTINUED
        ]

    await eventually(handed_over, what="the hand-over")
    [carried, *_] = await handed_over()
    assert carried["provider"] == {"name": "bitcloudphone", "account": "default"}, carried
    assert carried["proxy"] == {"poolRef": "proxyseller-us", "sessionTTL": "15m"}, carried
    assert carried["health"]["maxUnhealthy"] == 1 and "providerCredentialRef" not in carried
    await eventually(ready, what="1 ready device on the new run")
    assert len(await pool_devices(control, pool_name)) == 1  # nothing rented again
    # UnhandledCommand: the server refused a completion because signals came in
    # meanwhile (the burst that makes the hand-over); the task ran again. Not code.
    failures = await task_failures(env.client, handle.id)
    assert [f for f in failures if not f.endswith(": UnhandledCommand")] == []
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), what="teardown")


async def _gone(control: httpx.AsyncClient, name: str) -> bool:
    return not await pool_devices(control, name)
