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
from devicepool.client import _waits
from devicepool.testing import eventually
from devicepool.workflows.reconciler.lease_messages import LeaseAnswer
from tests.helpers.leases import lease, reasons, refused, release, renew, start_beta_pool
from tests.helpers.workflow_stack import POLL, pool_devices

pytestmark = pytest.mark.devserver


async def lease_one(handle: WorkflowHandle[Any, Any]) -> LeaseAnswer:
    """A lease as soon as the pool has a ready device it has listed."""

    async def attempt() -> LeaseAnswer | None:
        try:
            return await lease(handle, holder="script")
        except WorkflowUpdateFailedError as err:
            assert isinstance(err.cause, ApplicationError)
            assert err.cause.type == "LeaseNotGranted", err.cause
            return None

    return await eventually(attempt, timeout=60, every=POLL, what="a lease")


async def closed(handle: WorkflowHandle[Any, Any]) -> bool:
    status = (await handle.describe()).status
    return status != WorkflowExecutionStatus.RUNNING


async def test_a_deleted_pool_waits_for_its_leases_and_force_ends_them(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_beta_pool(env.client, pool_name, 2)
    answer = await lease_one(handle)
    assert answer.granted is not None and answer.granted.holder == "script"
    leased = answer.granted.device

    await handle.cancel()

    async def waiting() -> bool:
        return "WaitingForLeases" in await reasons(handle)

    await eventually(waiting, every=POLL, what="the wait said")
    # Held: nothing is torn down, nothing new is leased; the holder still renews.
    await refused(lease(handle), "LeaseRefused")
    renewed = await renew(handle, answer.granted.lease)
    assert renewed.granted is not None
    status = await handle.query("status")
    assert status["phase"] == "Deleting" and status["leasedDevices"] == 1
    assert {d["id"] for d in await pool_devices(control, pool_name)} >= {leased}

    released = await release(handle, answer.granted.lease)
    assert released.reason == "Released"
    await eventually(lambda: closed(handle), timeout=60, every=POLL, what="torn down")
    assert await pool_devices(control, pool_name) == []

    # `delete --force`: the lease ends at once, and the teardown goes on.
    forced = f"{pool_name}-f"
    handle = await start_beta_pool(env.client, forced, 1)
    answer = await lease_one(handle)
    await handle.cancel()
    await _waits.leases_ended(handle)
    await eventually(lambda: closed(handle), timeout=60, every=POLL, what="forced")
    assert await pool_devices(control, forced) == []
