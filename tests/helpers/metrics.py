"""Prometheus samples as the tests read them: keyed by (name, labels), one value each."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devicepool.worker.pool_gauges import PoolCollector

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


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
