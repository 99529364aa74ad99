"""What the worker's `/metrics` serves, beyond the activities' own counters.

- `PoolCollector`: per-pool gauges from ONE source of truth, Temporal itself.
  Each scrape (at most every `max_age` seconds) lists the running DevicePool
  workflows through visibility and reads their search attributes (desired,
  ready, phase, platform); every `status_max_age` seconds it also asks each
  running pool its `status` query (a query costs no history) for devices by
  status and conditions. Whichever replica runs which pool, every replica
  exports the same numbers (dashboards take `max by (pool)`), and a deleted
  pool is no longer running, so its series vanish at the next scrape.
- `SdkMetricsCollector`: the Temporal SDK's own worker metrics (pollers, task
  latencies, slots, ...) drained from a `temporalio.runtime.MetricBuffer`, so
  they come out of the same endpoint as ours.
- `ReconcileInterceptor`: times DevicePool reconcile passes into
  `devicepool_reconcile_duration_seconds` without touching workflow code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

from prometheus_client import Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from temporalio import workflow
from temporalio.client import Client
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
)
from temporalio.worker import (
    ContinueAsNewInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from devicepool.activities.metrics import Metrics
from devicepool.api.names import (
    QUERY_STATUS,
    SA_DESIRED,
    SA_PHASE,
    SA_PLATFORM,
    SA_READY,
    WORKFLOW_DEVICE_POOL,
    pool_name_from_workflow_id,
    pool_workflow_id,
)

__all__ = [
    "PoolCollector",
    "ReconcileInterceptor",
    "SdkMetricsCollector",
    "WorkerGauges",
]

log = logging.getLogger("devicepool.metrics")

RUNNING_POOLS_QUERY = f'WorkflowType="{WORKFLOW_DEVICE_POOL}" AND ExecutionStatus="Running"'
DEVICE_STATUS_FIELDS = {
    "ready": "readyDevices",
    "busy": "busyDevices",
    "provisioning": "provisioningDevices",
    "offline": "offlineDevices",
}


# ---------------------------------------------------------------- per-pool gauges


@dataclass
class _Pool:
    name: str
    platform: str
    desired: int | None
    ready: int | None
    phase: str
    status: dict[str, Any] | None = None


@dataclass
class _Snapshot:
    pools: list[_Pool] = field(default_factory=list)
    ok: bool = False


class PoolCollector(Collector):
    """Per-pool gauges from visibility (and the `status` query), refreshed on scrape."""

    def __init__(
        self,
        client: Client,
        *,
        max_age: float = 5.0,
        status_max_age: float = 30.0,
        timeout: float = 5.0,
        max_concurrent_queries: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._max_age = max_age
        self._status_max_age = status_max_age
        self._timeout = timeout
        self._queries = asyncio.Semaphore(max_concurrent_queries)
        self._clock = clock
        self._snapshot = _Snapshot()
        self._listed_at: float | None = None
        self._statuses: dict[str, dict[str, Any]] = {}
        self._statuses_at: float | None = None
        self._lock = asyncio.Lock()

    async def refresh(self, *, force: bool = False) -> None:
        """Bring the snapshot up to date unless it is younger than `max_age`."""
        async with self._lock:
            now = self._clock()
            if not force and self._listed_at is not None and now - self._listed_at < self._max_age:
                return
            try:
                pools = await asyncio.wait_for(self._list(), self._timeout)
            except Exception as exc:
                # Keep serving the last good numbers; `devicepool_visibility_up` says they are old.
                log.warning("visibility refresh failed: %s", exc)
                self._snapshot = _Snapshot(pools=self._snapshot.pools, ok=False)
                self._listed_at = now
                return
            if (
                force
                or self._statuses_at is None
                or now - self._statuses_at >= self._status_max_age
            ):
                self._statuses = await self._query_statuses([p.name for p in pools])
                self._statuses_at = now
            for pool in pools:
                pool.status = self._statuses.get(pool.name)
            self._snapshot = _Snapshot(pools=pools, ok=True)
            self._listed_at = now

    async def _list(self) -> list[_Pool]:
        pools: list[_Pool] = []
        async for execution in self._client.list_workflows(RUNNING_POOLS_QUERY):
            name = pool_name_from_workflow_id(execution.id)
            if name is None:
                continue
            attrs = execution.search_attributes
            pools.append(
                _Pool(
                    name=name,
                    platform=str(_first(attrs.get(SA_PLATFORM)) or ""),
                    desired=_int(_first(attrs.get(SA_DESIRED))),
                    ready=_int(_first(attrs.get(SA_READY))),
                    phase=str(_first(attrs.get(SA_PHASE)) or ""),
                )
            )
        return pools

    async def _query_statuses(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        async def one(name: str) -> tuple[str, dict[str, Any] | None]:
            async with self._queries:
                try:
                    handle = self._client.get_workflow_handle(pool_workflow_id(name))
                    result = await handle.query(
                        QUERY_STATUS, rpc_timeout=timedelta(seconds=self._timeout)
                    )
                except Exception as exc:
                    log.info("status query of pool %s failed: %s", name, exc)
                    return name, self._statuses.get(name)  # the previous answer, if any
            return name, dict(result) if isinstance(result, dict) else None

        answers = await asyncio.gather(*(one(n) for n in names))
        return {name: status for name, status in answers if status is not None}

    def collect(self) -> Iterable[Metric]:
        snap = self._snapshot
        up = GaugeMetricFamily(
            "devicepool_visibility_up",
            "1 if the last read of the pools from Temporal visibility succeeded.",
        )
        up.add_metric([], 1.0 if snap.ok else 0.0)
        yield up
        count = GaugeMetricFamily("devicepool_pools", "Running DevicePool workflows.")
        count.add_metric([], len(snap.pools))
        yield count

        labels = ["pool", "platform"]
        desired = GaugeMetricFamily(
            "devicepool_replicas_desired",
            "Desired devices (spec.replicas) of a pool.",
            labels=labels,
        )
        ready = GaugeMetricFamily(
            "devicepool_replicas_ready", "Serving devices (ready + busy) of a pool.", labels=labels
        )
        phase = GaugeMetricFamily(
            "devicepool_pool_phase",
            "1 for the pool's current phase.",
            labels=[*labels, "phase"],
        )
        devices = GaugeMetricFamily(
            "devicepool_devices",
            "A pool's devices by status, from its `status` query.",
            labels=[*labels, "status"],
        )
        conditions = GaugeMetricFamily(
            "devicepool_pool_condition",
            "1 if the pool's condition of this type is True, else 0.",
            labels=[*labels, "type"],
        )
        for pool in snap.pools:
            key = [pool.name, pool.platform]
            if pool.desired is not None:
                desired.add_metric(key, pool.desired)
            if pool.ready is not None:
                ready.add_metric(key, pool.ready)
            if pool.phase:
                phase.add_metric([*key, pool.phase], 1)
            if pool.status is not None:
                for status, json_field in DEVICE_STATUS_FIELDS.items():
                    devices.add_metric([*key, status], float(pool.status.get(json_field) or 0))
                for cond in pool.status.get("conditions") or []:
                    conditions.add_metric(
                        [*key, str(cond.get("type"))], 1.0 if cond.get("status") == "True" else 0.0
                    )
        yield from (desired, ready, phase, devices, conditions)


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- Temporal SDK metrics


@dataclass
class _Hist:
    buckets: list[float]
    counts: list[int]
    total: float = 0.0
    count: int = 0


SDK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class SdkMetricsCollector(Collector):
    """The SDK Core's metrics (a `MetricBuffer`) re-exposed in Prometheus form.

    Counters arrive as deltas and are summed here; histograms arrive as single
    observations (durations in seconds) and are bucketed here. `drain()` must
    run regularly even without scrapes (the buffer drops what overflows); the
    worker calls it every few seconds and on every scrape.
    """

    def __init__(self, buffer: MetricBuffer, *, buckets: Sequence[float] = SDK_BUCKETS) -> None:
        self._buffer = buffer
        self._buckets = list(buckets)
        self._help: dict[str, str] = {}
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._hists: dict[str, dict[tuple[tuple[str, str], ...], _Hist]] = {}

    def drain(self) -> None:
        try:
            updates = self._buffer.retrieve_updates()
        except RuntimeError:
            return  # no runtime attached yet
        for update in updates:
            metric = update.metric
            name = _metric_name(metric.name)
            self._help.setdefault(name, metric.description or metric.name)
            attrs = tuple(sorted((str(k), str(v)) for k, v in update.attributes.items()))
            if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
                series = self._counters.setdefault(name, {})
                series[attrs] = series.get(attrs, 0.0) + float(update.value)
            elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
                self._gauges.setdefault(name, {})[attrs] = float(update.value)
            else:
                hist = self._hists.setdefault(name, {}).get(attrs)
                if hist is None:
                    hist = _Hist(self._buckets, [0] * len(self._buckets))
                    self._hists[name][attrs] = hist
                value = float(update.value)
                for i, bound in enumerate(self._buckets):
                    if value <= bound:
                        hist.counts[i] += 1
                hist.total += value
                hist.count += 1

    def collect(self) -> Iterable[Metric]:
        self.drain()
        for name, series in sorted(self._counters.items()):
            counter = CounterMetricFamily(name, self._help[name], labels=_label_names(series))
            for attrs, value in series.items():
                counter.add_metric([v for _, v in attrs], value)
            yield counter
        for name, series in sorted(self._gauges.items()):
            gauge = GaugeMetricFamily(name, self._help[name], labels=_label_names(series))
            for attrs, value in series.items():
                gauge.add_metric([v for _, v in attrs], value)
            yield gauge
        for name, hists in sorted(self._hists.items()):
            family = HistogramMetricFamily(name, self._help[name], labels=_label_names(hists))
            for attrs, hist in hists.items():
                buckets = [
                    (_le(bound), float(c))
                    for bound, c in zip(hist.buckets, hist.counts, strict=True)
                ]
                buckets.append(("+Inf", float(hist.count)))
                family.add_metric([v for _, v in attrs], buckets, hist.total)
            yield family


def _metric_name(name: str) -> str:
    name = name if name.startswith("temporal_") else f"temporal_{name}"
    # Durations come in seconds (MetricBufferDurationFormat.SECONDS): say so in the name.
    if name.endswith("_latency"):
        name += "_seconds"
    return name


def _label_names(series: dict[tuple[tuple[str, str], ...], Any]) -> list[str]:
    first = next(iter(series))
    return [k for k, _ in first]


def _le(bound: float) -> str:
    return repr(float(bound))


# ---------------------------------------------------------------- worker health gauges


class WorkerGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.polling = Gauge(
            "devicepool_worker_polling",
            "1 while this process's Temporal workers are running (polling their task queues).",
            registry=registry,
        )


# ---------------------------------------------------------------- reconcile duration


class ReconcileInterceptor(Interceptor):
    """Times DevicePool reconcile passes from outside the workflow code.

    Why this is replay-safe: calling prometheus-client from workflow code would
    count again every time a worker replays a history (cache eviction, worker
    restart, another replica picking the pool up). This interceptor observes
    the workflow's outbound commands and records only when
    `workflow.unsafe.is_replaying()` is False, i.e. while the pass is executing
    for the first time; a pass that began during replay is discarded, never
    completed, so nothing is ever observed twice. The clock it reads
    (`time.monotonic`) is used only for the metric and never flows back into
    workflow state, so determinism is untouched.

    What a pass is, seen from the commands: it begins when the pool starts an
    observation (`list_devices`) or when its `watch_devices` activity returns
    with a change, and ends when the pool goes back to waiting, which it shows
    by starting the next `watch_devices` (or by continuing as new). A pass woken
    by a timer or a message while the watch is still running ends without a
    new watch and is not measured.
    """

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        metrics = self._metrics

        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                if outbound.info().workflow_type == WORKFLOW_DEVICE_POOL:
                    outbound = _ReconcileOutbound(outbound, metrics)
                super().init(outbound)

        return _Inbound


OBSERVE_ACTIVITY = "list_devices"
WATCH_ACTIVITY = "watch_devices"


class _ReconcileOutbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, metrics: Metrics) -> None:
        super().__init__(next)
        self._metrics = metrics
        self._started: float | None = None

    def _live(self) -> bool:
        if workflow.unsafe.is_replaying():
            self._started = None
            return False
        return True

    def _begin(self) -> None:
        if self._live():
            self._started = _now()

    def _end(self) -> None:
        started, self._started = self._started, None
        if started is not None and self._live():
            self._metrics.reconcile.observe(max(0.0, _now() - started))

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity == WATCH_ACTIVITY:
            self._end()
        elif input.activity == OBSERVE_ACTIVITY:
            self._begin()
        handle = super().start_activity(input)
        if input.activity == WATCH_ACTIVITY:
            handle.add_done_callback(self._watch_done)
        return handle

    def _watch_done(self, task: asyncio.Future[Any]) -> None:
        # Cancelled at continue-as-new or deletion: no pass follows.
        if not task.cancelled():
            self._begin()

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        self._end()
        super().continue_as_new(input)


def _now() -> float:
    # Metrics only, never workflow state: see ReconcileInterceptor.
    with workflow.unsafe.sandbox_unrestricted():
        return time.monotonic()


async def drain_periodically(collector: SdkMetricsCollector, every: float = 5.0) -> None:
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(Exception):
            collector.drain()
