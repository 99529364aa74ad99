"""Building Temporal `Worker`s: the one place a `Worker(...)` is constructed.

`new_worker` is the constructor the worker process, the tests and the benches share;
`build_workers` is the process's set: ``devicepool`` (`pool_queue_workers`: the workflows and
the short activities), ``devicepool-watch`` (the long watches, cut off at once at shutdown) and
``devicepool-account-<name>`` (`account_workers`: ``create_device`` of each account no node
worker serves). `workflow_runner` is the sandbox: every module of ours passed through but each
workflow's own. Why: docs/scaling.md, 'What one worker carries'."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pkgutil
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Interceptor, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import devicepool
from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE, account_task_queue, watch_task_queue
from devicepool.worker.config import WorkerCapacity, WorkerConfig
from devicepool.worker.versioning import deployment_config

# How long a stopping worker lets its watches run on: not at all. A watch is a
# read-only poll that the next worker retries (no attempt limit) by listing the
# pool again; waiting for them made every SIGTERM, and every Ctrl-C of
# `devicepool dev`, last the whole graceful timeout.
WATCH_SHUTDOWN_GRACE = timedelta(0)

# The SDK sends an activity's heartbeats to the server at most every min(0.8 × its
# heartbeat timeout, this cap). Its default cap, 60 s, would make a watch (a timeout of up
# to ten minutes) beat every minute whatever its timeout, and each beat that reaches the
# server is a billed Action: so long that each activity beats at its own timeout's pace.
# Short activities are unchanged (10 s timeouts: every 8 s). docs/scaling.md, 'Heartbeats'.
HEARTBEAT_THROTTLE_CAP = timedelta(weeks=4)


def run_workers(workers: Sequence[Worker]) -> list[asyncio.Task[None]]:
    """Each worker's `run()` as a task named ``worker:<task queue>``."""
    return [asyncio.create_task(w.run(), name=f"worker:{w.task_queue}") for w in workers]


async def stop_workers(workers: Sequence[Worker], runs: Sequence[asyncio.Task[None]]) -> None:
    """Stop polling (in-flight activities get the graceful shutdown timeout) and wait for every
    run to end. A worker whose run ended (or never started) is not asked."""

    async def stop(worker: Worker) -> None:
        with contextlib.suppress(Exception):
            await worker.shutdown()

    await asyncio.gather(
        *(stop(w) for w, run in zip(workers, runs, strict=False) if not run.done())
    )
    await asyncio.gather(*runs, return_exceptions=True)


def new_worker(
    client: Client,
    *,
    task_queue: str,
    activities: Sequence[Callable[..., Any]],
    workflows: Sequence[type] = (),
    **options: Any,
) -> Worker:
    """A `Worker` polling `task_queue`; `options` are `Worker`'s own keyword arguments.

    Workflows run in `workflow_runner()` unless `options` name another runner.
    """
    if workflows:
        options.setdefault("workflow_runner", workflow_runner())
    options.setdefault("max_heartbeat_throttle_interval", HEARTBEAT_THROTTLE_CAP)
    return Worker(
        client, task_queue=task_queue, workflows=workflows, activities=activities, **options
    )


@functools.cache
def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox that re-imports only each workflow's own module (docs/scaling.md)."""
    from devicepool import workflows

    ours = {f"devicepool.{m.name}" for m in pkgutil.iter_modules(devicepool.__path__)}
    # Every module below `workflows` but the workflow modules themselves; the
    # packages stay out too (passing one would pass all it holds).
    helpers = {
        m.name
        for m in pkgutil.walk_packages(workflows.__path__, prefix=f"{workflows.__name__}.")
        if not m.ispkg
    }
    passed = (ours - {workflows.__name__}) | (helpers - workflows.WORKFLOW_MODULES)
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*sorted(passed))
    )


def pool_queue_workers(
    client: Client,
    activities: DeviceActivities,
    *,
    task_queue: str = TASK_QUEUE,
    capacity: WorkerCapacity | None = None,
    graceful_shutdown_timeout: timedelta = timedelta(0),
    **options: Any,
) -> list[Worker]:
    """The workers of pools that run on `task_queue`: its own, then its watch queue's.

    `options` are `Worker` keyword arguments for the first (the workflows' worker).
    """
    from devicepool.workflows import WORKFLOWS  # loads every workflow module: only here

    capacity = capacity or WorkerCapacity()
    pools = new_worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        # A watch a pool scheduled here before watches had a queue of their own
        # (one per pool at the upgrade) must still find a worker: its retries
        # stay on this queue. Every later watch goes to the watch queue.
        activities=[*activities.pool_queue_activities(), activities.watch_devices],
        max_concurrent_activities=capacity.max_concurrent_activities,
        max_cached_workflows=capacity.max_cached_workflows,
        graceful_shutdown_timeout=graceful_shutdown_timeout,
        disable_eager_activity_execution=True,
        **options,
    )
    watches = new_worker(
        client,
        task_queue=watch_task_queue(task_queue),
        activities=activities.watch_queue_activities(),
        max_concurrent_activities=capacity.max_concurrent_watches,
        # Not `graceful_shutdown_timeout`: nothing a watch does is worth waiting for.
        graceful_shutdown_timeout=WATCH_SHUTDOWN_GRACE,
    )
    return [pools, watches]


def account_workers(
    client: Client,
    activities: DeviceActivities,
    accounts: Sequence[str],
    *,
    graceful_shutdown_timeout: timedelta = timedelta(0),
) -> list[Worker]:
    """One worker per account's queue, serving only that account's creates."""
    return [
        new_worker(
            client,
            task_queue=account_task_queue(account),
            activities=activities.account_queue_activities(),
            graceful_shutdown_timeout=graceful_shutdown_timeout,
            disable_eager_activity_execution=True,
        )
        for account in accounts
    ]


def build_workers(
    config: WorkerConfig,
    client: Client,
    activities: DeviceActivities,
    *,
    interceptors: list[Interceptor] | None = None,
) -> list[Worker]:
    """The pool queue's worker, its watch queue's, then one per configured account's queue."""
    graceful = timedelta(seconds=config.graceful_shutdown_seconds)
    versioned: dict[str, Any] = {}
    if config.deployment_name:
        # Only the workflow queue is versioned: activity-only queues serve every build.
        versioned["deployment_config"] = deployment_config(
            config.deployment_name, config.build_id, pinned=config.pinned
        )
    return [
        *pool_queue_workers(
            client,
            activities,
            capacity=config.capacity,
            graceful_shutdown_timeout=graceful,
            interceptors=interceptors or [],
            **versioned,
        ),
        *account_workers(
            client,
            activities,
            # An account a node worker serves has its creates on that node's queue.
            [a.name for a in config.accounts.values() if not a.node],
            graceful_shutdown_timeout=graceful,
        ),
    ]
