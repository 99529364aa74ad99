"""`devicepool_lease_wait_seconds`: the worker's interceptor observes each grant a pool's
`lease` or `lease_claim` update answers, once, and never while a history is replayed.

Pure: the interceptor's inbound class around a fake handler (the wiring on a real worker and
a replay of a real history: test_obs_metrics.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from temporalio import workflow
from temporalio.worker import HandleQueryInput, HandleUpdateInput, WorkflowInboundInterceptor

from devicepool.activities.metrics import Metrics
from devicepool.api.names import (
    QUERY_LEASE_TICKET,
    QUERY_LEASES,
    UPDATE_LEASE,
    UPDATE_LEASE_CLAIM,
    UPDATE_RENEW,
    WORKFLOW_BROWSER_POOL,
    WORKFLOW_DEVICE_POOL,
    browser_pool_workflow_id,
    pool_workflow_id,
)
from devicepool.worker.metrics import LeaseWaitInterceptor
from devicepool.workflows.reconciler.lease_messages import Granted, LeaseAnswer

T0 = datetime(2026, 12, 5, 17, 0, tzinfo=UTC)


class _Handler(WorkflowInboundInterceptor):
    """The workflow's own handler: answers what the test sets."""

    def __init__(self) -> None:
        self.answer: Any = None

    def init(self, outbound: Any) -> None:
        pass

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        return self.answer

    async def handle_query(self, input: HandleQueryInput) -> Any:
        return self.answer


class Pool:
    """One pool's workflow as the interceptor sees it."""

    def __init__(self, workflow_type: str, workflow_id: str, metrics: Metrics) -> None:
        cls = LeaseWaitInterceptor(metrics).workflow_interceptor_class(SimpleNamespace())  # type: ignore[arg-type]
        assert cls is not None
        self.handler = _Handler()
        self.inbound = cls(self.handler)
        info = SimpleNamespace(workflow_type=workflow_type, workflow_id=workflow_id)
        self.inbound.init(SimpleNamespace(info=lambda: info))  # type: ignore[arg-type]

    async def update(self, name: str, answer: Any) -> Any:
        self.handler.answer = answer
        return await self.inbound.handle_update_handler(
            HandleUpdateInput(id="u", update=name, args=[], headers={})
        )

    async def query(self, name: str, answer: Any) -> Any:
        self.handler.answer = answer
        return await self.inbound.handle_query(
            HandleQueryInput(id="q", query=name, args=[], headers={})
        )


def granted(lease: str, waited: float) -> LeaseAnswer:
    return LeaseAnswer(
        granted=Granted(
            lease=lease,
            pool="p",
            device="d",
            holder="h",
            granted_at=T0,
            expires_at=T0,
            waited_seconds=waited,
        )
    )


def observed(metrics: Metrics, **labels: str) -> tuple[float, float]:
    """(count, sum) of the histogram's series for `labels`; (0, 0) if it has none."""
    count = total = 0.0
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.labels.get("pool") != labels["pool"]:
                continue
            if sample.labels.get("kind") != labels["kind"]:
                continue
            if sample.name == "devicepool_lease_wait_seconds_count":
                count = sample.value
            elif sample.name == "devicepool_lease_wait_seconds_sum":
                total = sample.value
    return count, total


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """`workflow.unsafe.is_replaying()`, as the test sets it (no workflow runs here)."""
    state = {"replaying": False}
    monkeypatch.setattr(workflow.unsafe, "is_replaying", lambda: state["replaying"])
    return state


async def test_grants_are_observed_once_each_by_pool_and_kind(live: dict[str, bool]) -> None:
    metrics = Metrics(CollectorRegistry())
    phones = Pool(WORKFLOW_DEVICE_POOL, pool_workflow_id("phones"), metrics)
    browsers = Pool(WORKFLOW_BROWSER_POOL, browser_pool_workflow_id("browsers"), metrics)

    answer = granted("l1", 0.0)
    assert await phones.update(UPDATE_LEASE, answer) is answer  # passed on untouched
    await phones.update(UPDATE_LEASE_CLAIM, granted("l2", 12.5))
    await phones.update(UPDATE_LEASE_CLAIM, granted("l2", 12.5))  # a claim sent again
    await browsers.update(UPDATE_LEASE_CLAIM, granted("l3", 4.0))
    assert observed(metrics, pool="phones", kind="DevicePool") == (2, 12.5)
    assert observed(metrics, pool="browsers", kind="BrowserPool") == (1, 4.0)


async def test_no_grant_no_observation(live: dict[str, bool]) -> None:
    metrics = Metrics(CollectorRegistry())
    phones = Pool(WORKFLOW_DEVICE_POOL, pool_workflow_id("phones"), metrics)
    await phones.update(UPDATE_LEASE, LeaseAnswer(ticket="t1", position=1))  # queued
    await phones.update(UPDATE_LEASE_CLAIM, LeaseAnswer(ended="Unclaimed"))
    await phones.update(UPDATE_RENEW, granted("l1", 0.0))  # a renew is no grant
    await phones.update(UPDATE_LEASE, granted("l2", float("nan")))  # no figure to observe
    await phones.update(UPDATE_LEASE, None)
    assert observed(metrics, pool="phones", kind="DevicePool") == (0, 0)


async def test_a_replayed_grant_is_not_observed(live: dict[str, bool]) -> None:
    metrics = Metrics(CollectorRegistry())
    phones = Pool(WORKFLOW_DEVICE_POOL, pool_workflow_id("phones"), metrics)
    live["replaying"] = True
    await phones.update(UPDATE_LEASE, granted("l1", 0.0))
    # Replayed first, then live (a worker that took the pool over): the live one counts.
    live["replaying"] = False
    await phones.update(UPDATE_LEASE_CLAIM, granted("l2", 3.0))
    assert observed(metrics, pool="phones", kind="DevicePool") == (1, 3.0)


async def test_other_workflows_are_left_alone(live: dict[str, bool]) -> None:
    metrics = Metrics(CollectorRegistry())
    other = Pool("NodeRegistry", "devicepool-node-registry", metrics)
    await other.update(UPDATE_LEASE, granted("l1", 1.0))
    assert not [
        s
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name.startswith("devicepool_lease_wait_seconds_count")
    ]


async def test_an_ask_s_grant_is_observed_once_when_its_holder_reads_it(
    live: dict[str, bool],
) -> None:
    # Asked by signal (`lease_ask`): no update answers the grant; the `lease_ticket` query
    # that shows it to its holder does, also while the worker replays (a query is not).
    metrics = Metrics(CollectorRegistry())
    phones = Pool(WORKFLOW_DEVICE_POOL, pool_workflow_id("phones"), metrics)
    live["replaying"] = True
    answer = granted("l1", 7.5)
    assert await phones.query(QUERY_LEASE_TICKET, answer) is answer  # passed on untouched
    await phones.query(QUERY_LEASE_TICKET, granted("l1", 7.5))  # read again: the same grant
    await phones.query(QUERY_LEASE_TICKET, LeaseAnswer(ticket="a-2", position=1))  # waiting
    await phones.query(QUERY_LEASES, granted("l3", 1.0))  # another query: not a grant read
    assert observed(metrics, pool="phones", kind="DevicePool") == (1, 7.5)
