"""What the worker's `/metrics` serves, beyond the activities' own counters.

One `CollectorRegistry` per worker (`WorkerMetrics.create`) holds the activities' collectors,
`WorkerGauges` (this process's health), `PoolCollector` (``pool_gauges.py``, per-pool gauges
from Temporal) and `SdkMetricsCollector` (``sdk_metrics.py``); `ReconcileInterceptor`
(``reconcile_timing.py``) times DevicePool passes, `LeaseWaitInterceptor` (``lease_timing.py``)
how long granted leases waited. These names are the public surface."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from prometheus_client import Gauge
from prometheus_client.registry import CollectorRegistry
from temporalio.client import Client
from temporalio.runtime import MetricBuffer

from devicepool.activities.metrics import Metrics
from devicepool.worker.lease_timing import LeaseWaitInterceptor
from devicepool.worker.pool_gauges import PoolCollector
from devicepool.worker.reconcile_timing import ReconcileInterceptor
from devicepool.worker.sdk_metrics import SdkMetricsCollector, drain_periodically

__all__ = [
    "LeaseWaitInterceptor",
    "PoolCollector",
    "ReconcileInterceptor",
    "SdkMetricsCollector",
    "WorkerGauges",
    "WorkerMetrics",
]


class WorkerGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.polling = Gauge(
            "devicepool_worker_polling",
            "1 while this process's Temporal workers are running (polling their task queues).",
            registry=registry,
        )


@dataclass
class WorkerMetrics:
    """One worker's registry and the collectors registered on it."""

    registry: CollectorRegistry
    metrics: Metrics
    gauges: WorkerGauges
    pools: PoolCollector
    sdk: SdkMetricsCollector | None

    @classmethod
    def create(
        cls,
        client: Client,
        *,
        sdk_metrics: MetricBuffer | None = None,
        pool_max_age: float = 5.0,
        pool_status_max_age: float = 30.0,
    ) -> WorkerMetrics:
        """A new registry: the activities' metrics, the worker gauges, the pool gauges read
        through `client`, and the SDK's metrics when `sdk_metrics` is the runtime's buffer."""
        registry = CollectorRegistry()
        metrics = Metrics(registry)
        gauges = WorkerGauges(registry)
        pools = PoolCollector(client, max_age=pool_max_age, status_max_age=pool_status_max_age)
        registry.register(pools)
        sdk = None
        if sdk_metrics is not None:
            sdk = SdkMetricsCollector(sdk_metrics)
            registry.register(sdk)
        return cls(registry=registry, metrics=metrics, gauges=gauges, pools=pools, sdk=sdk)

    def start_background(self) -> list[asyncio.Task[None]]:
        """The tasks that must run between scrapes (cancel them at shutdown): the pool
        gauges' refresh (so a scrape asks Temporal nothing) and the SDK metrics' drain."""
        tasks = [self.pools.start()]
        if self.sdk is not None:
            tasks.append(asyncio.create_task(drain_periodically(self.sdk)))
        return tasks
