"""Health: replace, do not repair — and pause instead of a replacement storm.

Thresholds come from FAST (offline after 3 s, health check every 1 s, startup
timeout 15 s); the emulator's control plane makes devices go offline, stall or
a region go down. Ground truth is the emulator's stats.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment
from wf_support import (
    ACCOUNTS,
    FAST,
    TimedASGITransport,
    Workers,
    condition,
    eventually,
    history_digest,
    pool_counts,
    pool_devices,
    pool_manifest,
    start_pool,
    stats,
)

from devicepool.api.names import UPDATE_APPLY, health_workflow_id
from devicepool.api.v1alpha1 import DevicePoolSpec, ObjectMeta
from devicepool.workflows.messages import Accepted, ApplyRequest

pytestmark = pytest.mark.devserver


async def converged(control: httpx.AsyncClient, name: str, n: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, name)
        ok = len(devices) == n and all(d["status"] == "ready" for d in devices)
        return devices if ok else None

    return await eventually(check, what=f"{n} ready devices in {name}", timeout=30)


async def delete(handle: Any, control: httpx.AsyncClient, name: str) -> None:
    await handle.cancel()
    try:
        await eventually(lambda: _zero(control, name), what=f"{name} torn down", timeout=30)
    except BaseException:
        print(await history_digest(handle._client, handle.id))
        raise


async def _zero(control: httpx.AsyncClient, name: str) -> bool:
    return (await stats(control))["devices"]["byPool"].get(name, 0) == 0


async def test_offline_device_is_replaced_once_after_the_threshold(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 3)
    devices = await converged(control, pool_name, 3)
    before = await stats(control)
    own_before = await pool_counts(control, pool_name)
    started = asyncio.get_running_loop().time()
    victim = devices[0]["id"]
    went_offline = asyncio.get_running_loop().time()
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    # Terminated (never rebooted) and replaced: three ready devices again, the
    # victim not among them.
    async def replaced() -> bool:
        now = await pool_devices(control, pool_name)
        ids = {d["id"] for d in now}
        return victim not in ids and len(now) == 3 and all(d["status"] == "ready" for d in now)

    await eventually(replaced, what="replacement ready", timeout=30)
    took = asyncio.get_running_loop().time() - went_offline
    assert took >= FAST.offline_after_seconds

    after = await stats(control)
    own = await pool_counts(control, pool_name)
    assert own["created"] - own_before["created"] == 1
    assert own["terminated"] - own_before["terminated"] == 1
    assert after["extra"]["reboots"] == before["extra"]["reboots"]
    # The cost side: no more device-time billed than 3 devices plus the one
    # replacement for the length of the scenario (the emulator's own billing).
    hours = (asyncio.get_running_loop().time() - started) / 3600
    billed = after["deviceHoursBilled"] - before["deviceHoursBilled"]
    assert billed <= 4 * hours + 0.001, (billed, hours)
    # Nothing more happens afterwards: replaced exactly once.
    await asyncio.sleep(FAST.offline_after_seconds + 2 * FAST.health_seconds)
    assert (await pool_counts(control, pool_name))["created"] == own["created"]
    await delete(handle, control, pool_name)


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
            lambda: _created(control, pool_name, 1), what="the stalled create", timeout=10
        )
    finally:
        await control.post("/_emulator/faults", json={})
    stalled = (await pool_devices(control, pool_name))[0]["id"]
    devices = await converged(control, pool_name, 1)
    assert devices[0]["id"] != stalled
    assert (await pool_counts(control, pool_name))["created"] == 2
    await delete(handle, control, pool_name)


async def _created(control: httpx.AsyncClient, name: str, n: int) -> bool:
    return (await pool_counts(control, name))["created"] >= n


async def test_region_outage_pauses_remediation_and_resumes(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    region = f"wf-region-{pool_name[-6:]}"
    spec_region = {"region": region}
    handle = await start_pool(env.client, pool_name, 4, region=spec_region["region"])
    devices = await converged(control, pool_name, 4)
    before = await pool_counts(control, pool_name)
    (await control.post(f"/_emulator/regions/{region}", json={"status": "down"})).raise_for_status()

    # (A health check's own reads are a few polls apart, triage.own_read_seconds,
    # and this wait shares two cores with the rest of make test: a generous bound.)
    cond = await eventually(
        lambda: _true(handle, "RemediationPaused"), what="RemediationPaused=True", timeout=30
    )
    assert "4 of 4 devices unhealthy" in cond["message"]
    # Well past the offline threshold, nothing was terminated or re-created.
    await asyncio.sleep(FAST.offline_after_seconds + 2 * FAST.health_seconds)
    during = await pool_counts(control, pool_name)
    assert during["terminated"] == before["terminated"]
    assert during["created"] == before["created"]

    (await control.post(f"/_emulator/regions/{region}", json={"status": "up"})).raise_for_status()
    await eventually(lambda: _false(handle, "RemediationPaused"), what="resumed", timeout=30)
    after_ids = {d["id"] for d in await converged(control, pool_name, 4)}
    assert after_ids == {d["id"] for d in devices}  # they came back; nothing replaced
    await delete(handle, control, pool_name)


async def _true(handle: Any, type_: str) -> dict[str, Any] | None:
    cond = await condition(handle, type_)
    return cond if cond and cond["status"] == "True" else None


async def _false(handle: Any, type_: str) -> dict[str, Any] | None:
    cond = await condition(handle, type_)
    return cond if cond and cond["status"] == "False" else None


async def test_region_refusing_creates_backs_off_and_recovers(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    region = f"wf-down-{pool_name[-6:]}"
    await control.post(f"/_emulator/regions/{region}", json={"status": "down"})
    settings = FAST.model_copy(update={"backoff_initial_seconds": 2, "backoff_max_seconds": 4})
    before = await stats(control)
    handle = await start_pool(env.client, pool_name, 2, region=region, settings=settings)
    cond = await eventually(
        lambda: _false(handle, "ProviderAvailable"), what="ProviderAvailable=False", timeout=15
    )
    assert cond["reason"] in {"RegionUnavailable", "RegionDown"}
    # Backing off: a handful of refused creates, not a storm.
    await asyncio.sleep(6)
    refused = (await stats(control))["creates"]["rejected"] - before["creates"]["rejected"]
    assert 1 <= refused <= 8, refused

    await control.post(f"/_emulator/regions/{region}", json={"status": "up"})
    try:
        await converged(control, pool_name, 2)
    except BaseException:
        print(await history_digest(env.client, handle.id))
        raise
    await eventually(lambda: _true(handle, "ProviderAvailable"), what="recovered", timeout=15)
    await delete(handle, control, pool_name)


@pytest.mark.parametrize("resync_seconds", [30, FAST.resync_seconds])
async def test_failing_boots_stop_creates_then_a_probe_lets_them_resume(
    env: WorkflowEnvironment,
    workers: Workers,
    control: httpx.AsyncClient,
    pool_name: str,
    resync_seconds: float,
) -> None:
    # README: `failureStreakLimit` devices in a row that never reach ready stop
    # creates in the region (ProviderAvailable=False, ReplacementsFailing), on a
    # back-off, and the region's status is probed before creating again.
    # At 30 s (the default) the batch, which looks every min(5, resync) s,
    # reads a failed boot first. At FAST's 0.3 s the pool's watch removes a
    # failed device before its batch reads it, and the batch finds it
    # terminating: the pool must still count it as a failed boot (it counted
    # nothing, on every boot of a 12-s run, while it called it "vanished").
    settings = FAST.model_copy(
        update={
            "resync_seconds": resync_seconds,
            "failure_streak_limit": 1,
            "backoff_initial_seconds": 2,
            "backoff_max_seconds": 2,
        }
    )
    await control.post("/_emulator/faults", json={"provisionFailureRate": 1})
    try:
        handle = await start_pool(env.client, pool_name, 2, settings=settings)
        cond = await eventually(
            lambda: _false(handle, "ProviderAvailable"), what="ProviderAvailable=False"
        )
        assert cond["reason"] == "ReplacementsFailing", cond
        assert "device(s) in a row never became ready" in cond["message"], cond
    finally:
        await control.post("/_emulator/faults", json={})
    await converged(control, pool_name, 2)
    await eventually(lambda: _true(handle, "ProviderAvailable"), what="ProviderAvailable=True")
    # The region was probed before creates resumed.
    digest = await history_digest(env.client, handle.id)
    assert 'activity_task_scheduled "probe region us-west"' in digest, digest
    await delete(handle, control, pool_name)


async def test_a_custom_max_unhealthy_heals_what_the_default_would_pause_busy_included(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # maxUnhealthy 75% of 4 is 3: two offline at once is healed (the default 40%
    # would allow 1 and pause). One of them is busy: offline busy devices are
    # replaced like any other.
    handle = await start_pool(env.client, pool_name, 4, spec_fields={"maxUnhealthy": "75%"})
    devices = await converged(control, pool_name, 4)
    before = await pool_counts(control, pool_name)
    busy, idle = devices[0]["id"], devices[1]["id"]
    session = await control.post(f"/_emulator/devices/{busy}/session", json={"active": True})
    session.raise_for_status()
    for victim in (busy, idle):
        (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def healed() -> bool:
        now = await pool_devices(control, pool_name)
        ids = {d["id"] for d in now}
        return not ids & {busy, idle} and len(now) == 4 and all(d["status"] == "ready" for d in now)

    await eventually(healed, what="both offline devices replaced", timeout=30)
    paused = await condition(handle, "RemediationPaused")
    assert paused is None or paused["status"] == "False", paused
    after = await pool_counts(control, pool_name)
    assert after["terminated"] - before["terminated"] == 2
    assert after["created"] - before["created"] == 2
    await delete(handle, control, pool_name)


# ---------------------------------------------------------------- maxUnhealthy for every size


async def test_a_two_device_pool_heals_one_offline_device_with_the_default_limit(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Default maxUnhealthy (40%): 40% of 2 rounds down to 0, but one replacement
    # at a time is always allowed, so a small pool heals instead of pausing.
    handle = await start_pool(env.client, pool_name, 2)
    devices = await converged(control, pool_name, 2)
    before = await pool_counts(control, pool_name)
    victim = devices[0]["id"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))
    await eventually(lambda: _has_clock(health, victim), what="health saw it offline", timeout=10)

    async def healed() -> bool:
        now = await pool_devices(control, pool_name)
        ids = {d["id"] for d in now}
        return victim not in ids and len(now) == 2 and all(d["status"] == "ready" for d in now)

    try:
        await eventually(healed, what="the offline device replaced", timeout=20)
    except BaseException:
        print(await history_digest(env.client, health.id))
        raise
    paused = await condition(handle, "RemediationPaused")
    assert paused is None or paused["status"] == "False", paused
    # Replaced by the health check at the threshold: one termination, one
    # create (not a third device first, then a scale-down).
    after = await pool_counts(control, pool_name)
    assert after["terminated"] - before["terminated"] == 1
    assert after["created"] - before["created"] == 1
    await delete(handle, control, pool_name)


async def test_six_of_ten_offline_at_once_still_pauses(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # 40% of 10 desired = 4: six devices down at once is an outage, not bad
    # devices, and the floor of one does not loosen that.
    handle = await start_pool(env.client, pool_name, 10)
    devices = await converged(control, pool_name, 10)
    before = await pool_counts(control, pool_name)
    down = [d["id"] for d in devices[:6]]
    for device_id in down:
        (await control.post(f"/_emulator/devices/{device_id}/offline")).raise_for_status()

    # (A health check's own reads are a few polls apart, triage.own_read_seconds,
    # and this wait shares two cores with the rest of make test: a generous bound.)
    cond = await eventually(
        lambda: _true(handle, "RemediationPaused"), what="RemediationPaused=True", timeout=30
    )
    assert "6 of 10 devices unhealthy" in cond["message"], cond
    await asyncio.sleep(FAST.offline_after_seconds + 2 * FAST.health_seconds)
    during = await pool_counts(control, pool_name)
    assert during["terminated"] == before["terminated"]
    assert during["created"] == before["created"]

    for device_id in down:
        (await control.post(f"/_emulator/devices/{device_id}/online")).raise_for_status()
    await eventually(lambda: _false(handle, "RemediationPaused"), what="resumed", timeout=30)
    await delete(handle, control, pool_name)


async def test_a_region_down_while_devices_boot_is_an_outage_not_failed_boots(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The region goes down after the creates landed and before the devices
    # booted, and stays down past the startup timeout. The provisioning batch
    # sees them offline: that is the health check's to judge (an outage: it
    # pauses), not four failed boots that the pool removes and replaces (with
    # creates that fail too, until "ReplacementsFailing" stops them).
    region = f"wf-boot-{pool_name[-6:]}"
    settings = FAST.model_copy(update={"startup_timeout_seconds": 6})
    handle = await start_pool(env.client, pool_name, 4, region=region, settings=settings)

    async def booting() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, pool_name)
        return devices if len(devices) == 4 else None

    devices = await eventually(booting, what="4 devices created", timeout=30, every=0.05)
    (await control.post(f"/_emulator/regions/{region}", json={"status": "down"})).raise_for_status()
    assert any(d["status"] == "provisioning" for d in devices), devices  # the race happened
    before = await pool_counts(control, pool_name)

    cond = await eventually(
        lambda: _true(handle, "RemediationPaused"), what="RemediationPaused=True", timeout=30
    )
    assert "4 of 4 devices unhealthy" in cond["message"], cond
    # Past the batch's startup timeout: nothing removed, nothing created.
    await asyncio.sleep(settings.startup_timeout_seconds + 2 * settings.health_seconds)
    during = await pool_counts(control, pool_name)
    assert (during["terminated"], during["created"]) == (before["terminated"], 4)
    status = await handle.query("status")
    provider = next((c for c in status["conditions"] if c["type"] == "ProviderAvailable"), None)
    assert provider is None or provider["status"] == "True", provider

    (await control.post(f"/_emulator/regions/{region}", json={"status": "up"})).raise_for_status()
    after = await converged(control, pool_name, 4)
    assert {d["id"] for d in after} == {d["id"] for d in devices}  # the same four, booted
    events = [e["reason"] for e in (await handle.query("events"))["events"]]
    assert "BootFailed" not in events, events
    await delete(handle, control, pool_name)


async def test_remediation_paused_survives_the_pools_continue_as_new(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The health check tells the pool once that remediation is paused (it
    # reports again only when something changes, or after watch_max_seconds).
    # A pool that continues as new in between must still say so.
    region = f"wf-can-{pool_name[-6:]}"
    spec = pool_manifest(pool_name, region=region, replicas=4, proxy=None)["spec"]
    handle = await start_pool(env.client, pool_name, 4, region=region, proxy_ref=None)
    await converged(control, pool_name, 4)
    (await control.post(f"/_emulator/regions/{region}", json={"status": "down"})).raise_for_status()
    await eventually(
        lambda: _true(handle, "RemediationPaused"), what="RemediationPaused=True", timeout=30
    )
    paused_run = (await handle.describe()).run_id

    # Spec changes the health check does not hear of (its config is maxUnhealthy
    # and replicas) grow the pool's history past the dev server's lowered
    # continue-as-new threshold (tests/workflows/conftest.py).
    versions = iter(["15", "14"] * 20)

    async def next_run() -> str | None:
        changed = DevicePoolSpec.model_validate({**spec, "osVersion": next(versions)})
        await handle.execute_update(
            UPDATE_APPLY,
            ApplyRequest(metadata=ObjectMeta(name=pool_name), spec=changed),
            result_type=Accepted,
        )
        run = (await handle.describe()).run_id
        return run if run != paused_run else None

    await eventually(next_run, what="the pool's next run", timeout=30, every=0.3)
    # The new run's passes keep the condition (well inside watch_max_seconds,
    # so no fresh health report is what keeps it).
    deadline = asyncio.get_running_loop().time() + 3
    while asyncio.get_running_loop().time() < deadline:
        cond = await condition(handle, "RemediationPaused")
        assert cond is not None and cond["status"] == "True", cond
        await asyncio.sleep(0.1)
    (await control.post(f"/_emulator/regions/{region}", json={"status": "up"})).raise_for_status()
    await eventually(lambda: _false(handle, "RemediationPaused"), what="resumed", timeout=30)
    await delete(handle, control, pool_name)
