"""The SDK's own metrics on `/metrics` (`SdkMetricsCollector`), as the SDK reports them.

One metric's series need not share their attribute names: against a dev server, Core's
`request` counts `GetSystemInfo` with `operation` and `service_name` only, and every later
call with `namespace` too (polls with `task_queue` as well). The family's labels were the first
series' names, so a later series' values were zipped onto them:
`temporal_request_total{operation="default",service_name="StartWorkflowExecution"}`.
"""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.runtime import BUFFERED_METRIC_KIND_COUNTER, BUFFERED_METRIC_KIND_HISTOGRAM

from devicepool.worker.sdk_metrics import SdkMetricsCollector

CORE = "temporal-core-sdk"
# In the order Core reports them at a worker's start.
REQUESTS = [
    {"operation": "GetSystemInfo", "service_name": CORE},
    {"namespace": "default", "operation": "StartWorkflowExecution", "service_name": CORE},
    {"namespace": "default", "operation": "PollWorkflowTaskQueue", "service_name": CORE,
     "task_queue": "devicepool"},
    {"namespace": "default", "operation": "PollWorkflowTaskQueue", "service_name": CORE,
     "task_queue": "devicepool-watch"},
]  # fmt: skip


class _Buffer:
    """A `MetricBuffer` holding one update a series of each metric, once."""

    def __init__(self) -> None:
        request = SimpleNamespace(name="request", description="", kind=BUFFERED_METRIC_KIND_COUNTER)
        latency = SimpleNamespace(
            name="request_latency", description="", kind=BUFFERED_METRIC_KIND_HISTOGRAM
        )
        self.updates = [
            SimpleNamespace(metric=metric, value=1, attributes=attributes)
            for metric in (request, latency)
            for attributes in REQUESTS
        ]

    def retrieve_updates(self) -> list[SimpleNamespace]:
        updates, self.updates = self.updates, []
        return updates


def _labels(family: str) -> list[dict[str, str]]:
    registry = CollectorRegistry()
    registry.register(SdkMetricsCollector(_Buffer()))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    (found,) = [f for f in text_string_to_metric_families(text) if f.name == family]
    # A counter's samples, or a histogram's counts; an empty label is no label to Prometheus.
    return [
        {k: v for k, v in s.labels.items() if v}
        for s in found.samples
        if s.name in (f"{family}_total", f"{family}_count")
    ]


def test_each_series_keeps_its_own_attributes_whichever_came_first() -> None:
    assert _labels("temporal_request") == REQUESTS
    assert _labels("temporal_request_latency_seconds") == REQUESTS
