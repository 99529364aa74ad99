"""`devicepool upgrade` serves both kinds: it wakes every running pool, BrowserPools too,
and names each pool still on an older build.

Both kinds run on the same versioned worker and hand over to a promoted build at their
next pass (the reconciler shell's `wake`); an upgrade that only woke DevicePools left
BrowserPools pinned to the old build until something else woke them, and its list of
pools behind never named them. Runs on the session's dev server: one execution of
each kind on a task queue no worker polls is enough for the list and the signal.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL
from devicepool.api.names import SIGNAL_WAKE
from devicepool.client._cli_upgrade import _pools_not_on, _wake_pools
from devicepool.testing import eventually

pytestmark = pytest.mark.devserver


@pytest.fixture
async def both(env: WorkflowEnvironment) -> AsyncIterator[tuple[str, list[WorkflowHandle]]]:
    """A DevicePool and a BrowserPool of one name, running (no worker takes their tasks)."""
    name = f"up-{uuid.uuid4().hex[:8]}"
    handles = [
        await env.client.start_workflow(
            kind.workflow_type, id=kind.workflow_id(name), task_queue=f"nobody-{name}"
        )
        for kind in (DEVICE_POOL, BROWSER_POOL)
    ]
    try:
        yield name, handles
    finally:
        for handle in handles:
            await handle.terminate("test over")


async def _listed(client: Client, name: str) -> bool:
    ids = ", ".join(f"'{kind.workflow_id(name)}'" for kind in (DEVICE_POOL, BROWSER_POOL))
    query = f"WorkflowId IN ({ids}) AND ExecutionStatus = 'Running'"
    return len([wf async for wf in client.list_workflows(query)]) == 2


async def test_upgrade_wakes_and_lists_browser_pools_too(
    env: WorkflowEnvironment, both: tuple[str, list[WorkflowHandle]]
) -> None:
    name, handles = both
    await eventually(lambda: _listed(env.client, name), what="both pools listed", timeout=15)

    await _wake_pools(env.client)
    for handle in handles:
        signals = [
            event.workflow_execution_signaled_event_attributes.signal_name
            async for event in handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        ]
        assert signals == [SIGNAL_WAKE], handle.id

    behind = await _pools_not_on(env.client, "devicepool", "build-x")
    ours = [pool for pool in behind if pool["pool"].endswith(name)]
    assert ours == [
        {"pool": f"browserpool/{name}", "build": ""},
        {"pool": name, "build": ""},
    ]
