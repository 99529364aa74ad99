"""How late the health check sees an offline device when the pool resyncs less often than it polls.

Issue 23 #8: on `devicepool dev --health-seconds 2 --offline-after-seconds 10`
(resync left at 30) an offline device was replaced 23 s after it went offline:
the check judged the listing the pool's own watch made, reused while up to
1.5 x `resyncSeconds` old, so the resync interval, not `healthSeconds`, decided
when it was seen, and a device seen past its threshold is replaced at once, late.

Here resync is 8 s; the check polls every second and the threshold is 3 s.
The device goes offline just after the pool's watch listed, so a check that
waits for its next listing sees it ~8 s late, past the bound asserted (5.5 s).
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import health_workflow_id
from devicepool.testing import eventually
from devicepool.workflows.health.triage import own_read_seconds
from tests.helpers.histories import history_digest
from tests.helpers.pool_waits import converged, delete, just_after_a_listing
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import Workers, pool_devices, start_pool

pytestmark = pytest.mark.devserver

# The pool's watch lists every 8 s (longer than the bounds below), and answers
# only on a change within the test.
SETTINGS = FAST.model_copy(update={"resync_seconds": 8, "watch_max_seconds": 600})
# A poll's own latency, and a busy machine (two shared cores).
SLACK = 1.5


async def just_after_the_pools_watch_listed(handle: WorkflowHandle[Any, Any], pool: str) -> None:
    """Return right after a listing of the pool's watch (it lists as it starts, then
    every resync), with no other listing for 0.6 s after it.

    A watch the pool's previous run cancelled lists once more before it learns
    so (at its next heartbeat): a listing counts only if the pool's current
    watch made it.
    """
    resync = SETTINGS.resync_seconds
    while True:
        start = await eventually(lambda: _watch_started(handle), what="the pool's watch")
        elapsed = (datetime.now(UTC) - start).total_seconds()
        due = resync * math.ceil((elapsed + 0.2) / resync) - elapsed
        await asyncio.sleep(due)
        listed = datetime.now(UTC)
        await just_after_a_listing(pool)
        current = await _watch_started(handle)
        # Still that watch, or one that started (and listed) since.
        if current is not None and (current == start or current >= listed):
            return


async def _watch_started(handle: WorkflowHandle[Any, Any]) -> datetime | None:
    """When the pool's current `watch_devices` started (None: none running now)."""
    for pending in (await handle.describe()).raw_description.pending_activities:
        if pending.activity_type.name == "watch_devices" and pending.HasField("last_started_time"):
            return pending.last_started_time.ToDatetime(tzinfo=UTC)
    return None


async def test_an_offline_device_is_seen_within_the_health_interval_not_the_resync(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2, settings=SETTINGS)
    victim = (await converged(control, pool_name, 2))[0]["id"]
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))
    await just_after_the_pools_watch_listed(handle, pool_name)
    loop = asyncio.get_running_loop()
    went_offline = loop.time()
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def seen() -> float | None:
        return loop.time() - went_offline if victim in await health.query("offline_since") else None

    async def replaced() -> float | None:
        statuses = {d["id"]: d["status"] for d in await pool_devices(control, pool_name)}
        gone = statuses.get(victim) in (None, "terminating")
        return loop.time() - went_offline if gone else None

    try:
        seen_after = await eventually(seen, what="the check saw it", timeout=20, every=0.05)
        replaced_after = await eventually(replaced, what="replaced", timeout=10, every=0.05)
    except BaseException:
        print(await history_digest(env.client, health.id))
        raise
    # Seen within the check's own read spacing (`triage.own_read_seconds`: here
    # 3 polls, the threshold) and a poll, not a resync later.
    spacing = own_read_seconds(
        health_seconds=SETTINGS.health_seconds,
        offline_after_seconds=SETTINGS.offline_after_seconds,
    )
    assert seen_after <= spacing + SETTINGS.health_seconds + SLACK, seen_after
    # Replaced at the threshold: its clock starts at the provider's `updatedAt`.
    threshold = SETTINGS.offline_after_seconds
    assert threshold <= replaced_after <= threshold + 2 * SETTINGS.health_seconds + SLACK, (
        seen_after,
        replaced_after,
    )
    await converged(control, pool_name, 2)  # its replacement too, before the teardown
    await delete(handle, control, pool_name)
