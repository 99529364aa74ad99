"""The Temporal SDK's own worker metrics (pollers, task latencies, slots, ...) on `/metrics`.

`sdk_runtime()` sends the runtime's Core metrics to a `MetricBuffer`; `SdkMetricsCollector`
re-exposes it in Prometheus form; `drain_periodically` keeps it from overflowing between scrapes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
    MetricBufferDurationFormat,
    Runtime,
    TelemetryConfig,
)

from devicepool.worker.logs import core_logging


def sdk_runtime() -> tuple[Runtime, MetricBuffer]:
    """A Temporal runtime whose Core metrics land in a buffer that `/metrics` drains."""
    buffer = MetricBuffer(100_000, MetricBufferDurationFormat.SECONDS)
    # Core's own log lines go through the worker's formatter (no colour codes).
    telemetry = TelemetryConfig(metrics=buffer, logging=core_logging())
    return Runtime(telemetry=telemetry), buffer


@dataclass
class _Hist:
    counts: list[int]  # one a bucket of the collector's
    total: float = 0.0
    count: int = 0


SDK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class SdkMetricsCollector(Collector):
    """The SDK Core's metrics (a `MetricBuffer`) re-exposed in Prometheus form.

    Counters arrive as deltas (summed here), histograms as single observations (bucketed here).
    `drain()` must run even without scrapes (the buffer drops what overflows); the periodic drain
    and each render call it from worker threads (tens of thousands of updates at load), so a lock
    keeps the two apart.
    """

    def __init__(self, buffer: MetricBuffer, *, buckets: Sequence[float] = SDK_BUCKETS) -> None:
        self._buffer = buffer
        self._buckets = list(buckets)
        self._help: dict[str, str] = {}
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._hists: dict[str, dict[tuple[tuple[str, str], ...], _Hist]] = {}
        self._lock = threading.Lock()

    def drain(self) -> None:
        with self._lock:
            self._drain()

    def _drain(self) -> None:
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
                    hist = _Hist([0] * len(self._buckets))
                    self._hists[name][attrs] = hist
                value = float(update.value)
                for i, bound in enumerate(self._buckets):
                    if value <= bound:
                        hist.counts[i] += 1
                hist.total += value
                hist.count += 1

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            self._drain()
            families = list(self._families())
        yield from families

    def _families(self) -> Iterable[Metric]:
        for family_of, values in (
            (CounterMetricFamily, self._counters),
            (GaugeMetricFamily, self._gauges),
        ):
            for name, series in sorted(values.items()):
                labels = _label_names(series)
                family = family_of(name, self._help[name], labels=labels)
                for attrs, value in series.items():
                    family.add_metric(_label_values(attrs, labels), value)
                yield family
        for name, hists in sorted(self._hists.items()):
            labels = _label_names(hists)
            histogram = HistogramMetricFamily(name, self._help[name], labels=labels)
            for attrs, hist in hists.items():
                buckets = [
                    (repr(float(bound)), float(c))
                    for bound, c in zip(self._buckets, hist.counts, strict=True)
                ]
                buckets.append(("+Inf", float(hist.count)))
                histogram.add_metric(_label_values(attrs, labels), buckets, hist.total)
            yield histogram


def _metric_name(name: str) -> str:
    name = name if name.startswith("temporal_") else f"temporal_{name}"
    # Durations come in seconds (MetricBufferDurationFormat.SECONDS): say so in the name.
    if name.endswith("_latency"):
        name += "_seconds"
    return name


def _label_names(series: dict[tuple[tuple[str, str], ...], Any]) -> list[str]:
    """Every attribute name of the metric's series: Core leaves some off some series (its
    `request` counts `GetSystemInfo` without `namespace`, polls with `task_queue`)."""
    return sorted({k for attrs in series for k, _ in attrs})


def _label_values(attrs: tuple[tuple[str, str], ...], labels: list[str]) -> list[str]:
    """The series' value of each label; "" (no label, to Prometheus) for one it lacks."""
    values = dict(attrs)
    return [values.get(label, "") for label in labels]


async def drain_periodically(collector: SdkMetricsCollector, every: float = 5.0) -> None:
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(collector.drain)
