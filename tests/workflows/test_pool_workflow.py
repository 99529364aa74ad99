"""The DevicePool workflow against the dev server and the emulator (ground truth: its stats)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from activities.devices import DeviceActivities
from api.names import SIGNAL_SCALE, UPDATE_APPLY, UPDATE_SCALE
from api.v1alpha1 import DevicePoolSpec, ObjectMeta
from workflows.messages import Accepted, ApplyRequest, ScaleRequest
from wf_support import eventually, pool_devices, start_pool, stats

pytestmark = pytest.mark.devserver


async def status_of(handle: Any) -> dict[str, Any]:
    return await handle.query("status")


def ready_count(name: str, wanted: int, control: httpx.AsyncClient):
    async def check() -> bool:
        devices = await pool_devices(control, name)
        return len(devices) == wanted and all(d["status"] == "ready" for d in devices)

    return check


async def delete_and_wait(handle: Any) -> None:
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    desc = await handle.describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED


async def test_converge_scale_up_down_and_delete(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 3)
    await eventually(ready_count(pool_name, 3, control), what="3 ready devices")
    status = await eventually(
        lambda: _status_when(handle, lambda s: s["readyDevices"] == 3 and s["phase"] == "Ready"),
        what="status Ready 3",
    )
    assert status["desiredReplicas"] == 3
    assert len(status["deviceIds"]) == 3
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])

    accepted = await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=6), result_type=Accepted)
    assert accepted.replicas == 6 and accepted.generation == 2
    await eventually(ready_count(pool_name, 6, control), what="6 ready devices")

    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2), result_type=Accepted)
    await eventually(ready_count(pool_name, 2, control), what="scale down to 2")

    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=0), result_type=Accepted)
    await eventually(ready_count(pool_name, 0, control), what="scale down to 0")

    await delete_and_wait(handle)
    after = await stats(control)
    assert after["devices"]["byPool"].get(pool_name, 0) == 0


async def _status_when(handle: Any, predicate: Any) -> dict[str, Any] | None:
    status = await status_of(handle)
    return status if predicate(status) else None
