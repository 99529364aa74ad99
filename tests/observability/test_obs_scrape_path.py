"""A `/metrics` scrape reads memory only: no per-pool query, however many pools run.

`PoolCollector` used to list the pools and then ask every one its `status`
query inside the scrape (each a replay when not cached): at 1,000 pools, a
scrape waited on 1,000 queries. Now a background task keeps the snapshot (one
visibility listing every `max_age`, the status queries every `status_max_age`,
off the scrape path), and a scrape only serves it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from devicepool.api.names import pool_workflow_id
from devicepool.worker.pool_gauges import PoolCollector
from tests.helpers.metrics import Execution, listed

POOLS = 300
QUERY_SECONDS = 0.02  # each status query: 300 of them, 8 at a time, take ~0.75 s


@dataclass
class FakeTemporal:
    """Visibility and `status` queries of `POOLS` running pools, counted."""

    pools: int = POOLS
    listings: int = 0
    queries: int = 0
    handles: dict[str, Any] = field(default_factory=dict)

    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        self.listings += 1
        for i in range(self.pools):
            name = pool_workflow_id(f"p{i:04d}")
            yield listed(name, platform="android", desired=2, ready=2, phase="Ready")

    def get_workflow_handle(self, workflow_id: str) -> Any:
        fake = self

        class _Handle:
            async def query(self, name: str, **_: Any) -> dict[str, Any]:
                fake.queries += 1
                await asyncio.sleep(QUERY_SECONDS)
                return {
                    "readyDevices": 2,
                    "pendingDevices": 1,
                    "conditions": [{"type": "Ready", "status": "True"}],
                }

        return _Handle()


def _registry(collector: PoolCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


async def test_a_scrape_asks_no_pool_its_status_and_serves_the_background_snapshot() -> None:
    temporal = FakeTemporal()
    collector = PoolCollector(temporal, max_age=0.2, status_max_age=0.2)  # type: ignore[arg-type]
    registry = _registry(collector)
    loop = collector.start()
    try:
        # The first scrape waits for the first snapshot (a fresh worker).
        await collector.refresh()
        body = generate_latest(registry).decode()
        assert "devicepool_pools 300.0" in body
        assert (
            f'devicepool_devices{{kind="DevicePool",platform="android",pool="p{POOLS - 1:04d}"'
            in body
        )
        # Planned creates not yet at the provider are their own status.
        last = f'kind="DevicePool",platform="android",pool="p{POOLS - 1:04d}"'
        assert f'devicepool_devices{{{last},status="pending"}} 1.0' in body, body[-2000:]
        for _ in range(5):
            queries, listings = temporal.queries, temporal.listings
            started = time.monotonic()
            await collector.refresh()  # what the /metrics handler awaits
            took = time.monotonic() - started
            # Rendering 300 pools (CPU, not queries) is left out of the timing:
            # a full run on the busy machine once took 0.7 s for both.
            generate_latest(registry)
            # The scrape does not wait for the background refresh (~0.75 s of
            # queries): a loose bound, as this machine is busy; the counts below
            # are the real check.
            assert took < 0.5, took
            assert (temporal.listings - listings, temporal.queries - queries) in {(0, 0)}, (
                "the scrape path asked Temporal"
            )
            await asyncio.sleep(0.3)
        assert temporal.listings >= 3  # the background task kept listing
    finally:
        loop.cancel()


async def test_without_the_background_task_a_scrape_still_refreshes_by_itself() -> None:
    temporal = FakeTemporal(pools=3)
    collector = PoolCollector(temporal, max_age=0.0, status_max_age=0.0)  # type: ignore[arg-type]
    registry = _registry(collector)
    await collector.refresh()
    assert "devicepool_pools 3.0" in generate_latest(registry).decode()
    # One listing of each kind (this fake's pools are all DevicePools), a query a pool,
    # and one of the node registry (its node workers' last beats).
    assert (temporal.listings, temporal.queries) == (2, 4)
