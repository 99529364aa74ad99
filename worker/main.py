"""The devicepool worker process: `run_worker` and `main_async`.

Starts the process's Temporal workers (``worker/build.py``), signal-with-starts every served
account's ledger and orphan sweep (``worker/accounts.py``), serves ``/metrics``, ``/healthz``
and ``/readyz`` (``worker/http.py``), and on SIGTERM/SIGINT stops polling and gives in-flight
activities ``graceful_shutdown_seconds``. Why: docs/scaling.md, 'Rate limits';
docs/operations.md, 'What happens when a worker dies'."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.runtime import MetricBuffer
from temporalio.worker import Interceptor, Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.orphan_models import JanitorConfig
from devicepool.connect import connect
from devicepool.worker.accounts import register_accounts, start_janitors
from devicepool.worker.build import build_workers, run_workers, stop_workers
from devicepool.worker.config import WorkerConfig
from devicepool.worker.http import HttpEndpoint, start_http_server
from devicepool.worker.metrics import (
    LeaseWaitInterceptor,
    ReconcileInterceptor,
    WorkerGauges,
    WorkerMetrics,
)
from devicepool.worker.registered import check_search_attributes
from devicepool.worker.sdk_metrics import sdk_runtime
from devicepool.worker.versioning import current_build, promote

__all__ = ["install_signal_handlers", "main_async", "run_worker", "sdk_runtime"]

log = logging.getLogger("devicepool.worker")

ENV_METRICS_HOST = "DEVICEPOOL_METRICS_HOST"


async def run_worker(
    config: WorkerConfig,
    client: Client,
    *,
    shutdown_event: asyncio.Event,
    metrics_host: str | None = None,
    sdk_metrics: MetricBuffer | None = None,
    pool_metrics_max_age: float = 5.0,
    pool_status_max_age: float = 30.0,
    promote_self: bool = False,
) -> None:
    """Run until `shutdown_event` is set (or a worker fails), then shut down gracefully.

    `sdk_metrics`: the client runtime's `MetricBuffer` (`sdk_runtime()`), served on the same
    endpoint; the pool gauges are re-read at most every `pool_metrics_max_age` seconds, the
    pools' `status` at most every `pool_status_max_age`.
    """
    # Before anything polls: a pool upserting an attribute the namespace lacks is stuck.
    await check_search_attributes(client)
    telemetry = WorkerMetrics.create(
        client,
        sdk_metrics=sdk_metrics,
        pool_max_age=pool_metrics_max_age,
        pool_status_max_age=pool_status_max_age,
    )
    background = telemetry.start_background()
    # Creates report a 429 that still arrives to the account's ledger.
    activities = DeviceActivities(
        accounts=config.accounts,
        proxy_pools=config.proxy_pools,
        settings=config.settings,
        metrics=telemetry.metrics,
        scrubber=config.scrubber(),
    )
    telemetry.metrics.orphan_accounts(config.accounts)
    interceptors: list[Interceptor] = [
        ReconcileInterceptor(telemetry.metrics),
        LeaseWaitInterceptor(telemetry.metrics),
    ]
    workers = build_workers(config, client, activities, interceptors=interceptors)
    running = _Running(client, workers, telemetry.gauges)
    server = await _serve_metrics(config, telemetry, running, metrics_host)

    # Every account this worker serves has its permit ledger running (idempotent).
    await register_accounts(client, config.accounts)
    # ...and its orphan sweep (workflows/orphans/workflow.py), with this worker's grace.
    await start_janitors(
        client, config.accounts, JanitorConfig(grace_seconds=config.orphan_grace_seconds)
    )
    running.start(config)
    stop = asyncio.create_task(shutdown_event.wait())
    failure: BaseException | None = None
    try:
        if config.deployment_name and (
            promote_self or await current_build(client, config.deployment_name) is None
        ):
            # New workflows wait until their deployment has a current version: the
            # first build of a deployment makes itself current; later ones are promoted.
            await promote(client, config.deployment_name, config.build_id)
            log.info(
                "promoted to the current version",
                extra={"deployment": config.deployment_name, "build_id": config.build_id},
            )
        failure = await running.first_failure(stop)
    finally:
        running.mark_stopped()
        for bg in background:
            bg.cancel()
        log.info("shutting down", extra={"graceful_seconds": config.graceful_shutdown_seconds})
        await running.shutdown()
        stop.cancel()
        if server is not None:
            server.close()
            await server.wait_closed()
        await activities.aclose()
        log.info("worker stopped")
    if failure is not None:
        raise failure


class _Running:
    """This process's workers while they run: what `/readyz` and the polling gauge report."""

    def __init__(self, client: Client, workers: list[Worker], gauges: WorkerGauges) -> None:
        self._client = client
        self._workers = workers
        self._gauges = gauges
        self._tasks: list[asyncio.Task[None]] = []
        self._polling = False

    def start(self, config: WorkerConfig) -> None:
        self._tasks = run_workers(self._workers)
        self._polling = True
        self._gauges.polling.set(1)
        log.info(
            "worker started",
            extra={
                "namespace": self._client.namespace,
                "task_queues": ",".join(w.task_queue for w in self._workers),
                **config.describe(),
            },
        )

    async def ready(self) -> bool:
        # Polling: started and none stopped (a failed worker ends its run()).
        if not self._polling or not all(w.is_running for w in self._workers):
            return False
        try:
            return await self._client.service_client.check_health(timeout=timedelta(seconds=2))
        except Exception:
            return False

    async def first_failure(self, stop: asyncio.Task[Any]) -> BaseException | None:
        """Wait for `stop` or for a worker to end; a worker that ends is a failure."""
        failure: BaseException | None = None
        done, _ = await asyncio.wait([stop, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stop and task.exception() is not None:
                failure = task.exception()
                log.error(
                    "worker failed", extra={"task_queue": task.get_name(), "error": str(failure)}
                )
            elif task is not stop:
                failure = RuntimeError(f"{task.get_name()} stopped unexpectedly")
        return failure

    def mark_stopped(self) -> None:
        self._polling = False
        self._gauges.polling.set(0)

    async def shutdown(self) -> None:
        await stop_workers(self._workers, self._tasks)


async def _serve_metrics(
    config: WorkerConfig,
    telemetry: WorkerMetrics,
    running: _Running,
    metrics_host: str | None,
) -> HttpEndpoint | None:
    """Start `/metrics` and the probes on ``metricsPort`` (none when it is 0)."""
    host = metrics_host or os.environ.get(ENV_METRICS_HOST, "0.0.0.0")
    if not config.metrics_port:
        return None
    server, port = await start_http_server(
        host=host,
        port=config.metrics_port,
        ready=running.ready,
        registry=telemetry.registry,
        before_scrape=telemetry.pools.refresh,
    )
    log.info("metrics endpoint listening", extra={"address": f"{host}:{port}"})
    return server


def install_signal_handlers(event: asyncio.Event) -> None:
    """SIGTERM/SIGINT set `event`; on Windows (no loop signal handlers) through `signal.signal`."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, _on_signal, event, sig)
        except NotImplementedError:
            signal.signal(sig, lambda s, _: loop.call_soon_threadsafe(_on_signal, event, s))


def _on_signal(event: asyncio.Event, sig: Any) -> None:
    if event.is_set():
        return
    log.info("signal received, stopping", extra={"signal": signal.Signals(sig).name})
    event.set()


async def main_async(config: WorkerConfig, *, promote_self: bool = False) -> None:
    """`devicepool worker`: connect (the SDK's env config), serve until SIGTERM/SIGINT.

    `promote_self`: once polling, make this build the deployment's current version."""
    shutdown_event = asyncio.Event()
    install_signal_handlers(shutdown_event)
    runtime, buffer = sdk_runtime()
    client = await connect(
        identity=f"devicepool-worker@{os.uname().nodename}:{os.getpid()}",
        runtime=runtime,
        codec=config.codec(),
    )
    await run_worker(
        config,
        client,
        shutdown_event=shutdown_event,
        sdk_metrics=buffer,
        promote_self=promote_self,
    )
