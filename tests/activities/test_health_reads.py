"""`watch_health` on a worker that does not run the pool's own watch: the provider's read budget.

With several workers, a pool's `watch_devices` and its health check's
`watch_health` often run in different processes. The health watch then has no
listing of the pool's own watch to reuse and reads the provider itself: at
every poll that was 60 more reads an idle pool-hour (120 + 60 = 180, over the
150 budget). Its own reads are now spaced by `own_read_seconds`, while a
device going offline is still seen within that spacing (the workflow keeps it
at most the offline threshold, so replacements stay on time).

Two `DeviceActivities` instances stand for two worker processes (each has its
own memory of listings), against one in-process emulator.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities, devices
from devicepool.activities.models import (
    AccountSettings,
    CreateDeviceInput,
    ListDevicesInput,
    PoolRunInput,
    PoolRunResult,
    WatchDevicesInput,
    WatchHealthInput,
    device_fingerprint,
)
from devicepool.api.names import create_idempotency_key, pool_workflow_id
from devicepool.api.v1beta1 import Platform
from tests.helpers.emulator import BASE_URL, DEV_KEY, Emulator

POOL = "budget"


@pytest.fixture(autouse=True)
def pool_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The health watch asks Temporal whether its pool runs; here it always does.
    async def running(client: Any, input: PoolRunInput) -> PoolRunResult:
        return PoolRunResult(running=True, first_run_id="first", status="RUNNING")

    monkeypatch.setattr(devices.pool_runs, "pool_running", running)


def worker_process(emulator: Emulator) -> DeviceActivities:
    account = AccountSettings(name="default", base_url=BASE_URL, api_key=SecretStr(DEV_KEY))
    return DeviceActivities(
        accounts={"default": account}, proxy_pools={}, transport=emulator.transport
    )


@pytest.fixture
async def two_workers(
    emulator: Emulator,
) -> AsyncIterator[tuple[DeviceActivities, DeviceActivities]]:
    first, second = worker_process(emulator), worker_process(emulator)
    yield first, second
    await first.aclose()
    await second.aclose()


def count_lists(acts: DeviceActivities) -> list[float]:
    """The monotonic times of each provider listing this worker makes."""
    provider = acts._provider("default")
    calls: list[float] = []
    real = provider.list_pool

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        return await real(*args, **kwargs)

    provider.list_pool = counted  # type: ignore[method-assign]
    return calls


async def make_devices(acts: DeviceActivities, count: int) -> list[str]:
    env = ActivityEnvironment()
    ids = []
    for slot in range(count):
        created = await env.run(
            acts.create_device,
            CreateDeviceInput(
                account="default",
                pool=POOL,
                platform=Platform.ANDROID,
                region="us-west",
                os_version="14",
                name=f"{POOL}-{slot}",
                idempotency_key=create_idempotency_key(POOL, 1, slot),
            ),
        )
        ids.append(created.device.id)
    return ids


async def quiet_watch(acts: DeviceActivities, **fields: float) -> WatchDevicesInput:
    """The pool's own watch, knowing the pool as it is (so it polls on, unchanged)."""
    listing = await ActivityEnvironment().run(
        acts.list_devices, ListDevicesInput(account="default", pool=POOL)
    )
    fingerprint = device_fingerprint(listing.devices)
    return WatchDevicesInput(account="default", pool=POOL, fingerprint=fingerprint, **fields)


def health_input(**fields: Any) -> WatchHealthInput:
    return WatchHealthInput(
        account="default",
        pool=POOL,
        pool_run=PoolRunInput(workflow_id=pool_workflow_id(POOL), first_run_id="first"),
        **fields,
    )


def health_env() -> ActivityEnvironment:
    return ActivityEnvironment(client=object())  # type: ignore[arg-type]


async def test_a_health_watch_apart_from_the_pools_watch_spaces_its_own_reads(
    two_workers: tuple[DeviceActivities, DeviceActivities],
) -> None:
    pool_worker, health_worker = two_workers
    await make_devices(pool_worker, 2)
    window, poll, own = 2.0, 0.05, 0.4
    # The fingerprint of what the pool knows: its watch polls on, nothing changes.
    watch = await quiet_watch(pool_worker, poll_seconds=poll / 2, max_seconds=window)
    pool_reads, health_reads = count_lists(pool_worker), count_lists(health_worker)
    health = health_input(
        poll_seconds=poll,
        max_seconds=window,
        reuse_listing_seconds=1.5 * poll / 2,
        own_read_seconds=own,
    )
    pool_answer, health_answer = await asyncio.gather(
        ActivityEnvironment().run(pool_worker.watch_devices, watch),
        health_env().run(health_worker.watch_health, health),
    )
    assert health_answer.devices == 2 and health_answer.suspects == []
    # Every poll read the provider before: ~window / poll = 40 reads here.
    assert 2 <= len(health_reads) <= window / own + 2, health_reads
    gaps = [b - a for a, b in itertools.pairwise(health_reads)]
    assert min(gaps) >= own, gaps
    # The pool's own watch is untouched.
    assert len(pool_reads) >= 5, pool_reads
    assert pool_answer is not None


async def test_beside_the_pools_watch_it_reads_nothing_of_its_own(
    two_workers: tuple[DeviceActivities, DeviceActivities],
) -> None:
    worker, _ = two_workers
    await make_devices(worker, 2)
    window, poll = 1.5, 0.1
    watch = await quiet_watch(worker, poll_seconds=0.05, max_seconds=window)
    reads = count_lists(worker)
    health = health_input(
        poll_seconds=poll, max_seconds=window, reuse_listing_seconds=0.5, own_read_seconds=10.0
    )
    await asyncio.gather(
        ActivityEnvironment().run(worker.watch_devices, watch),
        health_env().run(worker.watch_health, health),
    )
    # The pool's watch lists every 0.05 s; the health watch adds at most its first read.
    assert len(reads) <= window / 0.05 + 2, len(reads)


async def test_a_device_going_offline_is_seen_within_the_own_read_spacing(
    two_workers: tuple[DeviceActivities, DeviceActivities], emulator: Emulator
) -> None:
    pool_worker, health_worker = two_workers
    victim, _ = await make_devices(pool_worker, 2)
    reads = count_lists(health_worker)
    own = 0.6
    health = health_input(poll_seconds=0.05, max_seconds=30, own_read_seconds=own)
    answer = asyncio.ensure_future(health_env().run(health_worker.watch_health, health))
    await asyncio.sleep(0.3)
    (await emulator.control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
    went_offline = time.monotonic()
    found = await asyncio.wait_for(answer, timeout=10)
    seen_after = time.monotonic() - went_offline
    assert [s.id for s in found.suspects] == [victim]
    assert found.checked_at <= datetime.now(UTC)
    # Within a few spacings, not at the end of the watch (30 s): a loaded CI machine took
    # 1.16 s for a 0.6-s spacing, so the bound leaves room for the machine, not the defect.
    assert seen_after <= own + 3.0, seen_after
    assert len(reads) <= 3, reads  # its first read, then one per spacing


async def test_a_change_on_the_pools_listing_is_read_again_before_it_is_answered(
    two_workers: tuple[DeviceActivities, DeviceActivities], emulator: Emulator
) -> None:
    """The check acts on an answer at once (a device whose clock ran out goes, as when
    a pause ends), so an answer is never the pool's listing alone: a device back
    since that listing was made would be terminated (issue 23)."""
    worker, _ = two_workers
    first, second = await make_devices(worker, 2)
    for device_id in (first, second):
        (await emulator.control.post(f"/_emulator/devices/{device_id}/offline")).raise_for_status()
    judged = await health_env().run(worker.watch_health, health_input(once=True))
    assert sorted(s.id for s in judged.suspects) == sorted([first, second])
    # The pool's watch lists mid-recovery (the first back), then the second comes back.
    (await emulator.control.post(f"/_emulator/devices/{first}/online")).raise_for_status()
    await ActivityEnvironment().run(
        worker.list_devices, ListDevicesInput(account="default", pool=POOL)
    )
    (await emulator.control.post(f"/_emulator/devices/{second}/online")).raise_for_status()
    reads = count_lists(worker)
    health = health_input(
        fingerprint=judged.fingerprint,
        poll_seconds=0.05,
        max_seconds=5,
        reuse_listing_seconds=10.0,
        own_read_seconds=10.0,
    )
    found = await health_env().run(worker.watch_health, health)
    # Before: the listing's suspects, the second among them though it is back.
    assert found.suspects == [], found.suspects
    assert found.devices == 2
    assert len(reads) == 1, reads  # the one read that checked the change
