"""The devicepool worker process: Temporal workers, rate limits, probes, graceful shutdown.

Task queues:

- ``devicepool``: the DevicePool workflows (``workflows.WORKFLOWS``) and every
  activity except ``create_device``.
- ``devicepool-account-<name>`` (one per configured account): only
  ``create_device``, so only workers that know the account run its creates.
  The account's creation window is not a queue rate limit (that spaces creates
  evenly and needs an extra minute for a 20-device scale-up): every create
  waits for a permit from the account's ledger workflow
  ``devicepool-account/<name>`` (``workflows/ledger.py``), which hands out a
  whole window at once. At startup each worker signal-with-starts the ledger
  of every account it serves (``register_accounts``), which is also how
  ``apply`` knows an account exists. Creates never run eagerly: eager dispatch
  only targets the workflow's own task queue, and it is disabled there too.

Metrics: one `CollectorRegistry` per worker, served on ``metricsPort`` at
``/metrics`` (see ``worker/metrics.py``): the activities' counters, the per-pool
gauges read from Temporal visibility, reconcile durations (a replay-safe
workflow interceptor) and the SDK's own worker metrics (a ``MetricBuffer`` on
the client's runtime). ``/readyz`` answers 200 only while every worker is
polling and the Temporal frontend answers its health check.

SIGTERM/SIGINT stop polling and give in-flight activities
``graceful_shutdown_seconds`` to finish; what does not finish is retried by
another worker, and every create carries its idempotency key, so a retry never
makes a second device.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry
from temporalio.client import Client
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig
from temporalio.worker import Interceptor, Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.metrics import Metrics
from devicepool.activities.permits import LedgerReportingActivities, register_accounts
from devicepool.api.names import TASK_QUEUE, account_task_queue
from devicepool.connect import connect
from devicepool.worker.config import WorkerConfig
from devicepool.worker.http import start_http_server
from devicepool.worker.metrics import (
    PoolCollector,
    ReconcileInterceptor,
    SdkMetricsCollector,
    WorkerGauges,
    drain_periodically,
)

log = logging.getLogger("devicepool.worker")

ENV_METRICS_HOST = "DEVICEPOOL_METRICS_HOST"


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
    graceful = timedelta(seconds=config.graceful_shutdown_seconds)
    main = Worker(
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
            Worker(
                client,
                task_queue=account_task_queue(account.name),
                activities=activities.account_queue_activities(),
                graceful_shutdown_timeout=graceful,
                disable_eager_activity_execution=True,
            )
        )
    return workers


async def run_worker(
    config: WorkerConfig,
    client: Client,
    *,
    shutdown_event: asyncio.Event,
    metrics_host: str | None = None,
    sdk_metrics: MetricBuffer | None = None,
    pool_metrics_max_age: float = 5.0,
    pool_status_max_age: float = 30.0,
) -> None:
    """Run until `shutdown_event` is set (or a worker fails), then shut down gracefully.

    `sdk_metrics`: the `MetricBuffer` of the client's runtime (`sdk_runtime()`),
    to serve the SDK's worker metrics on the same endpoint. The pool gauges are
    re-read from visibility at most every `pool_metrics_max_age` seconds and the
    pools' `status` queries run at most every `pool_status_max_age` seconds.
    """
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    gauges = WorkerGauges(registry)
    pools = PoolCollector(client, max_age=pool_metrics_max_age, status_max_age=pool_status_max_age)
    registry.register(pools)
    background: list[asyncio.Task[None]] = []
    if sdk_metrics is not None:
        sdk_collector = SdkMetricsCollector(sdk_metrics)
        registry.register(sdk_collector)
        background.append(asyncio.create_task(drain_periodically(sdk_collector)))
    # Creates report a 429 that still arrives to the account's ledger.
    activities = LedgerReportingActivities(
        accounts=config.accounts,
        proxy_pools=config.proxy_pools,
        settings=config.settings,
        metrics=metrics,
    )
    workers = build_workers(
        config, client, activities, interceptors=[ReconcileInterceptor(metrics)]
    )
    running: dict[str, bool] = {"workers": False}

    async def ready() -> bool:
        # Polling: started and none stopped (a failed worker ends its run()).
        if not running["workers"] or not all(w.is_running for w in workers):
            return False
        try:
            return await client.service_client.check_health(timeout=timedelta(seconds=2))
        except Exception:
            return False

    host = metrics_host or os.environ.get(ENV_METRICS_HOST, "0.0.0.0")
    server = None
    if config.metrics_port:
        server, port = await start_http_server(
            host=host,
            port=config.metrics_port,
            ready=ready,
            registry=registry,
            before_scrape=pools.refresh,
        )
        log.info("metrics endpoint listening", extra={"address": f"{host}:{port}"})

    # Every account this worker serves has its permit ledger running (idempotent).
    await register_accounts(client, config.accounts)
    tasks = [asyncio.create_task(w.run(), name=f"worker:{w.task_queue}") for w in workers]
    running["workers"] = True
    gauges.polling.set(1)
    log.info(
        "worker started",
        extra={
            "namespace": client.namespace,
            "task_queues": ",".join(w.task_queue for w in workers),
            **config.describe(),
        },
    )
    stop = asyncio.create_task(shutdown_event.wait())
    failure: BaseException | None = None
    try:
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stop and task.exception() is not None:
                failure = task.exception()
                log.error(
                    "worker failed", extra={"task_queue": task.get_name(), "error": str(failure)}
                )
            elif task is not stop:
                failure = RuntimeError(f"{task.get_name()} stopped unexpectedly")
    finally:
        running["workers"] = False
        gauges.polling.set(0)
        for bg in background:
            bg.cancel()
        log.info(
            "shutting down",
            extra={"graceful_seconds": config.graceful_shutdown_seconds},
        )
        await asyncio.gather(*(_shutdown(w) for w in workers))
        await asyncio.gather(*tasks, return_exceptions=True)
        stop.cancel()
        if server is not None:
            server.close()
            await server.wait_closed()
        await activities.aclose()
        log.info("worker stopped")
    if failure is not None:
        raise failure


async def _shutdown(worker: Worker) -> None:
    # A worker whose run() already failed raises on shutdown(); that was logged.
    with contextlib.suppress(Exception):
        await worker.shutdown()


def install_signal_handlers(event: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, event, sig)


def _on_signal(event: asyncio.Event, sig: Any) -> None:
    if event.is_set():
        return
    log.info("signal received, stopping", extra={"signal": signal.Signals(sig).name})
    event.set()


async def main_async(config: WorkerConfig) -> None:
    """`devicepool worker`: connect (the SDK's env config), serve until SIGTERM/SIGINT."""
    shutdown_event = asyncio.Event()
    install_signal_handlers(shutdown_event)
    runtime, buffer = sdk_runtime()
    client = await connect(
        identity=f"devicepool-worker@{os.uname().nodename}:{os.getpid()}", runtime=runtime
    )
    await run_worker(config, client, shutdown_event=shutdown_event, sdk_metrics=buffer)


def sdk_runtime() -> tuple[Runtime, MetricBuffer]:
    """A Temporal runtime whose Core metrics land in a buffer that `/metrics` drains."""
    buffer = MetricBuffer(100_000, MetricBufferDurationFormat.SECONDS)
    return Runtime(telemetry=TelemetryConfig(metrics=buffer)), buffer
