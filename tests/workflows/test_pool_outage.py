"""Outages: more devices unhealthy than `maxUnhealthy` pause remediation, and a
region that refuses creates or fails boots backs off (no replacement storm).

Thresholds come from FAST (offline after 3 s, health check every 1 s); the
emulator's control plane takes a region down or fails boots. Ground truth is
the emulator's stats.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import UPDATE_APPLY
from devicepool.api.v1beta1 import DevicePoolSpec, ObjectMeta
from devicepool.testing import eventually, stats
from devicepool.workflows.pool.messages import Accepted, ApplyRequest
from tests.helpers.histories import history_digest
from tests.helpers.pool_waits import (
    converged,
    delete,
    false_condition,
    paused,
    resumed,
    true_condition,
)
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import (
    Workers,
    condition,
    open_region,
    pool_counts,
    pool_devices,
    pool_manifest,
    start_pool,
)

pytestmark = pytest.mark.devserver

# Waits for states that last (a region down or back, a pool recovered) check a status query
# (~5 ms of the test's and the server's CPU) twice a second; the back-off's short
# ProviderAvailable=False and the devices caught booting keep a faster pace.
POLL = 0.5


async def test_region_outage_pauses_remediation_and_resumes(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    region = f"wf-region-{pool_name[-6:]}"
    await open_region(control, region)
    handle = await start_pool(env.client, pool_name, 2, region=region)
    devices = await converged(control, pool_name, 2)
    before = await pool_counts(control, pool_name)
    await open_region(control, region, "down")

    cond = await paused(handle)
    assert "2 of 2 devices unhealthy" in cond["message"]
    # Well past the offline threshold, nothing was terminated or re-created.
    await asyncio.sleep(FAST.offline_after_seconds + 2 * FAST.health_seconds)
    during = await pool_counts(control, pool_name)
    assert during["terminated"] == before["terminated"]
    assert during["created"] == before["created"]

    await open_region(control, region, "up")
    await resumed(handle)
    after_ids = {d["id"] for d in await converged(control, pool_name, 2)}
    assert after_ids == {d["id"] for d in devices}  # they came back; nothing replaced
    await delete(handle, control, pool_name)


async def test_region_refusing_creates_backs_off_and_recovers(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    region = f"wf-down-{pool_name[-6:]}"
    await control.post(f"/_emulator/regions/{region}", json={"status": "down"})
    settings = FAST.model_copy(update={"backoff_initial_seconds": 2, "backoff_max_seconds": 4})
    before = await stats(control)
    handle = await start_pool(env.client, pool_name, 2, region=region, settings=settings)
    cond = await eventually(
        lambda: false_condition(handle, "ProviderAvailable"),
        what="ProviderAvailable=False",
        timeout=15,
        every=POLL,
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
    await eventually(
        lambda: true_condition(handle, "ProviderAvailable"),
        what="recovered",
        timeout=15,
        every=POLL,
    )
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
            lambda: false_condition(handle, "ProviderAvailable"), what="ProviderAvailable=False"
        )
        assert cond["reason"] == "ReplacementsFailing", cond
        assert "device(s) in a row never became ready" in cond["message"], cond
    finally:
        await control.post("/_emulator/faults", json={})
    await converged(control, pool_name, 2)
    await eventually(
        lambda: true_condition(handle, "ProviderAvailable"),
        what="ProviderAvailable=True",
        every=POLL,
    )
    # The region was probed before creates resumed.
    digest = await history_digest(env.client, handle.id)
    assert 'activity_task_scheduled "probe region us-west"' in digest, digest
    await delete(handle, control, pool_name)


async def test_a_region_down_while_devices_boot_is_an_outage_not_failed_boots(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The region goes down after the creates landed and before the devices
    # booted, and stays down past the startup timeout. The provisioning batch
    # sees them offline: that is the health check's to judge (an outage: it
    # pauses), not two failed boots that the pool removes and replaces (with
    # creates that fail too, until "ReplacementsFailing" stops them).
    region = f"wf-boot-{pool_name[-6:]}"
    await open_region(control, region)
    settings = FAST.model_copy(update={"startup_timeout_seconds": 6})
    handle = await start_pool(env.client, pool_name, 2, region=region, settings=settings)

    async def booting() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, pool_name)
        return devices if len(devices) == 2 else None

    devices = await eventually(booting, what="2 devices created", timeout=30, every=0.05)
    await open_region(control, region, "down")
    assert any(d["status"] == "provisioning" for d in devices), devices  # the race happened
    before = await pool_counts(control, pool_name)

    cond = await paused(handle)
    assert "2 of 2 devices unhealthy" in cond["message"], cond
    # Past the batch's startup timeout: nothing removed, nothing created.
    await asyncio.sleep(settings.startup_timeout_seconds + 2 * settings.health_seconds)
    during = await pool_counts(control, pool_name)
    assert (during["terminated"], during["created"]) == (before["terminated"], 2)
    provider = await condition(handle, "ProviderAvailable")
    assert provider is None or provider["status"] == "True", provider

    await open_region(control, region, "up")
    after = await converged(control, pool_name, 2)
    assert {d["id"] for d in after} == {d["id"] for d in devices}  # the same two, booted
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
    await open_region(control, region)
    spec = pool_manifest(pool_name, region=region, replicas=2, proxy=None)["spec"]
    handle = await start_pool(env.client, pool_name, 2, region=region, proxy_ref=None)
    await converged(control, pool_name, 2)
    await open_region(control, region, "down")
    await paused(handle)
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
    await open_region(control, region, "up")
    await resumed(handle)
    await delete(handle, control, pool_name)
