"""The watches' heartbeat timeout: chosen for what it buys, and behind its patch.

A watch heartbeats to the server every 0.8 × its heartbeat timeout (the SDK's throttle, its
cap lifted by the worker), and every heartbeat that reaches the server is a billed Action on
Temporal Cloud. A quiet pool's `watch_devices` (no device in motion) and a health check's
`watch_health` with no suspect wait long: twenty polls, at most ten minutes; a pool in motion
(a device booting, offline, rebooting) is watched closely, as before: three polls, at least
30 s. docs/scaling.md, 'Heartbeats'. Runs from before keep their timeouts
(`workflow.patched`): their histories replay unchanged.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import health_workflow_id, pool_workflow_id
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.shared.heartbeats import (
    WATCH_HEARTBEAT_PATCH,
    settled,
    watch_heartbeat_timeout,
)
from tests.helpers.histories import run_histories
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import start_pool

# Intervals where the timeouts differ: the old one (max(30 s, 3 × interval)) is 30 s for
# both, a quiet watch's twenty polls are 100 s (the pool's) and 80 s (the health check's).
SETTINGS = FAST.model_copy(update={"resync_seconds": 5.0, "health_seconds": 4.0})
QUIET_POOL, QUIET_HEALTH, CLOSE = (timedelta(seconds=s) for s in (100, 80, 30))
T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("poll", "quiet", "timeout"),
    [
        (30, True, 600),  # the default resync: twenty polls, ten minutes
        (60, True, 600),  # the default health interval: capped at ten minutes
        (30, False, 90),  # in motion: three polls, as before
        (60, False, 180),
        (5, True, 100),  # a short interval is watched closely: twenty polls
        (1, True, 30),  # never under 30 s
        (1, False, 30),
        (300, True, 900),  # a long poll: never under three polls (the watch beats once a poll)
        (7 * 24 * 3600, True, 3 * 7 * 24 * 3600),
    ],
)
def test_quiet_twenty_polls_at_most_ten_minutes_in_motion_three(
    poll: float, quiet: bool, timeout: float
) -> None:
    assert watch_heartbeat_timeout(poll, quiet=quiet) == timedelta(seconds=timeout)


@pytest.mark.parametrize(
    ("statuses", "quiet"),
    [
        ([], True),
        (["ready", "busy"], True),
        (["ready", "provisioning"], False),
        (["offline"], False),
        (["rebooting"], False),
        (["terminating"], False),
        (["failed"], False),
    ],
)
def test_a_pool_is_quiet_while_no_device_is_in_motion(statuses: list[str], quiet: bool) -> None:
    devices = [
        am.DeviceInfo(id=f"d{i}", status=status, created_at=T0) for i, status in enumerate(statuses)
    ]
    assert settled(devices) is quiet


def _scheduled(history: WorkflowHistory, activity_type: str) -> list[tuple[int, timedelta]]:
    """(event id, heartbeat timeout) of each `activity_type` scheduled in the history."""
    return [
        (e.event_id, e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta())
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]


async def _timeouts(client: Client, workflow_id: str, activity_type: str) -> list[timedelta]:
    return [
        t for h in await run_histories(client, workflow_id) for _, t in _scheduled(h, activity_type)
    ]


async def _replays_with_the_patch(client: Client, workflow_id: str) -> None:
    """Every run replays on this build, and one has the patch's marker."""
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    marked = False
    for history in await run_histories(client, workflow_id):
        await replayer.replay_workflow(history)
        patch = WATCH_HEARTBEAT_PATCH.encode()
        marked = marked or any(patch in e.SerializeToString() for e in history.events)
    assert marked, f"no run of {workflow_id} has the patch's marker"


@pytest.mark.devserver
async def test_a_quiet_pool_and_health_check_are_watched_with_the_long_timeout(
    env: WorkflowEnvironment, worker: DeviceActivities
) -> None:
    name = f"wf-{uuid.uuid4().hex[:8]}"
    handle = await start_pool(env.client, name, 1, settings=SETTINGS)
    try:

        async def quiet_watches() -> bool:
            pool = await _timeouts(env.client, pool_workflow_id(name), "watch_devices")
            health = await _timeouts(env.client, health_workflow_id(name), "watch_health")
            return QUIET_POOL in pool and QUIET_HEALTH in health

        await eventually(
            quiet_watches,
            what="a quiet pool's watch and its health check's",
            retry_on=(RPCError,),  # the health check not started yet
        )
        # Booting, or a health check's first read: watched closely.
        pool = await _timeouts(env.client, pool_workflow_id(name), "watch_devices")
        health = await _timeouts(env.client, health_workflow_id(name), "watch_health")
        assert set(pool) <= {QUIET_POOL, CLOSE}, pool
        assert set(health) <= {QUIET_HEALTH, CLOSE}, health
        for workflow_id in (pool_workflow_id(name), health_workflow_id(name)):
            await _replays_with_the_patch(env.client, workflow_id)
    finally:
        await handle.terminate()
