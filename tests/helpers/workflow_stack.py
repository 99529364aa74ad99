"""The session stack of tests/workflows, and how its tests start and read pools.

Its constants (the emulator's URL, the accounts and their keys, the proxy
password, the continue-as-new threshold, the server's extra namespaces) are what
tests/workflows/conftest.py builds the stack from; `Workers` is the session's restartable workers;
`OwnQueueActivities` serves a pool on a task queue of its own; `serving` runs a namespace's
workers for a block; `start_pool`, `pool_devices`, `pool_counts` and `condition` start a
pool and read it (the emulator's ground truth, the pool's `status` query).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from devicepool import testing as ground_truth
from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import PoolSettings
from devicepool.api import parse_pool
from devicepool.api.names import (
    SIGNAL_HEALTH_REPORT,
    TASK_QUEUE,
    pool_workflow_id,
    watch_task_queue,
)
from devicepool.api.v1beta1 import ObjectMeta
from devicepool.connect import connect
from devicepool.testing import pool_manifest
from devicepool.worker.build import account_workers, new_worker, pool_queue_workers
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.shared.protocol import HealthReport
from tests.helpers.settings import FAST

EMULATOR_URL = "http://emulator.test"
ACCOUNTS = {"default": "wf-test-key", "second": "wf-test-key-2"}
# The proxy pool's password: distinctive, so a history can be searched for it.
PROXY_PASSWORD = "wf-proxy-password-3d9c"
# Low, so continue-as-new happens inside tests (override to record long histories).
CAN_THRESHOLD = int(os.environ.get("DEVICEPOOL_TEST_CAN_THRESHOLD", "60"))
# The pace of a wait for a state that lasts (boots, passes, a pool converged): each check is
# a listing or a status query (~5 ms of the test's and the server's CPU), twice a second.
POLL = 0.5
# Namespaces of their own on the session's dev server, for the modules whose workers must
# not take the session's tasks on the pool's queue (they serve other accounts, or a node
# registry of their own): a dev server start each fewer than a server of their own.
NAMESPACES = ("cloud-phones", "cloud-phones-nodes", "node-workers", "encrypted", "geelark-node")


async def namespace_client(env: WorkflowEnvironment, namespace: str) -> Client:
    """A client of the session's dev server (`env`) in one of its `NAMESPACES`."""
    assert namespace in NAMESPACES, namespace
    target = env.client.service_client.config.target_host
    return await connect(address=target, namespace=namespace)


def stand_in_worker(
    client: Client,
    queue: str,
    *workflows: type,
    activities: Sequence[Callable[..., Any]] = (),
    **options: Any,
) -> Worker:
    """A worker on `queue` for a test's stand-in `workflows`: no sandbox (they live in test
    modules, which import httpx and the fixtures); `options` are `Worker`'s own."""
    return new_worker(
        client,
        task_queue=queue,
        workflows=workflows,
        activities=activities,
        workflow_runner=UnsandboxedWorkflowRunner(),
        **options,
    )


async def start_pool(
    client: Client,
    name: str,
    replicas: int,
    *,
    settings: PoolSettings | None = FAST,
    account: str = "default",
    proxy_ref: str | None = "proxyseller-us",
    region: str = "us-west",
    task_queue: str = TASK_QUEUE,
    spec_fields: dict[str, Any] | None = None,
) -> WorkflowHandle[Any, Any]:
    """Pool `name` started as a `DevicePool` workflow; `settings=None`: none in its input, so
    it reads the worker's, as a pool `apply` starts does."""
    fields: dict[str, Any] = {
        "region": region,
        "replicas": replicas,
        "providerCredentialRef": account,
        "proxy": None,
        **(spec_fields or {}),
    }
    if proxy_ref:
        fields["proxy"] = {"poolRef": proxy_ref, "stickyTTL": 900}
    return await client.start_workflow(
        "DevicePool",
        PoolInput(
            metadata=ObjectMeta(name=name),
            # the article's v1alpha1 fields, converted to the stored v1beta1
            spec=parse_pool(pool_manifest(name, **fields)).spec,
            settings=settings,
        ),
        id=pool_workflow_id(name),
        task_queue=task_queue,
    )


async def report_terminated(
    handle: WorkflowHandle[Any, Any],
    terminated: dict[str, str],
    *,
    devices: int,
    max_unhealthy: int,
) -> None:
    """The pool's health check reports, as it signals it, that of the pool's `devices` it
    terminated `terminated` (device id: why), unpaused."""
    report = HealthReport(
        checked_at=datetime.now(UTC),
        devices=devices,
        unhealthy=len(terminated),
        max_unhealthy=max_unhealthy,
        paused=False,
        terminated=terminated,
    )
    await handle.signal(SIGNAL_HEALTH_REPORT, report)


async def pool_devices(
    control: httpx.AsyncClient, name: str, *, account: str = "default"
) -> list[dict[str, Any]]:
    """Ground truth for one pool: its non-terminated devices, straight from the emulator."""
    devices = await ground_truth.labelled_devices(control, name, api_key=ACCOUNTS[account])
    return [d for d in devices if d["status"] != "terminated"]


async def pool_counts(
    control: httpx.AsyncClient, name: str, *, account: str = "default"
) -> dict[str, int]:
    """One pool's own `created` and `terminated` counts (devicepool.testing.pool_counts)."""
    return await ground_truth.pool_counts(control, name, api_key=ACCOUNTS[account])


async def condition(handle: Any, type_: str) -> dict[str, Any] | None:
    """The pool's condition of this type, from its `status` query (None if absent)."""
    status = await handle.query("status")
    return next((c for c in status["conditions"] if c["type"] == type_), None)


class Workers:
    """The session's workers, restartable: a restart drops every cached
    workflow (the next task replays from history) and cancels running
    activities, as a killed worker process would."""

    def __init__(self, client: Client, activities: DeviceActivities) -> None:
        self.client = client
        self.activities = activities
        self._running: list[tuple[Worker, asyncio.Task[None]]] = []

    def start(self) -> None:
        workers = [
            *pool_queue_workers(
                self.client,
                self.activities,
                # After a restart, tasks of workflows cached by the old worker
                # wait this long on its sticky queue before anyone else may
                # take them; shortened so the restart test stays quick.
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
            ),
            *account_workers(self.client, self.activities, list(ACCOUNTS)),
        ]
        self._running = [(w, asyncio.ensure_future(w.run())) for w in workers]

    async def stop(self) -> None:
        for worker, _ in self._running:
            await worker.shutdown()
        await asyncio.gather(*(task for _, task in self._running), return_exceptions=True)
        self._running = []

    async def restart(self) -> None:
        await self.stop()
        self.start()


class OwnQueueActivities:
    """The pool's own activities, for a pool a test runs on a task queue of its own.

    A pool's activities go to its workflow's task queue (and its watch to that
    queue's `-watch`), while its children and creates go to the session's
    workers: a test scripts only what it overrides (with `@activity.defn` of
    the same name) and the rest is the session's real `DeviceActivities`.
    """

    def __init__(self, real: DeviceActivities) -> None:
        self.real = real

    @activity.defn(name="check_pool_refs")
    async def check_pool_refs(self, input: am.CheckRefsInput) -> am.CheckRefsResult:
        return await self.real.check_pool_refs(input)

    @activity.defn(name="list_devices")
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult:
        return await self.real.list_devices(input)

    @activity.defn(name="watch_devices")
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        return await self.real.watch_devices(input)

    @activity.defn(name="terminate_device")
    async def terminate_device(self, input: am.TerminateDeviceInput) -> am.TerminateDeviceResult:
        return await self.real.terminate_device(input)

    @activity.defn(name="running_workflows")
    async def running_workflows(self, input: am.RunningWorkflowsInput) -> am.RunningWorkflowsResult:
        return await self.real.running_workflows(input)

    @activity.defn(name="terminate_pool")
    async def terminate_pool(self, input: am.TerminatePoolInput) -> am.TerminatePoolResult:
        return await self.real.terminate_pool(input)

    @contextlib.asynccontextmanager
    async def serving(self, client: Client, queue: str) -> AsyncIterator[str]:
        """Workers for `queue` (the pool workflows and these activities) and its watch queue;
        the block is given `queue`."""
        short = [
            self.check_pool_refs,
            self.list_devices,
            self.terminate_device,
            self.running_workflows,
            self.terminate_pool,
        ]
        async with (
            new_worker(client, task_queue=queue, workflows=WORKFLOWS, activities=short),
            new_worker(client, task_queue=watch_task_queue(queue), activities=[self.watch_devices]),
        ):
            yield queue


@contextlib.asynccontextmanager
async def serving(
    client: Client, activities: DeviceActivities, accounts: list[str], *, cancel_pools: bool = True
) -> AsyncIterator[None]:
    """The pool queue's workers and `accounts`' workers on `client` while the block runs;
    then (with `cancel_pools`) every pool still running cancelled, the workers shut down,
    and `activities` closed."""
    workers = [
        *pool_queue_workers(client, activities),
        *account_workers(client, activities, accounts),
    ]
    running = [asyncio.ensure_future(w.run()) for w in workers]
    try:
        yield
    finally:
        if cancel_pools:
            await cancel_running_pools(client)
        for worker in workers:
            await worker.shutdown()
        await asyncio.gather(*running, return_exceptions=True)
        await activities.aclose()


async def cancel_running_pools(client: Client) -> None:
    """Cancel every pool still running (a test that failed before its own cleanup)."""
    query = "WorkflowType = 'DevicePool' AND ExecutionStatus = 'Running'"
    async for execution in client.list_workflows(query):
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).cancel()


async def open_region(control: httpx.AsyncClient, region: str, status: str = "up") -> None:
    """A region of the test's own at the provider (pools are refused one it does not list)."""
    answer = await control.post(f"/_emulator/regions/{region}", json={"status": status})
    answer.raise_for_status()
