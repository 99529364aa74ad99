"""The lease series of the pool gauges, against a fake Temporal (pure: no server).

`devicepool_leases_active|queued` and `devicepool_leases_expired_total` are the status's
`leasedDevices`, `leasesQueued`, `leasesExpired`; the oldest ticket's wait is counted from its
own `createdAt` (the `leases` query, asked only while one waits) to the scrape, and
`maxWait` is the spec's (asked again only at a new observed generation)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from devicepool.api.names import (
    QUERY_LEASES,
    QUERY_SPEC,
    QUERY_STATUS,
    browser_pool_workflow_id,
    pool_workflow_id,
)
from devicepool.worker.pool_gauges import PoolCollector
from tests.helpers.metrics import Execution, Samples, listed, samples_of

NOW = datetime(2026, 12, 5, 17, 0, tzinfo=UTC).timestamp()
DP = {"pool": "p1", "platform": "android", "kind": "DevicePool"}
BP = {"pool": "b1", "platform": "browser", "kind": "BrowserPool"}


@dataclass
class FakeTemporal:
    """Two running pools, a DevicePool and a BrowserPool, answering what they are told."""

    statuses: dict[str, Any]
    specs: dict[str, Any] = field(default_factory=dict)
    leases: dict[str, Any] = field(default_factory=dict)
    asked: Counter[tuple[str, str]] = field(default_factory=Counter)

    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        if "BrowserPool" in query:
            yield listed(browser_pool_workflow_id("b1"), desired=2, ready=2, phase="Ready")
        else:
            yield listed(
                pool_workflow_id("p1"), platform="android", desired=2, ready=2, phase="Ready"
            )

    def get_workflow_handle(self, workflow_id: str) -> Any:
        fake = self

        class _Handle:
            async def query(self, name: str, **_: Any) -> Any:
                fake.asked[(workflow_id, name)] += 1
                answers = {QUERY_STATUS: fake.statuses, QUERY_SPEC: fake.specs}
                answer = {**answers, QUERY_LEASES: fake.leases}.get(name, {}).get(workflow_id)
                if answer is None:
                    raise RuntimeError(f"no answer to {name} of {workflow_id}")
                return answer

        return _Handle()


def status(**fields: Any) -> dict[str, Any]:
    return {"phase": "Ready", "observedGeneration": 1, **fields}


def spec(**leases: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "spec": {"leases": leases or None}, "generation": 1}


def ticket(created_at: str, deadline: str | None = None) -> dict[str, Any]:
    made = {"id": "t", "holder": "h", "duration": "10m", "createdAt": created_at}
    return made if deadline is None else {**made, "deadline": deadline}


class Scraper:
    """A `PoolCollector` on its own registry, its wall clock set by the test."""

    def __init__(self, temporal: FakeTemporal) -> None:
        self.now = NOW
        self.collector = PoolCollector(temporal, max_age=0, status_max_age=0, wall=lambda: self.now)
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)

    async def refresh(self) -> None:
        await self.collector.refresh()

    def samples(self) -> Samples:
        return samples_of(generate_latest(self.registry).decode())


def value(samples: Samples, name: str, labels: dict[str, str]) -> float | None:
    return samples.get((name, frozenset(labels.items())))


async def test_the_lease_series_of_both_kinds() -> None:
    temporal = FakeTemporal(
        statuses={
            pool_workflow_id("p1"): status(
                leasedDevices=2, leasesQueued=3, oldestQueuedSeconds=40, leasesExpired=7
            ),
            browser_pool_workflow_id("b1"): status(leasedDevices=1, leasesQueued=0),
        },
        specs={
            pool_workflow_id("p1"): spec(queue={"maxWait": "2m"}),
            browser_pool_workflow_id("b1"): spec(),
        },
        leases={
            pool_workflow_id("p1"): {
                "leases": [],
                "tickets": [
                    ticket("2026-12-05T16:59:30Z", "2026-12-05T17:04:30Z"),
                    ticket("2026-12-05T16:59:10Z", "2026-12-05T17:04:10Z"),
                ],
            }
        },
    )
    scraper = Scraper(temporal)
    await scraper.refresh()
    got = scraper.samples()
    assert value(got, "devicepool_leases_active", DP) == 2
    assert value(got, "devicepool_leases_queued", DP) == 3
    assert value(got, "devicepool_leases_expired_total", DP) == 7
    # The oldest ticket's own time, not the status's figure from the last pass.
    assert value(got, "devicepool_leases_oldest_queued_seconds", DP) == 50
    assert value(got, "devicepool_leases_queue_max_wait_seconds", DP) == 120
    # A BrowserPool the same way; nothing queued: 0, the default maxWait, no leases query.
    assert value(got, "devicepool_leases_active", BP) == 1
    assert value(got, "devicepool_leases_queued", BP) == 0
    assert value(got, "devicepool_leases_oldest_queued_seconds", BP) == 0
    assert value(got, "devicepool_leases_queue_max_wait_seconds", BP) == 300
    assert value(got, "devicepool_leases_expired_total", BP) == 0
    assert temporal.asked[(browser_pool_workflow_id("b1"), QUERY_LEASES)] == 0

    # Between refreshes the oldest wait goes on with the clock (a scrape asks nothing).
    scraper.now += 30
    assert value(scraper.samples(), "devicepool_leases_oldest_queued_seconds", DP) == 80
    # Never past the ticket's deadline: a pool not read again is not taken to wait on.
    scraper.now += 3600
    assert value(scraper.samples(), "devicepool_leases_oldest_queued_seconds", DP) == 300


async def test_a_spec_is_read_once_a_generation_and_tickets_only_while_some_wait() -> None:
    p1 = pool_workflow_id("p1")
    temporal = FakeTemporal(
        statuses={p1: status(leasedDevices=0, leasesQueued=1)},
        specs={p1: spec(queue={"maxWait": "10m"})},
        leases={p1: {"tickets": [ticket("2026-12-05T16:58:00Z")]}},
    )
    scraper = Scraper(temporal)
    for _ in range(3):
        await scraper.refresh()
    assert temporal.asked[(p1, QUERY_STATUS)] == 3
    assert temporal.asked[(p1, QUERY_SPEC)] == 1
    assert temporal.asked[(p1, QUERY_LEASES)] == 3

    # A new generation seen (maxWait changed); the queue emptied: no more leases queries.
    temporal.statuses[p1] = status(leasedDevices=1, leasesQueued=0, observedGeneration=2)
    temporal.specs[p1] = spec(queue={"maxWait": "1m"})
    await scraper.refresh()
    await scraper.refresh()
    assert temporal.asked[(p1, QUERY_SPEC)] == 2
    assert temporal.asked[(p1, QUERY_LEASES)] == 3
    got = scraper.samples()
    assert value(got, "devicepool_leases_queue_max_wait_seconds", DP) == 60
    assert value(got, "devicepool_leases_oldest_queued_seconds", DP) == 0


async def test_a_pool_from_before_leases_has_no_lease_series_and_is_asked_nothing_more() -> None:
    p1 = pool_workflow_id("p1")
    temporal = FakeTemporal(statuses={p1: status(readyDevices=2)})
    scraper = Scraper(temporal)
    await scraper.refresh()
    got = scraper.samples()
    assert not [key for key in got if key[0].startswith("devicepool_leases")]
    assert temporal.asked[(p1, QUERY_SPEC)] == temporal.asked[(p1, QUERY_LEASES)] == 0
    # The families are still declared (dashboards and rules find them on every worker).
    text = generate_latest(scraper.registry).decode()
    assert "# TYPE devicepool_leases_expired_total counter" in text
    assert "# TYPE devicepool_leases_oldest_queued_seconds gauge" in text


async def test_what_cannot_be_read_falls_back_and_nothing_odd_is_served() -> None:
    p1 = pool_workflow_id("p1")
    temporal = FakeTemporal(
        statuses={
            p1: status(
                leasedDevices=float("nan"),
                leasesQueued=2,
                oldestQueuedSeconds=33,
                leasesExpired=-4,
            )
        },
        # No spec answer (a worker from before the query), tickets with no readable time.
        leases={p1: {"tickets": [{"createdAt": "yesterday"}, {"id": "no time"}]}},
    )
    scraper = Scraper(temporal)
    await scraper.refresh()
    got = scraper.samples()
    assert value(got, "devicepool_leases_active", DP) == 0
    assert value(got, "devicepool_leases_expired_total", DP) == 0
    # The ticket's time unread: the status's figure from the pool's last pass.
    assert value(got, "devicepool_leases_oldest_queued_seconds", DP) == 33
    assert value(got, "devicepool_leases_queue_max_wait_seconds", DP) is None
