"""The health check's life: it carries its state across continue-as-new, and ends with its pool.

Against the session's dev server (low continue-as-new threshold, see
conftest.py), emulator and workers. Some tests drive `PoolHealth` directly
under a stand-in parent (`FakePool`), which records the reports a pool would
get; the others run real pools.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import (
    SIGNAL_HEALTH_REPORT,
    TASK_QUEUE,
    WORKFLOW_POOL_HEALTH,
    health_workflow_id,
    pool_workflow_id,
)
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import create_device, eventually, stats
from devicepool.workflows.shared.protocol import HealthConfig, HealthInput, HealthReport
from tests.helpers.histories import history_digest
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    Workers,
    pool_counts,
    pool_devices,
    stand_in_worker,
    start_pool,
)

pytestmark = pytest.mark.devserver

AUTH = {"Authorization": f"Bearer {ACCOUNTS['default']}"}


@workflow.defn(name="FakePoolForHealth")
class FakePool:
    """Starts a health check as the pool does (ABANDON, by id) and keeps its reports."""

    def __init__(self) -> None:
        self.reports: list[HealthReport] = []

    @workflow.run
    async def run(self, input: HealthInput) -> None:
        await workflow.start_child_workflow(
            WORKFLOW_POOL_HEALTH,
            input,
            id=health_workflow_id(input.pool),
            task_queue=TASK_QUEUE,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        )
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=SIGNAL_HEALTH_REPORT)
    def health_report(self, report: HealthReport) -> None:
        self.reports.append(report)

    @workflow.query
    def reports_seen(self) -> list[HealthReport]:
        return self.reports


async def rent(control: httpx.AsyncClient, pool: str, n: int) -> list[str]:
    """`n` devices labelled as `pool`'s, created straight at the provider; ready."""
    ids = []
    for i in range(n):
        response = await create_device(
            control,
            api_key=ACCOUNTS["default"],
            name=f"{pool}-{i}",
            labels={"pool": pool},
            idempotency_key=f"{pool}-{i}-{uuid.uuid4().hex}",
        )
        response.raise_for_status()
        ids.append(response.json()["id"])

    async def ready() -> bool:
        devices = await pool_devices(control, pool)
        return len(devices) == n and all(d["status"] == "ready" for d in devices)

    await eventually(ready, what=f"{n} devices of {pool} ready", timeout=15)
    return ids


async def release(control: httpx.AsyncClient, pool: str) -> None:
    """Delete what is left of `pool` at the provider (nobody else will)."""
    for device in await pool_devices(control, pool):
        (await control.delete(f"/api/v1/devices/{device['id']}", headers=AUTH)).raise_for_status()


async def latest_run(client: Client, workflow_id: str) -> tuple[str, str, WorkflowExecutionStatus]:
    """(run id, first run id of its chain, status) of the id's latest run."""
    described = await client.get_workflow_handle(workflow_id).describe()
    info = described.raw_description.workflow_execution_info
    assert described.status is not None
    return info.execution.run_id, info.first_run_id, described.status


async def run_input(client: Client, workflow_id: str, run_id: str) -> HealthInput:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [decoded] = await DATA_CONVERTER.decode(started.input.payloads, [HealthInput])
    assert isinstance(decoded, HealthInput)
    return decoded


async def ended(client: Client, workflow_id: str, chain: str) -> WorkflowExecutionStatus | None:
    """The status the chain of runs `chain` of `workflow_id` ended with (None: still running)."""
    _, first, status = await latest_run(client, workflow_id)
    if first != chain:
        return WorkflowExecutionStatus.TERMINATED  # replaced by another chain: it did end
    return None if status == WorkflowExecutionStatus.RUNNING else status


# ---------------------------------------------------------------- across continue-as-new


async def test_a_recovery_first_seen_by_a_new_run_is_still_reported(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient
) -> None:
    name = f"wf-{uuid.uuid4().hex[:8]}"
    devices = await rent(control, name, 2)
    queue = f"fake-pool-{name}"
    health_id = health_workflow_id(name)
    # A test stand-in: no sandbox (this module imports httpx and the fixtures).
    async with stand_in_worker(env.client, queue, FakePool):
        pool = await env.client.start_workflow(
            FakePool.run,
            HealthInput(
                pool=name,
                parent_workflow_id=pool_workflow_id(name),
                account="default",
                # A paused check's watch answers (and reports) once per
                # watchMaxSeconds: a short cap grows its history to the
                # continue-as-new suggestion within seconds.
                settings=FAST.model_copy(update={"watch_max_seconds": 1}),
                config=HealthConfig(max_unhealthy="40%", replicas=2),
            ),
            id=pool_workflow_id(name),
            task_queue=queue,
        )
        try:
            await _pause_then_recover_across_a_new_run(env.client, pool, control, name, devices)
        except BaseException:
            print(await history_digest(env.client, health_id))
            raise
        finally:
            TimedASGITransport.late_list_answers.pop(name, None)
            await pool.terminate("test over")
            await release(control, name)


async def _pause_then_recover_across_a_new_run(
    client: Client,
    pool: WorkflowHandle[Any, Any],
    control: httpx.AsyncClient,
    name: str,
    devices: list[str],
) -> None:
    health_id = health_workflow_id(name)
    # Both of 2 down: more than the one device at a time allowed, so paused.
    for device_id in devices:
        (await control.post(f"/_emulator/devices/{device_id}/offline")).raise_for_status()

    async def paused() -> bool:
        reports = await pool.query(FakePool.reports_seen)
        return bool(reports) and reports[-1].paused

    await eventually(paused, what="a paused report", timeout=15)
    paused_run, _, _ = await latest_run(client, health_id)
    # Each listing now answers late (the statuses are read after it), which
    # leaves time to end the outage between a new run's start and its first
    # status read: that run is the first to see the recovery.
    TimedASGITransport.late_list_answers[name] = 2.0

    async def new_run() -> str | None:
        run_id, _, _ = await latest_run(client, health_id)
        return run_id if run_id != paused_run else None

    fresh = await eventually(new_run, what="the health check continued as new", timeout=60)
    for device_id in devices:
        (await control.post(f"/_emulator/devices/{device_id}/online")).raise_for_status()
    told = len(await pool.query(FakePool.reports_seen))

    # What the old run handed over: it had paused and was telling the pool so.
    carried = await run_input(client, health_id, fresh)
    assert (carried.paused, carried.was_reporting) == (True, True)

    async def recovered() -> HealthReport | None:
        reports = (await pool.query(FakePool.reports_seen))[told:]
        return next((r for r in reports if not r.paused and r.unhealthy == 0), None)

    report = await eventually(recovered, what="the recovery reported", timeout=15)
    assert (report.devices, report.terminated) == (2, {})


# ---------------------------------------------------------------- ends with its pool


async def test_a_terminated_pools_health_check_ends_within_a_cycle_and_replaces_nothing(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    health_id = health_workflow_id(pool_name)

    async def converged() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, pool_name)
        return (
            devices if len(devices) == 2 and all(d["status"] == "ready" for d in devices) else None
        )

    devices = await eventually(converged, what="2 ready devices", timeout=30)

    # The pool continues-as-new (low threshold): its health check carries on
    # through the hand-over, which must not look like a pool that is gone.
    async def pool_continued() -> bool:
        run_id, first, _ = await latest_run(env.client, handle.id)
        return run_id != first

    await eventually(pool_continued, what="the pool continued as new", timeout=30)
    # A few health cycles past the hand-over: a check that took it for a gone pool has ended.
    await asyncio.sleep(3 * FAST.health_seconds)
    _, chain, status = await latest_run(env.client, health_id)
    assert status == WorkflowExecutionStatus.RUNNING

    try:
        # This pool's own count: another test's teardown moves the session-wide one.
        before = await pool_counts(control, pool_name)
        await handle.terminate("test: a hurried operator")
        terminated_at = asyncio.get_running_loop().time()
        victim = devices[0]["id"]
        (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

        end = await eventually(
            lambda: ended(env.client, health_id, chain), what="the health check ended", timeout=10
        )
        took = asyncio.get_running_loop().time() - terminated_at
        assert end == WorkflowExecutionStatus.COMPLETED
        # One cycle (plus the time to ask and to end), not a continue-as-new or two later.
        assert took <= FAST.health_seconds + 3, took
        # Well past the offline threshold: the offline device of the gone pool
        # was not terminated (nobody would replace it; the orphan sweep's job).
        await asyncio.sleep(FAST.offline_after_seconds + 2 * FAST.health_seconds)
        after = await pool_counts(control, pool_name)
        assert after["terminated"] == before["terminated"]
        assert victim in {d["id"] for d in await pool_devices(control, pool_name)}
    except BaseException:
        print(await history_digest(env.client, health_id))
        raise
    finally:
        await release(control, pool_name)


async def test_a_pool_applied_again_does_not_keep_the_old_pools_health_check(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 1)
    health_id = health_workflow_id(pool_name)

    async def health_running() -> str | None:
        try:
            _, chain, status = await latest_run(env.client, health_id)
        except Exception:
            return None
        return chain if status == WorkflowExecutionStatus.RUNNING else None

    old_chain = await eventually(health_running, what="the health check running", timeout=15)
    await asyncio.sleep(2 * FAST.health_seconds)  # it has checked (and learned its pool)
    await handle.terminate("test: deleted the hard way")
    again = await start_pool(env.client, pool_name, 1)
    try:
        # The same name runs again, but it is another pool: the old pool's
        # check (its settings, its account) does not carry on under it.
        await eventually(
            lambda: ended(env.client, health_id, old_chain),
            what="the old pool's health check ended",
            timeout=10,
        )
        # ...and the new pool has a check of its own (it replaced the stale one
        # at its first start instead of adopting it and then having none).
        new_chain = await eventually(health_running, what="the new pool's check", timeout=10)
        assert new_chain != old_chain
    except BaseException:
        print(await history_digest(env.client, health_id))
        raise
    finally:
        await again.cancel()
        await eventually(
            lambda: _gone(control, pool_name), what=f"{pool_name} torn down", timeout=30
        )


async def _gone(control: httpx.AsyncClient, name: str) -> bool:
    return (await stats(control))["devices"]["byPool"].get(name, 0) == 0
