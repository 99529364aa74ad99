"""The per-pool lease series on `/metrics` (both kinds), beside the other pool gauges
(``pool_gauges.py``): what the pool's `status` says of its leases, when its oldest ticket was
made and its `leases.queue.maxWait`.

The status alone would do for all but the oldest wait: its `oldestQueuedSeconds` is as old as
the pool's last pass, so the oldest ticket's own time is read and its wait is counted at each
scrape. A pool's memo row carries that time and `maxWait`; of a pool without a row (a build
before it), `LeaseReads` asks them: the `leases` query, only while a ticket waits, and the
`spec` query, again only when the pool has seen a new generation. Why the expired
count is a counter read from the pool's state: docs/operations.md, 'Metrics, alerts and the
dashboard'."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from devicepool.api.names import QUERY_LEASES, QUERY_SPEC
from devicepool.api.v1beta1 import LeaseSpec

__all__ = ["LeaseReads", "PoolLeases", "lease_families"]

LABELS = ["pool", "platform", "kind"]


@dataclass(frozen=True)
class PoolLeases:
    """One pool as the lease series see it: its labels, its status (None: unanswered), and
    what `LeaseReads` knows of it."""

    labels: Sequence[str]  # pool, platform, kind
    status: Mapping[str, Any] | None
    # Its oldest waiting ticket: when it was made and its deadline (Unix seconds).
    oldest: tuple[float, float] | None = None
    max_wait: float | None = None  # its `leases.queue.maxWait` (seconds)


# ask(workflow id, query name) -> the answer, or None (failed, no worker)
Ask = Callable[[str, str], Awaitable[Any]]


class LeaseReads:
    """What the lease series need beyond the status, kept between refreshes by pool key."""

    def __init__(self) -> None:
        self._oldest: dict[str, tuple[float, float]] = {}
        # key -> (the status's observedGeneration when the spec was read, maxWait)
        self._max_wait: dict[str, tuple[Any, float]] = {}

    async def refresh(self, pools: Iterable[tuple[str, str, Mapping[str, Any]]], ask: Ask) -> None:
        """Read what changed, for each (key, workflow id, status) of the running pools."""
        pools = list(pools)
        await asyncio.gather(*(self._one(key, wid, status, ask) for key, wid, status in pools))
        seen = {key for key, _, _ in pools}
        for gone in (self._oldest.keys() | self._max_wait.keys()) - seen:
            self._oldest.pop(gone, None)
            self._max_wait.pop(gone, None)

    async def _one(self, key: str, workflow_id: str, status: Mapping[str, Any], ask: Ask) -> None:
        if "leasedDevices" not in status:
            return  # a build before leases: no series
        generation = status.get("observedGeneration")
        known = self._max_wait.get(key)
        if known is None or known[0] != generation:
            max_wait = _max_wait(await ask(workflow_id, QUERY_SPEC))
            if max_wait is not None:
                self._max_wait[key] = (generation, max_wait)
        if _number(status.get("leasesQueued")):
            oldest = _oldest(await ask(workflow_id, QUERY_LEASES))
            if oldest is not None:
                self._oldest[key] = oldest
            # Unanswered: the time last read, if any (the status says one still waits).
        else:
            self._oldest.pop(key, None)

    def oldest(self, key: str) -> tuple[float, float] | None:
        return self._oldest.get(key)

    def max_wait(self, key: str) -> float | None:
        known = self._max_wait.get(key)
        return known[1] if known is not None else None


def lease_families(pools: Sequence[PoolLeases], *, now: float) -> list[Metric]:
    """The lease series of `pools`, at Unix time `now` (the oldest wait is counted to it)."""
    active = GaugeMetricFamily(
        "devicepool_leases_active",
        "Devices (profiles) of a pool held by a lease now (status leasedDevices).",
        labels=LABELS,
    )
    queued = GaugeMetricFamily(
        "devicepool_leases_queued",
        "Tickets waiting in a pool's lease queue (status leasesQueued).",
        labels=LABELS,
    )
    oldest = GaugeMetricFamily(
        "devicepool_leases_oldest_queued_seconds",
        "How long the oldest ticket in a pool's lease queue has waited (0: none waits).",
        labels=LABELS,
    )
    max_wait = GaugeMetricFamily(
        "devicepool_leases_queue_max_wait_seconds",
        "A pool's leases.queue.maxWait: a ticket ends unserved after this long.",
        labels=LABELS,
    )
    expired = CounterMetricFamily(
        "devicepool_leases_expired",
        "Leases a pool ended without its holder's word (expired, idle past idleTimeout, "
        "an offer unclaimed, the device lost), over the pool's life (status leasesExpired).",
        labels=LABELS,
    )
    for pool in pools:
        status, labels = pool.status, list(pool.labels)
        if status is None or "leasedDevices" not in status:
            continue
        waiting = _number(status.get("leasesQueued"))
        active.add_metric(labels, _number(status.get("leasedDevices")))
        queued.add_metric(labels, waiting)
        expired.add_metric(labels, _number(status.get("leasesExpired")))
        if not waiting:
            oldest.add_metric(labels, 0.0)
        elif pool.oldest is not None:
            # Counted on between reads, never past the ticket's deadline: by then it has
            # been served or has ended (a pool that cannot be read is not taken to wait on).
            made, deadline = pool.oldest
            oldest.add_metric(labels, max(0.0, min(now, deadline) - made))
        else:  # its ticket's time unread: what its last pass saw
            oldest.add_metric(labels, _number(status.get("oldestQueuedSeconds")))
        if pool.max_wait is not None:
            max_wait.add_metric(labels, pool.max_wait)
    return [active, queued, oldest, max_wait, expired]


def _number(value: Any) -> float:
    """A count or a duration from a status: 0 for anything that is not a finite one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value >= 0 else 0.0


def _max_wait(answer: Any) -> float | None:
    """`leases.queue.maxWait` (seconds) of a `spec` query's answer; unset: the default."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("spec"), Mapping):
        return None
    try:
        return LeaseSpec.model_validate(answer["spec"].get("leases") or {}).queue.max_wait
    except ValueError:
        return None


def _oldest(answer: Any) -> tuple[float, float] | None:
    """When the oldest ticket of a `leases` query's answer was made, and its deadline (Unix
    seconds; no deadline read: none)."""
    if not isinstance(answer, Mapping):
        return None
    tickets = []
    for ticket in answer.get("tickets") or []:
        made = _unix(ticket, "createdAt")
        if made is not None:
            tickets.append((made, _unix(ticket, "deadline") or math.inf))
    return min(tickets, default=None)


def _unix(ticket: Any, key: str) -> float | None:
    try:
        when = datetime.fromisoformat(str(ticket[key]))
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
