"""The finalizer never gives up: a teardown blocked by the provider waits, shows why, then
finishes; and it waits for no batch its pool decided but never started."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.client import PoolBlocked, PoolClient
from devicepool.testing import eventually
from devicepool.workflows.pool.act import UNSTARTED_BATCHES_LEAVE_PATCH
from tests.helpers.histories import replay_every_run
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    EMULATOR_URL,
    POLL,
    OwnQueueActivities,
    pool_counts,
    pool_devices,
    start_pool,
)

pytestmark = pytest.mark.devserver


class RotatingKey(OwnQueueActivities):
    """The pool's own activities; `terminate_pool` goes through a worker with a stale key until fixed."""

    def __init__(self, real: DeviceActivities, stale: DeviceActivities) -> None:
        super().__init__(real)
        self.stale = stale
        self.key_fixed = False
        self.sweeps = 0

    @activity.defn(name="terminate_pool")
    async def terminate_pool(self, input: am.TerminatePoolInput) -> am.TerminatePoolResult:
        self.sweeps += 1
        which = self.real if self.key_fixed else self.stale
        return await which.terminate_pool(input)


async def test_a_rotated_key_blocks_the_teardown_visibly_until_it_is_fixed(
    env: WorkflowEnvironment,
    worker: DeviceActivities,
    emulator: Any,
    control: httpx.AsyncClient,
    pool_name: str,
) -> None:
    assert "rotated" not in ACCOUNTS["default"]
    stale = DeviceActivities(
        accounts={
            "default": am.AccountSettings(
                name="default",
                base_url=EMULATOR_URL,
                api_key=SecretStr("key-rotated-away"),
                timeout_seconds=2,
            )
        },
        proxy_pools={},
        transport=TimedASGITransport(app=emulator),
    )
    rotating = RotatingKey(worker, stale)
    try:
        async with rotating.serving(env.client, f"teardown-{pool_name}") as queue:
            handle = await start_pool(env.client, pool_name, 2, proxy_ref=None, task_queue=queue)

            async def ready() -> bool:
                return (await handle.query("status"))["readyDevices"] == 2

            await eventually(ready, what="2 ready devices", every=POLL)
            # `delete --wait` stops at once with the condition, instead of
            # showing "2 devices left" until its timeout.
            pools = PoolClient(env.client)
            started = time.monotonic()
            with pytest.raises(PoolBlocked) as stopped:
                await pools.delete(pool_name, wait=True, timeout=60)
            assert time.monotonic() - started < 20
            assert stopped.value.reason == "Unauthenticated"
            assert str(stopped.value).startswith(
                f'pool "{pool_name}" cannot finish deleting: Unauthenticated: cannot delete devices: '
            )
            assert str(stopped.value).endswith(
                f"; it keeps retrying until the cause is fixed (devicepool describe {pool_name})"
            )

            async def blocked() -> dict[str, Any] | None:
                status = await handle.query("status")
                found = [c for c in status["conditions"] if c["type"] == "TeardownBlocked"]
                return status if found and status["phase"] == "Deleting" else None

            status = await eventually(blocked, what="TeardownBlocked while Deleting", every=POLL)
            cond = next(c for c in status["conditions"] if c["type"] == "TeardownBlocked")
            assert stopped.value.message == cond["message"]
            assert (cond["status"], cond["reason"]) == ("True", "Unauthenticated")
            assert "key-rotated-away" not in str(status)  # never a secret in status
            await asyncio.sleep(6)  # it tries again, and stays blocked meanwhile
            assert rotating.sweeps >= 2
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
            assert len(await pool_devices(control, pool_name)) == 2

            # Asked again once the worker restarted with the right key: the block
            # it finds is from before the fix, so it waits for the next sweep.
            again = asyncio.ensure_future(pools.delete(pool_name, wait=True, timeout=60))
            await asyncio.sleep(1.5)
            rotating.key_fixed = True
            result = await again
            assert result.closed and result.devices_left == 0
            # CANCELED, or COMPLETED by a run continued-as-new while deleting (the
            # test server's low continue-as-new threshold makes that happen here).
            assert (await handle.describe()).status in (
                WorkflowExecutionStatus.CANCELED,
                WorkflowExecutionStatus.COMPLETED,
            )
    finally:
        await stale.aclose()
    assert await pool_devices(control, pool_name) == []


async def test_a_teardown_held_up_by_retryable_errors_shows_blocked_then_finishes(
    env: WorkflowEnvironment,
    worker: DeviceActivities,
    control: httpx.AsyncClient,
    pool_name: str,
) -> None:
    # Every provider call answers 500: the sweep's errors are all retryable, so
    # only the `teardownBlockedAfterSeconds` bound can make the block visible.
    bound = FAST.teardown_blocked_after_seconds
    handle = await start_pool(env.client, pool_name, 2)

    async def ready() -> bool:
        return (await handle.query("status"))["readyDevices"] == 2

    await eventually(ready, what="2 ready devices", every=POLL)
    pools = PoolClient(env.client)
    try:
        (await control.post("/_emulator/faults", json={"serverErrorRate": 1.0})).raise_for_status()
        started = time.monotonic()
        with pytest.raises(PoolBlocked) as stopped:
            await pools.delete(pool_name, wait=True, timeout=bound + 15)
        assert time.monotonic() - started < bound + 10
        assert stopped.value.reason == "ServerError"
        status = await handle.query("status")
        conditions = {c["type"]: c for c in status["conditions"]}
        blocked = conditions["TeardownBlocked"]
        assert (blocked["status"], blocked["reason"]) == ("True", "ServerError")
        assert "internal error (injected fault)" in blocked["message"]
        assert stopped.value.message == blocked["message"]
        assert status["phase"] == "Deleting"
        # A pool that cannot finish deleting does not say it is ready.
        assert conditions["Ready"]["status"] != "True"
        assert conditions["Ready"]["reason"] == "TeardownBlocked"
        events = (await handle.query("events"))["events"]
        assert [e["type"] for e in events if e["reason"] == "TeardownBlocked"] == ["Warning"]
        # It never gives up: still deleting a while later.
        await asyncio.sleep(bound + 1)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    finally:
        (await control.post("/_emulator/faults", json={})).raise_for_status()

    async def ended() -> bool:
        return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING

    # The fault is gone: the next sweep (at most a retry pause away) finishes it.
    await eventually(ended, what="the pool ends once the provider answers", timeout=90, every=POLL)
    # CANCELED, or COMPLETED by a run continued-as-new while deleting.
    assert (await handle.describe()).status in (
        WorkflowExecutionStatus.CANCELED,
        WorkflowExecutionStatus.COMPLETED,
    )
    assert await pool_devices(control, pool_name) == []
    assert await pool_counts(control, pool_name) == {"created": 2, "terminated": 2}


class SlowTerminate(OwnQueueActivities):
    """The pool's own activities; `terminate_device` waits until the test lets it go."""

    def __init__(self, real: DeviceActivities) -> None:
        super().__init__(real)
        self.asked = asyncio.Event()
        self.go = asyncio.Event()

    @activity.defn(name="terminate_device")
    async def terminate_device(self, input: am.TerminateDeviceInput) -> am.TerminateDeviceResult:
        self.asked.set()
        await self.go.wait()
        return await self.real.terminate_device(input)


async def test_a_delete_during_a_replacement_s_terminate_waits_for_no_unstarted_batch(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # A device replaced now: the pass terminates it, then starts its replacement's batch
    # (already in the slot book). Deleted while the terminate runs, the batch is never
    # started: teardown has nothing to wait for (it waited startupTimeout + grace, 75 s
    # here, while the pool's devices billed).
    slow = SlowTerminate(worker)
    pools = PoolClient(env.client)
    async with slow.serving(env.client, f"teardown-{pool_name}") as queue:
        handle = await start_pool(env.client, pool_name, 2, proxy_ref=None, task_queue=queue)

        async def ready() -> list[str] | None:
            status = await handle.query("status")
            devices = await pool_devices(control, pool_name)
            return [d["id"] for d in devices] if status["readyDevices"] == 2 else None

        device = (await eventually(ready, what="2 ready devices", every=POLL))[0]
        await pools.replace_device(pool_name, device)
        await asyncio.wait_for(slow.asked.wait(), timeout=30)
        await handle.cancel()
        slow.go.set()
        deleted = time.monotonic()

        async def ended() -> bool:
            return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING

        await eventually(ended, what="the pool deleted", timeout=30, every=POLL)
        assert time.monotonic() - deleted < FAST.startup_timeout_seconds
    assert await pool_devices(control, pool_name) == []
    # Its replacement was never created: no batch started after the delete.
    assert (await pool_counts(control, pool_name))["created"] == 2
    # The new path is gated (runs of v0.2.0 waited): every run replays, one has the marker.
    await replay_every_run(env.client, handle.id, marked_by=UNSTARTED_BATCHES_LEAVE_PATCH)
