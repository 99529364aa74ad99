"""A healthy pool's health check costs (almost) nothing: no cycle of events per interval.

Before the watch, every `healthSeconds` the check recorded a pool_running, a
listing, a status read and a timer (~17 history events a check, ~1,020 per
idle pool-hour at 60 s), and the whole listing travelled through its history.
Now one `watch_health` activity polls inside the worker and answers only when
a suspect appears (or after `watchMaxSeconds`): idle, its history stands still.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.api.names import health_workflow_id
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows import WORKFLOWS
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import Workers, pool_counts, pool_devices, start_pool

pytestmark = pytest.mark.devserver


async def _events(client: Client, workflow_id: str) -> list[str]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    out = []
    for event in history.events:
        kind = event.WhichOneof("attributes") or ""
        if event.HasField("activity_task_scheduled_event_attributes"):
            kind += ":" + event.activity_task_scheduled_event_attributes.activity_type.name
        out.append(kind)
    return out


async def test_an_idle_pools_health_check_adds_no_events_per_interval(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)

    async def converged() -> bool:
        devices = await pool_devices(control, pool_name)
        return len(devices) == 2 and all(d["status"] == "ready" for d in devices)

    await eventually(converged, what="2 ready devices", timeout=30)
    health = health_workflow_id(pool_name)
    await asyncio.sleep(2 * FAST.health_seconds)  # its first read has answered
    before = await _events(env.client, health)
    idle = 3 * FAST.health_seconds  # three intervals, well inside watchMaxSeconds
    await asyncio.sleep(idle)
    after = await _events(env.client, health)
    # ~17 events a check before: 51 over three intervals. Now nothing wakes it.
    assert len(after) - len(before) <= 3, after[len(before) :]
    # The listing never travels through the check's history.
    scheduled = [e for e in after if e.startswith("activity_task_scheduled")]
    assert not [e for e in scheduled if e.endswith((":list_devices", ":get_statuses"))], scheduled

    # And it still replaces: a device offline past the threshold goes.
    victim = (await pool_devices(control, pool_name))[0]["id"]
    # This pool's own count: another test's teardown moves the session-wide one.
    terminations = (await pool_counts(control, pool_name))["terminated"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def replaced() -> bool:
        ids = {d["id"] for d in await pool_devices(control, pool_name)}
        return victim not in ids

    await eventually(replaced, what=f"{victim} replaced", timeout=FAST.offline_after_seconds + 10)
    assert (await pool_counts(control, pool_name))["terminated"] == terminations + 1
    # The watch's history (idle, a suspect, its replacement) replays on today's
    # code. DEVICEPOOL_SAVE_HEALTH_HISTORY=path keeps it as a tests/replay fixture.
    recorded = await env.client.get_workflow_handle(health).fetch_history()
    await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(recorded)
    if target := os.environ.get("DEVICEPOOL_SAVE_HEALTH_HISTORY"):
        Path(target).write_text(recorded.to_json())
    await handle.cancel()
