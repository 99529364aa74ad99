"""Health: replace, do not repair (offline past the threshold, stalled boots).

Thresholds come from FAST (offline after 3 s, health check every 1 s, startup
timeout 15 s); the emulator's control plane makes devices go offline or stall.
Ground truth is the emulator's stats. Outages (pause instead of a replacement
storm) are in test_pool_outage.py, beside this module on another xdist worker.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import SIGNAL_HEALTH_REPORT, health_workflow_id
from devicepool.emulator._stats import _billed_seconds as billed_seconds
from devicepool.testing import eventually, stats
from tests.helpers.histories import history_digest, run_histories
from tests.helpers.pool_waits import converged, created_at_least, delete
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    Workers,
    condition,
    pool_counts,
    pool_devices,
    start_pool,
)

pytestmark = pytest.mark.devserver

# Seconds every listing of a pool is answered late (a fresh listing shows in its history).
LATE_LISTS = 6.0


def billed_hours(emulator: Any, pool: str) -> float:
    """Device-hours the emulator has billed for `pool`'s own devices (its rule: from the
    create to the termination, or to now), read after `stats`, which settles them all.
    The session-wide `deviceHoursBilled` also moves with other tests' devices."""
    state = emulator.state.emulator
    mine = [d for d in state.devices.values() if d.labels.get("pool") == pool]
    return billed_seconds(mine, state.clock.now()) / 3600


async def test_offline_device_is_replaced_once_after_the_threshold(
    env: WorkflowEnvironment,
    workers: Workers,
    control: httpx.AsyncClient,
    emulator: Any,
    pool_name: str,
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    devices = await converged(control, pool_name, 2)
    before = await stats(control)
    billed_before = billed_hours(emulator, pool_name)
    own_before = await pool_counts(control, pool_name)
    started = asyncio.get_running_loop().time()
    victim = devices[0]["id"]
    went_offline = asyncio.get_running_loop().time()
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    # Terminated (never rebooted) and replaced: two ready devices again, the
    # victim not among them.
    async def replaced() -> bool:
        now = await pool_devices(control, pool_name)
        ids = {d["id"] for d in now}
        return victim not in ids and len(now) == 2 and all(d["status"] == "ready" for d in now)

    await eventually(replaced, what="replacement ready", timeout=30)
    took = asyncio.get_running_loop().time() - went_offline
    assert took >= FAST.offline_after_seconds

    after = await stats(control)
    billed = billed_hours(emulator, pool_name) - billed_before
    own = await pool_counts(control, pool_name)
    assert own["created"] - own_before["created"] == 1
    assert own["terminated"] - own_before["terminated"] == 1
    assert after["extra"]["reboots"] == before["extra"]["reboots"]
    # The cost side: no more device-time billed than 2 devices plus the one
    # replacement for the length of the scenario (the emulator's own billing).
    hours = (asyncio.get_running_loop().time() - started) / 3600
    assert billed <= 3 * hours + 0.001, (billed, hours)
    # Nothing more happens afterwards: replaced exactly once.
    await asyncio.sleep(FAST.offline_after_seconds + 2 * FAST.health_seconds)
    assert (await pool_counts(control, pool_name))["created"] == own["created"]
    await delete(handle, control, pool_name)


async def test_a_health_report_replaces_without_waiting_for_a_fresh_listing(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """The report names the terminated devices: the pool plans their replacements
    on the listing it has (one `list_devices` less between threshold and create).

    The test server suggests continue-as-new early (CAN_THRESHOLD): a report that
    lands in a run that has not listed yet is rightly followed by that run's first
    listing, so such a round says nothing and the next device is taken offline."""
    handle = await start_pool(env.client, pool_name, 2)
    devices = await converged(control, pool_name, 2)
    for attempt in range(1, 4):
        # From now on the provider answers every listing of this pool late: a fresh
        # listing before the replacement would show in the pool's history.
        TimedASGITransport.late_list_answers[pool_name] = LATE_LISTS
        victim = devices[0]["id"]
        (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
        await eventually(
            lambda n=attempt: created_at_least(control, pool_name, 2 + n),
            what="the replacement",
            timeout=40,
        )
        between, handed_over = await _between_report_and_replacement(env, handle.id, victim)
        TimedASGITransport.late_list_answers.clear()
        devices = await converged(control, pool_name, 2)
        if not handed_over:
            break
    else:
        pytest.fail("every round's report landed in a run that had not listed yet")
    if "list_devices" in between:
        print(await history_digest(env.client, handle.id))
    assert "list_devices" not in between, between
    assert (await pool_counts(control, pool_name))["created"] == 2 + attempt
    await delete(handle, control, pool_name)


async def _between_report_and_replacement(
    env: WorkflowEnvironment, workflow_id: str, victim: str
) -> tuple[list[str], bool]:
    """Activities the pool scheduled after the health report that terminated
    `victim` and before the next provisioning batch started, and whether a
    continue-as-new lay between the last listing before the report and the batch
    (the report reached a run that had not listed yet)."""
    seen: list[str] | None = None
    listed_in_run = False
    handed_over = False
    for history in await run_histories(env.client, workflow_id):
        listed_in_run = False
        for event in history.events:
            if event.HasField("workflow_execution_signaled_event_attributes"):
                attrs = event.workflow_execution_signaled_event_attributes
                if attrs.signal_name == SIGNAL_HEALTH_REPORT and victim.encode() in b"".join(
                    p.data for p in attrs.input.payloads
                ):
                    seen, handed_over = [], not listed_in_run
            elif event.HasField("workflow_execution_continued_as_new_event_attributes"):
                if seen is not None:
                    handed_over = True
            elif event.HasField("activity_task_scheduled_event_attributes"):
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                if seen is None:
                    listed_in_run = listed_in_run or name == "list_devices"
                else:
                    seen.append(name)
            elif seen is not None and event.HasField(
                "start_child_workflow_execution_initiated_event_attributes"
            ):
                attrs_child = event.start_child_workflow_execution_initiated_event_attributes
                if attrs_child.workflow_type.name == "ProvisionBatch":
                    return seen, handed_over
    raise AssertionError(f"no health report about {victim} followed by a batch")


async def test_device_back_before_the_threshold_is_left_alone(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Back as soon as the check has seen it offline, which on a busy machine can
    # take a while: a threshold of 6 s leaves room for that, and the test checks
    # it really was back before the threshold (the emulator's clock says).
    settings = FAST.model_copy(update={"offline_after_seconds": 6})
    threshold = timedelta(seconds=settings.offline_after_seconds)
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    devices = await converged(control, pool_name, 2)
    before = await pool_counts(control, pool_name)
    victim = devices[0]["id"]
    await control.post(f"/_emulator/devices/{victim}/offline")
    went_offline = await _updated_at(control, victim)
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))
    await eventually(lambda: _has_clock(health, victim), what="health saw it offline", timeout=10)
    await control.post(f"/_emulator/devices/{victim}/online")
    back = await _updated_at(control, victim) - went_offline
    assert back < threshold, back
    await eventually(lambda: _no_clock(health, victim), what="its clock dropped", timeout=10)
    # Past the deadline the clock had, and a check after it: still nothing done.
    deadline = went_offline + threshold + timedelta(seconds=2 * FAST.health_seconds)
    await eventually(lambda: _emulator_past(control, deadline), what="the old deadline")

    after = await pool_counts(control, pool_name)
    assert after["created"] == before["created"]
    assert after["terminated"] == before["terminated"]
    assert victim in {d["id"] for d in await pool_devices(control, pool_name)}
    assert victim not in await health.query("offline_since")
    await delete(handle, control, pool_name)


async def _no_clock(health: Any, device_id: str) -> bool:
    return device_id not in await health.query("offline_since")


async def _has_clock(health: Any, device_id: str) -> bool:
    return device_id in await health.query("offline_since")


async def test_worker_restart_inside_the_offline_window_keeps_the_clock(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The provider leaves `updatedAt` out of the victim's status, so the clock
    # can only come from the check's own state: a check that lost it in the
    # restart would start a new clock after it, and replace the device a whole
    # restart late (with `updatedAt` it would rebuild the same value and hide the loss).
    settings = FAST.model_copy(update={"offline_after_seconds": 6})
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    devices = await converged(control, pool_name, 2)
    before = await pool_counts(control, pool_name)
    victim = devices[0]["id"]
    TimedASGITransport.hide_updated_at.add(victim)
    await control.post(f"/_emulator/devices/{victim}/offline")
    went_offline = await _updated_at(control, victim)  # the emulator's own clock
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))
    await eventually(lambda: _has_clock(health, victim), what="clock started", timeout=10)
    first_seen = _instant((await health.query("offline_since"))[victim])
    restart_at = 4.0  # seconds into the offline window, emulator time
    await eventually(
        lambda: _emulator_past(control, went_offline + timedelta(seconds=restart_at)),
        what="the restart's moment",
        timeout=10,
    )

    await workers.restart()  # every cached workflow is gone; state comes back by replay
    restarted = (await _emulator_now(control) - went_offline).total_seconds()

    assert _instant((await health.query("offline_since"))[victim]) == first_seen

    async def replaced() -> bool:
        ids = {d["id"] for d in await pool_devices(control, pool_name)}
        return victim not in ids and len(ids) == 2

    await eventually(replaced, what="replaced after the restart", timeout=30)
    after = await pool_counts(control, pool_name)
    assert after["created"] - before["created"] == 1
    # Timed from the first sighting, not from the restart: terminated at the
    # threshold, or as soon as the restarted workers run if that is later (+ up
    # to a health interval to notice, + slack for a busy machine). A clock that
    # the restart lost would start again after it: a whole threshold later.
    took = (await _updated_at(control, victim) - went_offline).total_seconds()
    threshold = settings.offline_after_seconds
    due = max(threshold, restarted)
    assert threshold <= took < due + FAST.health_seconds + 2.5, (took, restarted)
    await delete(handle, control, pool_name)


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


async def _updated_at(control: httpx.AsyncClient, device_id: str) -> datetime:
    """The emulator's `updatedAt` of a device (when its status last changed)."""
    response = await control.get(
        f"/api/v1/devices/{device_id}", headers={"Authorization": f"Bearer {ACCOUNTS['default']}"}
    )
    response.raise_for_status()
    return _instant(response.json()["updatedAt"])


async def _emulator_now(control: httpx.AsyncClient) -> datetime:
    return _instant((await control.get("/_emulator/clock")).json()["now"])


async def _emulator_past(control: httpx.AsyncClient, moment: datetime) -> bool:
    return await _emulator_now(control) >= moment


async def test_stalled_provisioning_is_replaced_after_the_startup_timeout(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    settings = FAST.model_copy(update={"startup_timeout_seconds": 4})
    await control.post("/_emulator/faults", json={"provisionStallRate": 1})
    try:
        handle = await start_pool(env.client, pool_name, 1, settings=settings)
        # This pool's own counts (a new pool): another test's teardown moves the
        # session-wide ones.
        await eventually(
            lambda: created_at_least(control, pool_name, 1), what="the stalled create", timeout=10
        )
    finally:
        await control.post("/_emulator/faults", json={})
    stalled = (await pool_devices(control, pool_name))[0]["id"]
    devices = await converged(control, pool_name, 1)
    assert devices[0]["id"] != stalled
    assert (await pool_counts(control, pool_name))["created"] == 2
    await delete(handle, control, pool_name)


async def test_a_custom_max_unhealthy_heals_what_the_default_would_pause_busy_included(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # maxUnhealthy 75% of 3 is 2: two offline at once is healed (the default 40%
    # would allow 1 and pause). One of them is busy: offline busy devices are
    # replaced like any other.
    handle = await start_pool(env.client, pool_name, 3, spec_fields={"maxUnhealthy": "75%"})
    devices = await converged(control, pool_name, 3)
    before = await pool_counts(control, pool_name)
    busy, idle = devices[0]["id"], devices[1]["id"]
    session = await control.post(f"/_emulator/devices/{busy}/session", json={"active": True})
    session.raise_for_status()
    for victim in (busy, idle):
        (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def healed() -> bool:
        now = await pool_devices(control, pool_name)
        ids = {d["id"] for d in now}
        return not ids & {busy, idle} and len(now) == 3 and all(d["status"] == "ready" for d in now)

    await eventually(healed, what="both offline devices replaced", timeout=30)
    paused = await condition(handle, "RemediationPaused")
    assert paused is None or paused["status"] == "False", paused
    after = await pool_counts(control, pool_name)
    assert after["terminated"] - before["terminated"] == 2
    assert after["created"] - before["created"] == 2
    await delete(handle, control, pool_name)


async def test_a_health_check_that_ended_is_started_again(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """Issue 23 #7: the pool's health check ends (terminated by hand here) while the
    pool runs on, idle: the run that sees it gone starts it again (before, only the
    next continue-as-new did: weeks for an idle pool), and an offline device is replaced."""
    # No watch timeout inside the test: an idle pool makes no pass of its own.
    settings = FAST.model_copy(update={"watch_max_seconds": 600})
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    devices = await converged(control, pool_name, 2)

    async def quiet() -> str | None:
        run = (await handle.describe()).run_id
        # Idle: no new run for 1.5 s (a continue-as-new would show).
        await asyncio.sleep(1.5)
        return run if (await handle.describe()).run_id == run else None

    run = await eventually(quiet, what="the pool idle in one run")
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))
    await health.terminate("by hand")

    async def checking_again() -> Any:
        described = await env.client.get_workflow_handle(health.id).describe()
        return described if described.status == WorkflowExecutionStatus.RUNNING else None

    wait = settings.health_liveness_seconds + 20  # a loaded machine: a pass, a child start
    described = await eventually(checking_again, what="a health check running again", timeout=wait)
    if described.parent_run_id != run:
        # A health report made the pool pass and hand over in between (a loaded
        # machine): the new run starts the check too, which tells nothing here.
        # Before the fix, without such a hand-over, the check never ran again.
        assert (await handle.describe()).run_id != run, "started again, not by the pool's run"
    victim = devices[0]["id"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def replaced() -> bool:
        statuses = {d["id"]: d["status"] for d in await pool_devices(control, pool_name)}
        return statuses.get(victim) in (None, "terminating")

    await eventually(replaced, what="the offline device replaced", timeout=20)
    await converged(control, pool_name, 2)
    await handle.cancel()
