"""Prometheus samples as the tests read them: keyed by (name, labels), one value each; and a
pool as the gauges' visibility listing yields it (`listed`), for the fake clients they read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devicepool.api.names import SA_DESIRED, SA_PHASE, SA_PLATFORM, SA_READY
from devicepool.worker.pool_gauges import PoolCollector

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Execution:
    """A listed pool: its workflow id, search attributes and memo."""

    id: str
    search_attributes: dict[str, list[Any]]
    memo: dict[str, Any] = field(default_factory=dict)

    async def memo_value(self, key: str, default: Any = None) -> Any:
        return self.memo.get(key, default)


def listed(
    workflow_id: str,
    *,
    platform: str | None = None,
    desired: int | None = None,
    ready: int | None = None,
    phase: str | None = None,
    memo: dict[str, Any] | None = None,
) -> Execution:
    """The pool `workflow_id` listed with the search attributes given (the others unset)."""
    given = {SA_PLATFORM: platform, SA_DESIRED: desired, SA_READY: ready, SA_PHASE: phase}
    attributes = {key: [value] for key, value in given.items() if value is not None}
    return Execution(workflow_id, attributes, memo or {})


def samples_of(text: str) -> Samples:
    """Every sample of an exposition `text`, keyed by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def collected(temporal: Any) -> Samples:
    """What `PoolCollector` serves for the fake client `temporal`, refreshed now
    (no cached snapshot), as a scrape of its own registry reads it."""
    collector = PoolCollector(temporal, max_age=0, status_max_age=0)
    await collector.refresh()
    registry = CollectorRegistry()
    registry.register(collector)
    return samples_of(generate_latest(registry).decode())
