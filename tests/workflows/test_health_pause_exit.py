"""Leaving a remediation pause: what is terminated is judged on a fresh read.

Issue 23 (suspected): when an outage ends, the health check terminates every
device whose offline clock ran out during it. The answer that ends the pause
may be a listing the pool's own watch made on the same worker a while ago
(reused while at most `triage.reuse_listing_seconds` old: up to a resync, 30 s
at the defaults); in a gradual recovery a device that came back after that
listing was terminated all the same, seconds after it was back.

Here the region's devices go down together (remediation pauses), and their
clocks run out. Then the pool's watch "lists" mid-recovery — two devices back,
the third still offline — and the third comes back right after: the whole
region is up before the check's next poll. The listing is put into the
worker's memory of listings as the pool's watch would have made it (a real
provider answer in mid-recovery would let the check legitimately see the third
offline before it is back, so the test could not tell the two apart).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import DeviceStatus
from devicepool.api.names import health_workflow_id
from devicepool.testing import eventually
from tests.helpers.histories import history_digest
from tests.helpers.pool_waits import (
    converged,
    delete,
    just_after_a_listing,
    resumed,
    true_condition,
)
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import Workers, open_region, pool_counts, start_pool

pytestmark = pytest.mark.devserver

# The pool's watch lists every 5 s on this worker: a listing stays reusable
# past the check's next poll (every second); offline after 3 s.
SETTINGS = FAST.model_copy(update={"resync_seconds": 5})


async def test_a_device_back_after_the_listing_that_ends_a_pause_is_kept(
    env: WorkflowEnvironment,
    workers: Workers,
    worker: DeviceActivities,
    control: httpx.AsyncClient,
    pool_name: str,
) -> None:
    region = f"wf-exit-{pool_name[-6:]}"
    await open_region(control, region)
    handle = await start_pool(env.client, pool_name, 3, region=region, settings=SETTINGS)
    devices = await converged(control, pool_name, 3)
    ids = sorted(d["id"] for d in devices)
    before = await pool_counts(control, pool_name)
    await open_region(control, region, "down")
    # 3 of 3 unhealthy: more than maxUnhealthy (40% of 3, at least one).
    cond = await eventually(
        lambda: true_condition(handle, "RemediationPaused"), what="paused", timeout=30
    )
    assert "3 of 3 devices unhealthy" in cond["message"], cond
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))
    clocks = await health.query("offline_since")
    assert sorted(clocks) == ids, clocks
    # Every clock runs out during the outage.
    await asyncio.sleep(SETTINGS.offline_after_seconds + 1)

    await just_after_a_listing(pool_name)
    listed = await worker._pool_devices("default", pool_name)
    assert {d.status for d in listed} == {DeviceStatus.OFFLINE}, listed
    mid_recovery = [
        d if d.id == ids[-1] else d.model_copy(update={"status": DeviceStatus.READY})
        for d in listed
    ]
    worker._remember("default", pool_name, mid_recovery)
    await open_region(control, region, "up")

    await resumed(handle)
    # Past a few polls and a fresh read at any deadline: nothing was terminated.
    await asyncio.sleep(3 * SETTINGS.health_seconds)
    after = await pool_counts(control, pool_name)
    if after["terminated"] != before["terminated"]:
        print(await history_digest(env.client, health.id))
    assert after["terminated"] == before["terminated"], (before, after)
    assert sorted(d["id"] for d in await converged(control, pool_name, 3)) == ids
    await delete(handle, control, pool_name)
