"""An upgrade from the v0.1.0 release: its worker dies mid scale-up, this build carries on.

The commit tagged `v0.1.0` is exported with `git archive` and its worker runs with
this environment's dependencies (its `devicepool` package first on `PYTHONPATH`),
unversioned, as v0.1.0 shipped. Two pools scale up on it; it is SIGKILLed with
creates in flight; a worker of this build takes over. Every pool must converge,
scale and delete with nothing duplicated or lost (the emulator's ground truth),
and no workflow task may fail in any run of any pool: this build replays what
v0.1.0 recorded and reads the state and batch inputs it wrote. A scale-down
carried out on v0.1.0 must replay here too, and a rollback back to v0.1.0 works
for pools this build only watched.

The module's tests share the exported release and one Temporal dev server, each
test in a namespace of its own with its own emulator and workers (a server's
start is ~1.4 CPU-s; the emulator's ground truth is per test).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from devicepool.api.loader import load_manifests_text
from devicepool.client.pool_client import PoolClient
from devicepool.connect import connect
from devicepool.testing import pool_yaml
from tests.helpers.cluster import (
    QUICK_INTERVALS,
    Cluster,
    TemporalServer,
    running_cluster,
    temporal_server,
    until,
    worker_ready,
)
from tests.helpers.histories import task_failures

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
# The commit tagged v0.1.0 (CHANGELOG.md); by hash, as a clone may come without tags.
RELEASE = "8a87418db561fad6f289d0a486deca8abd45ae91"
API_KEY = "upgrade-key"
POOLS = {"up-a": 4, "up-b": 4}  # 8 creates, 3 of them on v0.1.0 before its kill
# One namespace a test on the module's server.
NAMESPACES = ("carry-on", "rollback")


def export(release: str, into: Path) -> Path:
    """`git archive` of `release` unpacked into `into` (its symlinked layer folders kept)."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{release}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(f"commit {release} (v0.1.0) is not in this clone's history")
    archive = into.with_suffix(".tar")
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), release],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="tar")
    # The release's package, not this checkout's, is what a worker started from it imports
    # (v0.1.0's pool workflow was one module, `workflows/pool.py`).
    where = subprocess.run(
        [sys.executable, "-c", "import devicepool.workflows.pool as m; print(m.__file__)"],
        env={**os.environ, "PYTHONPATH": str(into)},
        cwd=into,  # not the checkout, whose `devicepool/` would come first
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(into)) and where.endswith("workflows/pool.py"), where
    return into


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export(RELEASE, tmp_path_factory.mktemp("v0.1.0") / "release")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalServer]:
    with temporal_server(tmp_path_factory.mktemp("temporal"), namespaces=NAMESPACES) as server:
        yield server


async def _task_identities(client: Client, workflow_id: str) -> str:
    """The identities of the workers that completed the latest run's workflow tasks."""
    seen = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            seen.append(event.workflow_task_completed_event_attributes.identity)
    return " ".join(seen)


async def test_pools_of_v0_1_0_carry_on_under_this_build(
    tmp_path: Path, release: Path, server: TemporalServer
) -> None:
    with running_cluster(
        tmp_path,
        api_key=API_KEY,
        creates_per_minute=30,  # a create every 2 s: the kill lands mid scale-up
        provision_seconds=1,
        intervals=QUICK_INTERVALS,
        server=server,
        namespace="carry-on",
    ) as cluster:
        await _run(cluster, release)


async def _run(cluster: Cluster, source: Path) -> None:
    old, old_port = cluster.start_worker(source=source)
    await until(lambda: worker_ready(old_port), timeout=40, what="the v0.1.0 worker ready")
    client = await connect(address=cluster.address, namespace=cluster.namespace)
    pools = PoolClient(client)
    for name, replicas in POOLS.items():
        (pool,) = load_manifests_text(
            pool_yaml(name, provider="bitcloudphone", replicas=replicas), source=name
        )
        await pools.apply(pool)

    async def accepted_at_least(count: int) -> int | None:
        accepted = int((await cluster.stats())["creates"]["accepted"])
        return accepted if accepted >= count else None

    await until(lambda: accepted_at_least(3), timeout=40, what="the first creates on v0.1.0")
    old.kill()
    old.wait(timeout=10)
    new, new_port = cluster.start_worker()
    await until(lambda: worker_ready(new_port), timeout=40, what="this build's worker ready")
    total = sum(POOLS.values())

    async def converged(expected: dict[str, int]) -> bool:
        assert new.poll() is None, cluster.logs()
        for name, want in expected.items():
            status = await pools.get(name)
            if status.get("readyDevices") != want:
                return False
        stats = await cluster.stats()
        return bool(stats["devices"]["live"] == sum(expected.values()))

    try:
        await until(lambda: converged(POOLS), timeout=90, what="every pool converged on this build")
        await pools.scale("up-a", 6)
        scaled = {**POOLS, "up-a": 6}
        await until(lambda: converged(scaled), timeout=60, what="the scale-up on this build")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{cluster.logs()}") from None
    await asyncio.sleep(1.5)  # a late duplicate create would show up within a resync
    stats = await cluster.stats()
    assert stats["creates"]["accepted"] == total + 2, stats  # nothing rented twice
    assert stats["terminations"] == 0  # nothing lost and replaced
    for name in POOLS:
        slots = [d["labels"].get("devicepool-slot") for d in await cluster.devices(name)]
        assert len(set(slots)) == len(slots), f"{name}: a slot has two devices: {slots}"

    for name in POOLS:
        await pools.delete(name)

    async def all_gone() -> bool:
        return bool((await cluster.stats())["devices"]["live"] == 0)

    await until(all_gone, timeout=60, what="every device torn down")
    failures = []
    for name in POOLS:
        failures += await task_failures(client, f"devicepool/{name}")
    assert failures == [], "\n".join(failures)


async def test_a_scale_down_replays_and_a_rollback_to_v0_1_0_keeps_a_watched_pool(
    tmp_path: Path, release: Path, server: TemporalServer
) -> None:
    """Two pools on v0.1.0, one cluster (a worker's start is ~1.5 CPU-s): `down` is scaled
    down there, `back` goes to this build and back to v0.1.0.

    `down`: five ready, two of them busy, scaled to 1 on v0.1.0; then this build takes
    over. The pass that terminates the three idle ones stays `ScalingDown` before and
    after, so what changed since v0.1.0 in that pass (the status made after its
    terminations, the terminated devices out of its view) is all the difference.
    This build's first task replays v0.1.0's passes: no workflow task may fail
    (tests/replay/histories/v0.1.0/upgrade/ holds such histories for every CI run).
    It is deleted and gone before the rollback.

    `back`: from this build back to v0.1.0, for a pool that never continued-as-new here.
    What a rollback can undo: pools this build only watched (no batch started, no
    continue-as-new) go back to v0.1.0 and scale there, because this build issues
    the same commands v0.1.0 recorded. What it cannot: a provisioning batch this
    build started carries its device template whole, which v0.1.0 cannot decode,
    nor state this build handed over at a continue-as-new (docs/operations.md).
    """
    with running_cluster(
        tmp_path,
        api_key=API_KEY,
        creates_per_minute=300,
        provision_seconds=1,
        intervals=QUICK_INTERVALS,
        server=server,
        namespace="rollback",
    ) as cluster:
        old, port = cluster.start_worker(source=release)
        await until(lambda: worker_ready(port), timeout=40, what="the v0.1.0 worker ready")
        client = await connect(address=cluster.address, namespace=cluster.namespace)
        pools = PoolClient(client)
        for name, replicas in (("back", 3), ("down", 5)):
            (pool,) = load_manifests_text(
                pool_yaml(name, provider="bitcloudphone", replicas=replicas), source=name
            )
            await pools.apply(pool)

        async def counted(name: str, **want: int) -> bool:
            status = await pools.get(name)
            return all(status.get(key, 0) == value for key, value in want.items())

        async def live(name: str, count: int) -> bool:
            return bool((await cluster.stats())["devices"]["byPool"].get(name, 0) == count)

        async def sessions(device_ids: list[str], active: bool) -> None:
            async with httpx.AsyncClient(base_url=cluster.emulator, timeout=5) as http:
                for device_id in device_ids:
                    session = f"/_emulator/devices/{device_id}/session"
                    (await http.post(session, json={"active": active})).raise_for_status()

        await until(lambda: counted("back", readyDevices=3), timeout=60, what="3 ready on v0.1.0")
        await until(lambda: counted("down", readyDevices=5), timeout=60, what="5 ready on v0.1.0")
        busy = [d["id"] for d in await cluster.devices("down")][:2]
        await sessions(busy, True)
        await until(lambda: counted("down", busyDevices=2), timeout=30, what="2 busy on v0.1.0")
        await pools.scale("down", 1)
        await until(lambda: live("down", 2), timeout=30, what="3 idle ones gone on v0.1.0")
        await until(
            lambda: counted("down", readyDevices=0, busyDevices=2),
            timeout=30,
            what="0 ready, 2 busy",
        )
        await asyncio.sleep(3)  # the passes after the scale-down, on v0.1.0
        old.terminate()
        old.wait(timeout=20)
        new, port = cluster.start_worker()
        await until(lambda: worker_ready(port), timeout=40, what="this build's worker ready")
        await sessions(busy, False)
        await pools.scale("down", 2)
        # This build takes `back` over too: a device turns busy, its watch answers, and
        # this build's worker runs the pool's next workflow tasks.
        (device, *_) = await cluster.devices("back")
        await sessions([device["id"]], True)

        async def worked_on_this_build() -> bool:
            return f":{new.pid}" in await _task_identities(client, "devicepool/back")

        try:
            await until(
                lambda: counted("down", readyDevices=2), timeout=60, what="2 ready on this build"
            )
            await until(worked_on_this_build, timeout=30, what="a pool task on this build")
        except AssertionError as err:
            failures = await task_failures(client, "devicepool/down")
            raise AssertionError(f"{err}\n{failures}\n{cluster.logs()}") from None
        await pools.delete("down")
        await until(lambda: live("down", 0), timeout=60, what="down's devices torn down")

        async def closed(workflow_id: str) -> bool:
            described = await client.get_workflow_handle(workflow_id).describe()
            return described.status != WorkflowExecutionStatus.RUNNING

        await until(lambda: closed("devicepool/down"), timeout=30, what="down's run closed")
        assert await task_failures(client, "devicepool/down") == []

        new.terminate()
        new.wait(timeout=20)
        old, port = cluster.start_worker(source=release)
        await until(lambda: worker_ready(port), timeout=40, what="v0.1.0 back")
        await pools.scale("back", 5)

        async def ready(want: int) -> bool:
            status = await pools.get("back")
            return bool(status.get("readyDevices", 0) + status.get("busyDevices", 0) == want)

        try:
            await until(lambda: ready(5), timeout=60, what="the scale-up back on v0.1.0")
        except AssertionError as err:
            failures = []
            async for wf in client.list_workflows():
                failures += await task_failures(client, wf.id)
            status = await pools.get("back")
            raise AssertionError(f"{err}\n{failures}\n{status}\n{cluster.logs()}") from None
        stats = await cluster.stats()
        # 5 for `down` and 5 for `back`, each once; `down`'s 3 idle and 2 busy ended.
        assert stats["creates"]["accepted"] == 5 + 5 and stats["terminations"] == 3 + 2, stats
        await pools.delete("back")
        assert await task_failures(client, "devicepool/back") == []
