"""Building Temporal `Worker`s: the one place a `Worker(...)` is constructed.

`new_worker` is the constructor the worker process, the tests and the benches
share; `build_workers` is the process's set of workers on top of it:

- ``devicepool``: the DevicePool workflows (``workflows.WORKFLOWS``) and every
  activity except ``create_device``.
- ``devicepool-account-<name>`` (one per configured account): only
  ``create_device``, so only workers that know the account run its creates.
  Creates never run eagerly: eager dispatch only targets the workflow's own
  task queue, and it is disabled there too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Interceptor, Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE, account_task_queue
from devicepool.worker.config import WorkerConfig


def new_worker(
    client: Client,
    *,
    task_queue: str,
    activities: Sequence[Callable[..., Any]],
    workflows: Sequence[type] = (),
    **options: Any,
) -> Worker:
    """A `Worker` polling `task_queue`; `options` are `Worker`'s own keyword arguments."""
    return Worker(
        client, task_queue=task_queue, workflows=workflows, activities=activities, **options
    )


def _workflows() -> list[type]:
    from devicepool.workflows import WORKFLOWS  # type: ignore[attr-defined,unused-ignore]

    return list(WORKFLOWS)


def build_workers(
    config: WorkerConfig,
    client: Client,
    activities: DeviceActivities,
    *,
    interceptors: list[Interceptor] | None = None,
) -> list[Worker]:
    """The pool queue's worker, then one worker per configured account's queue."""
    graceful = timedelta(seconds=config.graceful_shutdown_seconds)
    main = new_worker(
        client,
        task_queue=TASK_QUEUE,
        interceptors=interceptors or [],
        workflows=_workflows(),
        activities=activities.pool_queue_activities(),
        graceful_shutdown_timeout=graceful,
        disable_eager_activity_execution=True,
    )
    workers = [main]
    for account in config.accounts.values():
        workers.append(
            new_worker(
                client,
                task_queue=account_task_queue(account.name),
                activities=activities.account_queue_activities(),
                graceful_shutdown_timeout=graceful,
                disable_eager_activity_execution=True,
            )
        )
    return workers
