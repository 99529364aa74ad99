"""A deleted pool waits for its leased devices, and `delete --force` does not.

Against the dev server and the emulator's ground truth (FAST settings): a pool of 2 with
one device leased is deleted; while the lease is held nothing is torn down and the pool
says why (`WaitingForLeases`), a new lease is refused; the release lets the teardown
finish. A second pool, deleted with `force`, ends its lease at once and is torn down.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.client import _waits
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.reconciler.lease_messages import (
    LeaseAnswer,
    LeaseRequest,
    ReleaseAnswer,
    ReleaseRequest,
    RenewRequest,
)
from tests.helpers.manifests import beta_pool
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import POLL, pool_devices

pytestmark = pytest.mark.devserver


async def start(env: WorkflowEnvironment, name: str, replicas: int) -> WorkflowHandle[Any, Any]:
    pool = beta_pool(name, replicas)
    return await env.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=pool.metadata, spec=pool.spec, settings=FAST),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


async def lease_one(handle: WorkflowHandle[Any, Any]) -> LeaseAnswer:
    """A lease as soon as the pool has a ready device it has listed."""

    async def attempt() -> LeaseAnswer | None:
        try:
            return await handle.execute_update(
                "lease", LeaseRequest(holder="script"), result_type=LeaseAnswer
            )
        except WorkflowUpdateFailedError as err:
            assert isinstance(err.cause, ApplicationError)
            assert err.cause.type == "LeaseNotGranted", err.cause
            return None

    return await eventually(attempt, timeout=60, every=POLL, what="a lease")


async def reasons(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [e["reason"] for e in (await handle.query("events"))["events"]]


async def closed(handle: WorkflowHandle[Any, Any]) -> bool:
    status = (await handle.describe()).status
    return status != WorkflowExecutionStatus.RUNNING


async def test_a_deleted_pool_waits_for_its_leases_and_force_ends_them(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start(env, pool_name, 2)
    answer = await lease_one(handle)
    assert answer.granted is not None and answer.granted.holder == "script"
    leased = answer.granted.device

    await handle.cancel()

    async def waiting() -> bool:
        return "WaitingForLeases" in await reasons(handle)

    await eventually(waiting, every=POLL, what="the wait said")
    # Held: nothing is torn down, nothing new is leased; the holder still renews.
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("lease", LeaseRequest(), result_type=LeaseAnswer)
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.type == "LeaseRefused"
    renewed = await handle.execute_update(
        "renew", RenewRequest(lease=answer.granted.lease), result_type=LeaseAnswer
    )
    assert renewed.granted is not None
    status = await handle.query("status")
    assert status["phase"] == "Deleting" and status["leasedDevices"] == 1
    assert {d["id"] for d in await pool_devices(control, pool_name)} >= {leased}

    released = await handle.execute_update(
        "release", ReleaseRequest(lease=answer.granted.lease), result_type=ReleaseAnswer
    )
    assert released.reason == "Released"
    await eventually(lambda: closed(handle), timeout=60, every=POLL, what="torn down")
    assert await pool_devices(control, pool_name) == []

    # `delete --force`: the lease ends at once, and the teardown goes on.
    forced = f"{pool_name}-f"
    handle = await start(env, forced, 1)
    answer = await lease_one(handle)
    await handle.cancel()
    await _waits.leases_ended(handle)
    await eventually(lambda: closed(handle), timeout=60, every=POLL, what="forced")
    assert await pool_devices(control, forced) == []
