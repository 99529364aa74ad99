"""Horizontal workers: three `devicepool worker` processes share the pools; two die mid scale-up.

A real Temporal dev server, the emulator and three real worker processes (the
production entry point, `python -m devicepool.client worker --config ...`) on free ports.
Three pools scale up; one worker is SIGKILLed once the creates have started,
a pool is scaled further, a second worker is SIGKILLed halfway through, and
the last worker alone must converge every pool to exactly its replicas. The
emulator's ground truth then shows no duplicate (accepted creates == devices,
one device per slot) and no orphan (no device outside the pools, nothing
terminated).

Kept fast: provisioning takes 1 s, the account window is 300 a minute (so the
20 creates take a few seconds and the kills really land in the middle), resync
every second, and an 8 s startup timeout, which is also each create's whole
budget: a create caught on a killed worker is given up after 8 s instead of
its 30 s start-to-close timeout, and the pool re-plans the slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from devicepool.api.loader import load_manifests_text
from devicepool.client.pool_client import PoolClient
from devicepool.connect import connect
from devicepool.testing import pool_yaml
from tests.helpers.cluster import QUICK_INTERVALS, Cluster, running_cluster, until, worker_ready
from tests.helpers.device_hours import DeviceHours

# Above the sum of the test's own waits (30 + 20 + 20 + 30 + 1.5 s) plus the
# stack's start and stop: a slow step fails with its own message ("timed out
# waiting for ...", with the logs), never in a thread dump from pytest-timeout.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

API_KEY = "three-workers-key"
CREATES_PER_MINUTE = 300
POOLS = {"hw-a": 6, "hw-b": 6, "hw-c": 6}
SCALED = ("hw-a", 8)  # scaled up after the first kill, while one worker is down


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path,
        api_key=API_KEY,
        creates_per_minute=CREATES_PER_MINUTE,
        provision_seconds=1,
        intervals=QUICK_INTERVALS,
    ) as cluster:
        for _ in range(3):
            cluster.start_worker()
        yield cluster


async def _history_tail(client: Client, name: str, events: int = 20) -> str:
    """The last events of a pool's history, for a failure message (what was it waiting on?)."""
    history = await client.get_workflow_handle(f"devicepool/{name}").fetch_history()
    lines = [f"--- history of devicepool/{name} (last {events})"]
    for event in history.events[-events:]:
        what = event.WhichOneof("attributes") or ""
        attributes = getattr(event, what, None)
        detail = getattr(getattr(attributes, "activity_type", None), "name", "") or getattr(
            attributes, "signal_name", ""
        )
        lines.append(
            f"{event.event_id} {event.event_time.ToDatetime():%H:%M:%S.%f} "
            f"{EventType.Name(event.event_type)} {detail}"
        )
    return "\n".join(lines) + "\n"


async def test_survivor_converges_every_pool_after_two_workers_die(
    cluster: Cluster, device_hours: DeviceHours
) -> None:

    async def all_ready() -> bool:
        for process, port in cluster.workers:
            assert process.poll() is None, cluster.logs()
            if not await worker_ready(port):
                return False
        return True

    await until(all_ready, timeout=30, what="three workers ready")
    client = await connect(address=cluster.address)
    pools = PoolClient(client)
    device_hours.start(await cluster.stats())
    for name, replicas in POOLS.items():
        (pool,) = load_manifests_text(
            pool_yaml(name, provider="bitcloudphone", replicas=replicas), source=name
        )
        device_hours.want(name, replicas)
        await pools.apply(pool)

    async def accepted_at_least(count: int) -> int | None:
        accepted = int((await cluster.stats())["creates"]["accepted"])
        return accepted if accepted >= count else None

    # First death: as soon as the scale-ups are under way.
    await until(lambda: accepted_at_least(3), timeout=20, what="the first creates")
    first, _ = cluster.workers[0]
    first.kill()
    name, replicas = SCALED
    device_hours.want(name, replicas)
    await pools.scale(name, replicas)
    expected = {**POOLS, name: replicas}
    total = sum(expected.values())

    # Second death: halfway through what is left.
    await until(lambda: accepted_at_least(total // 2), timeout=20, what="half the creates")
    second, _ = cluster.workers[1]
    second.kill()
    # On a busy machine the last creates may already have landed by now; the
    # first kill always lands mid scale-up, and the assertions below hold either way.
    survivor, _ = cluster.workers[2]

    seen: dict[str, Any] = {}

    async def converged() -> dict[str, Any] | None:
        assert survivor.poll() is None, cluster.logs()
        for pool_name, want in expected.items():
            status = await pools.get(pool_name)
            seen[pool_name] = {k: v for k, v in status.items() if k != "conditions"}
            if status.get("readyDevices") != want or status.get("desiredReplicas") != want:
                return None
        stats = seen["stats"] = await cluster.stats()
        return stats if stats["devices"]["live"] == total else None

    try:
        stats = await until(converged, timeout=30, what="every pool at exactly its replicas")
    except AssertionError as err:
        seen["stats"] = await cluster.stats()
        histories = [await _history_tail(client, p) for p in expected]
        raise AssertionError(f"{err}\n{seen}\n{''.join(histories)}\n{cluster.logs()}") from None
    assert first.poll() is not None and second.poll() is not None

    # Ground truth: exactly the replicas, created once each, nothing torn down.
    await asyncio.sleep(1.5)  # a late duplicate create would show up within a resync
    stats = await cluster.stats()
    assert stats["devices"]["byPool"] == expected
    assert stats["devices"]["live"] == total
    assert stats["creates"]["accepted"] == total, (
        stats,
        {p: await cluster.devices(p) for p in expected},
    )
    assert stats["terminations"] == 0
    device_hours.finish(stats)  # creates accepted == devices needed (the total), device-hours
    for pool_name, want in expected.items():
        devices = await cluster.devices(pool_name)
        assert len(devices) == want
        slots = [d["labels"].get("devicepool-slot") for d in devices]
        assert len(set(slots)) == want, f"{pool_name}: a slot has two devices: {slots}"
        assert {d["status"] for d in devices} <= {"ready", "busy"}
