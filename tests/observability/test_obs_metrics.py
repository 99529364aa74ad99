"""Each metric's value after a scripted scenario on the production worker wiring.

Scale up, a 429 storm, a device that fails to boot and is replaced, deletion;
the gauges must follow the pool through visibility and vanish with it, and the
reconcile histogram must not move when the pool's history is replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.worker import Replayer

from devicepool import testing as waits
from devicepool.activities.metrics import Metrics
from devicepool.api import parse_pool
from devicepool.api.names import (
    SIGNAL_SCALE,
    TASK_QUEUE,
    UPDATE_LEASE,
    UPDATE_RELEASE,
    pool_workflow_id,
)
from devicepool.api.v1beta1 import ObjectMeta
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import pool_manifest
from devicepool.worker.metrics import LeaseWaitInterceptor, ReconcileInterceptor
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.reconciler.lease_messages import (
    LeaseAnswer,
    LeaseRequest,
    ReleaseAnswer,
    ReleaseRequest,
)
from tests.helpers import programs
from tests.helpers.obs_stack import OBS_SETTINGS, ObsStack

# Above the scenario's own waits (eight of at most 15 s each): a slow step fails
# with its own "timed out waiting for ..." message, not a pytest-timeout dump.
pytestmark = [pytest.mark.devserver, pytest.mark.timeout(150)]

POOL = "obs-metrics"
# Boots fail until the scenario sees the first replacement counted and lifts the
# fault; on a busy machine more of them can fail in between. The default limit
# (3 in a row) then pauses creates for the back-off (30 s, longer than the wait
# for 3 ready: seen in a `make test` at -n 6). The back-off has its own tests
# (tests/workflows/test_pool_outage.py); here the streak never trips it.
SETTINGS = OBS_SETTINGS.model_copy(update={"failure_streak_limit": 100})


# The scenario's waits: 15 s each (see the timeout above), a scrape every half second.
eventually = functools.partial(waits.eventually, timeout=15, every=0.5)


async def start_pool(stack: ObsStack, name: str, replicas: int) -> WorkflowHandle[Any, Any]:
    spec = parse_pool(pool_manifest(name, replicas=replicas)).spec
    return await stack.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name=name), spec=spec, settings=SETTINGS),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


def labels(**kv: str) -> dict[str, str]:
    return {"pool": POOL, "platform": "android", "kind": "DevicePool", **kv}


async def test_pool_metrics_follow_the_scenario(obs_stack: ObsStack) -> None:
    stack = obs_stack
    handle = await start_pool(stack, POOL, 2)
    try:
        await _scenario(stack, handle)
    finally:
        # Deleted already when the scenario got that far; else the next test
        # (or the next --count run) would find its name taken.
        with contextlib.suppress(Exception):
            await handle.cancel()


async def _scenario(stack: ObsStack, handle: WorkflowHandle[Any, Any]) -> None:

    async def serving(n: int) -> bool:
        s = await stack.samples()
        key = frozenset(labels().items())
        return (
            s.get(("devicepool_replicas_desired", key)) == n
            and s.get(("devicepool_replicas_ready", key)) == n
            and s.get(("devicepool_devices", frozenset(labels(status="ready").items()))) == n
        )

    async def ready_phase() -> bool:
        return await stack.value("devicepool_pool_phase", **labels(phase="Ready")) == 1

    # Boots, a listing and a collector refresh: on a loaded machine more than 15 s.
    await eventually(lambda: serving(2), what="2 ready in the gauges", timeout=40)
    # The phase turns Ready once the batch has reported too (its devices were
    # counted ready by the pool's listing first): a pass later, maybe.
    await eventually(ready_phase, what="phase Ready in the gauges")
    assert await stack.value("devicepool_pool_condition", **labels(type="Ready")) == 1
    assert (await stack.value("devicepool_provisioning_seconds_count") or 0) >= 2
    assert (await stack.value("devicepool_reconcile_duration_seconds_count") or 0) >= 1

    # Scale up, with every boot failing: the failed device is removed and replaced.
    await stack.faults(provisionFailureRate=1.0)
    await handle.signal(SIGNAL_SCALE, {"replicas": 3})
    await eventually(
        lambda: stack.value("devicepool_replacements_total", pool=POOL, reason="failed"),
        what="a replacement of the failed device",
    )
    await stack.faults()
    await eventually(lambda: serving(3), what="3 ready after the scale-up")

    # A 429 storm on the provider: counted by type, retried, survived.
    before = await stack.value("devicepool_api_errors_total", type="rate_limited") or 0
    await stack.faults(rateLimitRate=0.7)
    try:
        await eventually(
            lambda: _above(stack, "devicepool_api_errors_total", before, type="rate_limited"),
            what="rate_limited errors counted",
        )
    finally:
        await stack.faults()
    listed = await stack.value("devicepool_api_requests_total", operation="GET /devices")
    assert listed is not None and listed > 0, listed

    # One device goes offline past the threshold: the health check replaces it.
    async with httpx.AsyncClient(base_url=stack.emulator_url, timeout=5) as http:
        status = await handle.query("status")
        victim = status["deviceIds"][0]
        (await http.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
    await eventually(
        lambda: stack.value("devicepool_replacements_total", pool=POOL, reason="offline"),
        what="the offline device counted as a replacement",
    )
    await eventually(lambda: serving(3), what="3 ready after the replacement")

    # A lease granted at once: its wait observed (0), the lease gauge counts it.
    lease = await handle.execute_update(
        UPDATE_LEASE, LeaseRequest(holder="obs"), result_type=LeaseAnswer
    )
    assert lease.granted is not None, lease
    # The Web UI details list it at once (the grant rewrote them: no pass needed).
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**Leases** · 1 held · 0 waiting" in meta.current_details
    assert f"- `{lease.granted.device}` · `obs` · until " in meta.current_details

    async def leased(n: int) -> bool:
        s = await stack.samples()
        waits = frozenset({"pool": POOL, "kind": "DevicePool"}.items())
        return (
            s.get(("devicepool_leases_active", frozenset(labels().items()))) == n
            and s.get(("devicepool_lease_wait_seconds_count", waits)) == 1
            and s.get(("devicepool_lease_wait_seconds_sum", waits)) == 0
        )

    await eventually(lambda: leased(1), what="the lease in the gauge and the wait histogram")
    # Released, so the deletion below waits for no lease (the gauge's 0: test_obs_lease_gauges).
    await handle.execute_update(
        UPDATE_RELEASE, ReleaseRequest(lease=lease.granted.lease), result_type=ReleaseAnswer
    )

    # Replaying the pool's history with the interceptor must record nothing.
    # Up to its last completed workflow task: a history fetched while the pool
    # is inside a task ends with that task's start, and the replayer runs such
    # a trailing task as new (not replaying), as a worker would.
    replay_metrics = Metrics(CollectorRegistry())
    history = _completed_tasks_only(await handle.fetch_history())
    await Replayer(
        workflows=WORKFLOWS,
        data_converter=DATA_CONVERTER,
        interceptors=[ReconcileInterceptor(replay_metrics), LeaseWaitInterceptor(replay_metrics)],
    ).replay_workflow(history)
    assert _count(replay_metrics) == 0
    assert "devicepool_lease_wait_seconds_count" not in _names(replay_metrics)

    # Deleted: every series of the pool disappears.
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    async def gone() -> bool:
        text = await stack.scrape_text()
        return f'pool="{POOL}",platform' not in text

    await eventually(gone, what="the deleted pool's series to vanish")
    text = await stack.scrape_text()
    assert "devicepool_replicas_desired" in text  # the family is still served
    assert "temporal_" in text  # the SDK's own metrics on the same endpoint


async def _above(stack: ObsStack, name: str, floor: float, **labels: str) -> bool:
    return (await stack.value(name, **labels) or 0) > floor


def _completed_tasks_only(history: WorkflowHistory) -> WorkflowHistory:
    """`history` cut after its last completed workflow task."""
    events = list(history.events)
    last = max(
        i
        for i, event in enumerate(events)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    return WorkflowHistory(history.workflow_id, events[: last + 1])


def _count(metrics: Metrics) -> float:
    """The reconcile histogram's count; a missing sample (a renamed metric) fails."""
    names = []
    for family in metrics.registry.collect():
        for sample in family.samples:
            names.append(sample.name)
            if sample.name == "devicepool_reconcile_duration_seconds_count":
                return sample.value
    raise AssertionError(f"no devicepool_reconcile_duration_seconds_count among {names}")


def _names(metrics: Metrics) -> set[str]:
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


async def test_probes(obs_stack: ObsStack) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.get(f"{obs_stack.metrics_url}/healthz")).status_code == 200
        ready = await http.get(f"{obs_stack.metrics_url}/readyz")
        assert ready.status_code == 200, ready.text


async def test_promtool_check_metrics_on_a_real_scrape(obs_stack: ObsStack, tmp_path: Path) -> None:
    promtool = programs.promtool()
    text = await obs_stack.scrape_text()
    assert "devicepool_api_errors_total" in text
    (tmp_path / "scrape.txt").write_text(text)
    proc = await asyncio.create_subprocess_exec(
        promtool,
        "check",
        "metrics",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(text.encode()), 30)
    assert proc.returncode == 0, (out + err).decode()


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _names_used_by_dashboard_and_rules() -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "devicepool-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = (DEPLOY / "prometheus" / "devicepool-rules.yaml").read_text()
    return set(re.findall(r"\b(devicepool_[a-z_]+)", " ".join(exprs) + rules))


async def test_dashboard_and_rules_read_only_what_a_real_scrape_serves(
    obs_stack: ObsStack,
) -> None:
    """Every `devicepool_*` series the dashboard and the alert rules read is served by a
    real worker's `/metrics` (a renamed metric breaks a panel or silences an alert), and
    the worker's own gauges say what they are for."""
    # A pool of its own, so the pool gauges have something to count.
    handle = await start_pool(obs_stack, "obs-scrape", 0)
    try:

        async def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
            s = await obs_stack.samples()
            return s if (s.get(("devicepool_pools", frozenset())) or 0) >= 1 else None

        samples = await eventually(counted, what="devicepool_pools counting the running pool")
        assert samples[("devicepool_visibility_up", frozenset())] == 1
        # `/readyz` is 200 in test_probes: every queue polls, and the gauge agrees.
        assert samples[("devicepool_worker_polling", frozenset())] == 1
        text = await obs_stack.scrape_text()
        families = {f.name: f.type for f in text_string_to_metric_families(text)}
        served = {name for name, _ in samples}
        for family, kind in families.items():
            # A labelled family with no sample yet still declares what it will serve.
            served |= {
                "counter": {f"{family}_total"},
                "histogram": {f"{family}_bucket", f"{family}_count", f"{family}_sum"},
            }.get(kind, {family})
        used = _names_used_by_dashboard_and_rules()
        assert {"devicepool_worker_polling", "devicepool_pool_condition"} <= used
        assert used <= served, sorted(used - served)
    finally:
        await handle.cancel()
