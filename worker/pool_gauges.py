"""Per-pool gauges on `/metrics`, read from ONE source of truth: Temporal itself.

`PoolCollector.run`, a background task, lists the running pools of both kinds through
visibility every `max_age` seconds: each pool's row in its memo (`row_memo`) is its status.
Every `status_max_age` seconds it asks the node registry its beats, and asks `status` only of
a pool listed without a row (a build before it); a scrape serves that snapshot. Without the
task, `refresh` does the same work inline. A BrowserPool without search attributes takes them
from its status.
The lease series (both kinds) and the few reads they add: ``lease_gauges.py``.
Why: docs/operations.md, 'Metrics, alerts and the dashboard'."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from temporalio.client import Client

from devicepool.activities.node_registry import query_nodes
from devicepool.api.kinds import BROWSER_POOL, KINDS, kind_named
from devicepool.api.names import (
    KIND_BROWSER_POOL,
    KIND_DEVICE_POOL,
    MEMO_POOL_ROW,
    QUERY_STATUS,
    SA_DESIRED,
    SA_PHASE,
    SA_PLATFORM,
    SA_READY,
)
from devicepool.worker.lease_gauges import LeaseReads, PoolLeases, lease_families
from devicepool.workflows.browserpool.publish import BROWSER_PLATFORM
from devicepool.workflows.reconciler.row_memo import Row, read_row

log = logging.getLogger("devicepool.metrics")

# A BrowserPool's profiles, as `devicepool_devices{kind="BrowserPool"}` statuses.
PROFILE_STATUS_FIELDS = {
    "ready": "readyProfiles",
    "open": "openProfiles",
    "lost": "lostProfiles",
}
DEVICE_STATUS_FIELDS = {
    "ready": "readyDevices",
    "busy": "busyDevices",
    "provisioning": "provisioningDevices",
    # planned creates not yet at the provider (waiting for the window)
    "pending": "pendingDevices",
    "offline": "offlineDevices",
}

CONDITION_STATUSES = ("True", "False", "Unknown")
# Each pool's gauges: name, help, and the labels after pool, platform and kind.
POOL_FAMILIES = (
    ("devicepool_replicas_desired", "Desired devices (spec.replicas) of a pool.", ()),
    ("devicepool_replicas_ready", "Serving devices (ready + busy) of a pool.", ()),
    ("devicepool_pool_phase", "1 for the pool's current phase.", ("phase",)),
    ("devicepool_devices", "A pool's devices by status, from its `status` query.", ("status",)),
    (
        "devicepool_pool_condition",
        "1 if the pool's condition of this type is True, else 0.",
        ("type",),
    ),
    # As kube-state-metrics' `kube_node_status_condition`: one series a status, 1 for
    # the current one, so `Unknown` (a pool that cannot list its devices) is visible.
    (
        "devicepool_pool_condition_status",
        "1 for the status (True, False, Unknown) the pool's condition of this type has.",
        ("type", "status"),
    ),
    (
        "devicepool_node_profiles",
        "A BrowserPool's profiles placed on each live node (its status `byNode`).",
        ("node",),
    ),
    # The burn rate, what a budget alert compares (the cost to date only ever grows).
    (
        "devicepool_pool_hourly_cost_dollars",
        "What a DevicePool's devices bill an hour now, in dollars (its status `hourlyCost`).",
        (),
    ),
)


@dataclass
class _Pool:
    name: str
    platform: str
    desired: int | None
    ready: int | None
    phase: str
    status: dict[str, Any] | None = None
    kind: str = KIND_DEVICE_POOL
    # Its row in its memo, listed with it (None: a build before it; its status is asked).
    row: Row | None = None

    @property
    def key(self) -> str:
        """Where its status is kept: a DevicePool and a BrowserPool may share a name."""
        return f"{self.kind}/{self.name}"


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
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._max_age = max_age
        self._status_max_age = status_max_age
        self._timeout = timeout
        self._queries = asyncio.Semaphore(max_concurrent_queries)
        self._clock = clock
        self._wall = wall  # Unix time: the oldest lease ticket's wait is counted to it
        # The pools last listed, and whether that listing succeeded: one object, so that a
        # scrape's thread reads both from the same refresh.
        self._snapshot: tuple[list[_Pool], bool] = ([], False)
        self._listed_at: float | None = None
        self._statuses: dict[str, dict[str, Any]] = {}
        self._statuses_at: float | None = None
        # node worker -> its last beat at the node registry (Unix seconds)
        self._beats: dict[str, float] = {}
        self._leases = LeaseReads()
        self._lock = asyncio.Lock()
        self._background = False
        self._scraped = asyncio.Event()
        self._first = asyncio.Event()

    def start(self) -> asyncio.Task[None]:
        """The background task that keeps the snapshot fresh (cancel it at shutdown)."""
        self._background = True  # from now on, a scrape waits for it instead of asking
        return asyncio.create_task(self.run(), name="pool gauges")

    async def run(self) -> None:
        """Keep the snapshot fresh between scrapes (run it through `start`).

        Starts with the first scrape: a worker nobody scrapes asks Temporal nothing.
        """
        self._background = True
        try:
            await self._scraped.wait()
            while True:
                try:
                    await self._refresh()
                except Exception as exc:  # never let the loop die: the next round tries again
                    log.warning("pool gauges refresh failed: %s", exc)
                finally:
                    self._first.set()
                await asyncio.sleep(max(self._max_age, 0.05))
        finally:
            self._background = False

    async def refresh(self, *, force: bool = False) -> None:
        """Before a scrape: with the background task running, nothing (but wait for its
        first snapshot, at most `timeout`); without it, bring the snapshot up to date."""
        self._scraped.set()
        if self._background and not force:
            if not self._first.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._first.wait(), self._timeout)
            return
        await self._refresh(force=force)

    async def _refresh(self, *, force: bool = False) -> None:
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
                self._snapshot = (self._snapshot[0], False)
                self._listed_at = now
                return
            if (
                force
                or self._statuses_at is None
                or now - self._statuses_at >= self._status_max_age
            ):
                unlisted = [p for p in pools if p.row is None]
                self._statuses, self._beats = await asyncio.gather(
                    self._query_statuses(unlisted), self._query_beats()
                )
                answered = [
                    (p.key, kind_named(p.kind).workflow_id(p.name), self._statuses[p.key])
                    for p in unlisted
                    if p.key in self._statuses
                ]
                await self._leases.refresh(answered, self._ask)
                self._statuses_at = now
            for pool in pools:
                pool.status = pool.row.status if pool.row else self._statuses.get(pool.key)
                if pool.kind == KIND_BROWSER_POOL and pool.status is not None:
                    # Started without search attributes (an older build): what the status says.
                    if pool.desired is None:
                        pool.desired = _int(pool.status.get("desiredReplicas"))
                    if pool.ready is None:
                        pool.ready = _int(pool.status.get("readyProfiles"))
                    pool.phase = pool.phase or str(pool.status.get("phase") or "")
            self._snapshot = (pools, True)
            self._listed_at = now

    async def _list(self) -> list[_Pool]:
        pools: list[_Pool] = []
        for kind in KINDS.values():
            query = f'WorkflowType="{kind.workflow_type}" AND ExecutionStatus="Running"'
            async for execution in self._client.list_workflows(query):
                name = kind.name_from_workflow_id(execution.id)
                if name is None:
                    continue
                attrs = execution.search_attributes
                platform = str(_first(attrs.get(SA_PLATFORM)) or "")
                pools.append(
                    _Pool(
                        name=name,
                        platform=BROWSER_PLATFORM if kind is BROWSER_POOL else platform,
                        desired=_int(_first(attrs.get(SA_DESIRED))),
                        ready=_int(_first(attrs.get(SA_READY))),
                        phase=str(_first(attrs.get(SA_PHASE)) or ""),
                        kind=kind.name,
                        row=await _row(execution),
                    )
                )
        return pools

    async def _query_beats(self) -> dict[str, float]:
        """Each node worker's last beat, from the registry (none when it never started)."""
        try:
            async with self._queries:
                view = await asyncio.wait_for(query_nodes(self._client), self._timeout)
            return {n.node: n.last_seen.timestamp() for n in view.nodes}
        except Exception as exc:
            log.info("node registry query failed: %s", exc)
            return self._beats  # the previous answer

    async def _ask(self, workflow_id: str, query: str) -> Any:
        """A pool's answer to `query`; None if it failed (logged)."""
        async with self._queries:
            try:
                handle = self._client.get_workflow_handle(workflow_id)
                return await handle.query(query, rpc_timeout=timedelta(seconds=self._timeout))
            except Exception as exc:
                log.info("%s query of %s failed: %s", query, workflow_id, exc)
                return None

    async def _query_statuses(self, pools: Sequence[_Pool]) -> dict[str, dict[str, Any]]:
        async def one(pool: _Pool) -> tuple[str, dict[str, Any] | None]:
            workflow_id = kind_named(pool.kind).workflow_id(pool.name)
            async with self._queries:
                try:
                    handle = self._client.get_workflow_handle(workflow_id)
                    result = await handle.query(
                        QUERY_STATUS, rpc_timeout=timedelta(seconds=self._timeout)
                    )
                except Exception as exc:
                    log.info("status query of %s failed: %s", workflow_id, exc)
                    return pool.key, self._statuses.get(pool.key)  # the previous answer, if any
            return pool.key, dict(result) if isinstance(result, dict) else None

        answers = await asyncio.gather(*(one(p) for p in pools))
        return {name: status for name, status in answers if status is not None}

    def collect(self) -> Iterable[Metric]:
        pools, ok = self._snapshot
        yield GaugeMetricFamily(
            "devicepool_visibility_up",
            "1 if the last read of the pools from Temporal visibility succeeded.",
            value=1.0 if ok else 0.0,
        )
        for kind, name in (
            (KIND_DEVICE_POOL, "devicepool_pools"),
            (KIND_BROWSER_POOL, "devicepool_browser_pools"),
        ):
            count = sum(1 for p in pools if p.kind == kind)
            yield GaugeMetricFamily(name, f"Running {kind} workflows.", value=count)

        # `kind`: DevicePool, or BrowserPool (platform "browser"; its devices are profiles).
        desired, ready, phase, devices, conditions, statuses, by_node, hourly_cost = (
            GaugeMetricFamily(name, text, labels=["pool", "platform", "kind", *more])
            for name, text, more in POOL_FAMILIES
        )
        for pool in pools:
            key = [pool.name, pool.platform, pool.kind]
            fields = (
                PROFILE_STATUS_FIELDS if pool.kind == KIND_BROWSER_POOL else DEVICE_STATUS_FIELDS
            )
            if pool.desired is not None:
                desired.add_metric(key, pool.desired)
            if pool.ready is not None:
                ready.add_metric(key, pool.ready)
            if pool.phase:
                phase.add_metric([*key, pool.phase], 1)
            if pool.status is not None:
                for status, json_field in fields.items():
                    devices.add_metric([*key, status], float(pool.status.get(json_field) or 0))
                for cond in pool.status.get("conditions") or []:
                    type_, now = str(cond.get("type")), cond.get("status")
                    conditions.add_metric([*key, type_], 1.0 if now == "True" else 0.0)
                    for status in CONDITION_STATUSES:
                        statuses.add_metric([*key, type_, status], 1.0 if now == status else 0.0)
                for node, count in (pool.status.get("byNode") or {}).items():
                    by_node.add_metric([*key, str(node)], float(count or 0))
                if (rate := _dollars(pool.status.get("hourlyCost"))) is not None:
                    hourly_cost.add_metric(key, rate)
        yield from (desired, ready, phase, devices, conditions, statuses, by_node, hourly_cost)
        leases = [
            PoolLeases(
                labels=(pool.name, pool.platform, pool.kind),
                status=pool.status,
                oldest=pool.row.oldest if pool.row else self._leases.oldest(pool.key),
                max_wait=pool.row.max_wait if pool.row else self._leases.max_wait(pool.key),
            )
            for pool in pools
        ]
        yield from lease_families(leases, now=self._wall())
        beats = GaugeMetricFamily(
            "devicepool_node_last_beat_timestamp_seconds",
            "When a node worker last beat at the node registry (Unix time; lost past the "
            "worker's nodeLostAfterSeconds).",
            labels=["node"],
        )
        for node, at in sorted(self._beats.items()):
            beats.add_metric([node], at)
        yield beats


async def _row(execution: Any) -> Row | None:
    """A listed pool's row in its memo, if it has one the gauges can trust."""
    try:
        return read_row(await execution.memo_value(MEMO_POOL_ROW, None))
    except Exception as exc:  # a payload this worker cannot decode: its status is asked
        log.info("memo of %s unreadable: %s", execution.id, exc)
        return None


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _dollars(value: Any) -> float | None:
    """An amount of money from a status: a finite number of 0 or more, else None (no sample)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
