"""Worker Versioning: a pool pinned to one build moves to a newer one at its next hand-over.

On a dev server of its own (versioned workers would take the session's queue):
build A runs a pool, build B starts beside it and is promoted, a `wake` signal
makes the pool look again, and it continues as new on B, carrying its state —
no device rented twice, no workflow task failure — and scales on B. Promoting A
again (a rollback) moves it back the same way, its devices kept; it is deleted
on A. The time-skipping server does not support versioning.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE
from devicepool.testing import eventually
from devicepool.worker.build import account_workers, new_worker, pool_queue_workers
from devicepool.worker.versioning import current_build, deployment_config, promote
from devicepool.workflows import WORKFLOWS
from tests.helpers.cli import cli_in_thread
from tests.helpers.histories import task_failures
from tests.helpers.servers import dev_server
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import ACCOUNTS, pool_devices, start_pool

pytestmark = pytest.mark.devserver

DEPLOYMENT = "devicepool-test"
# A wake that reaches the pool before its task sees the promoted build is not a hand-over:
# the pool moves at its next pass, when its watch returns. A 20-s watch (FAST) made each
# move take 20 s in most runs; the move, not the watch, is this test's point.
SETTINGS = FAST.model_copy(update={"watch_max_seconds": 3.0})
# Each wait below lasts seconds (a hand-over, a boot) and each of its checks is two
# describes, a query or a CLI run: twice a second is often enough.
POLL = 0.5


@pytest.fixture
async def server() -> AsyncIterator[WorkflowEnvironment]:
    async with await dev_server() as env:
        yield env


@pytest.fixture
def client(server: WorkflowEnvironment) -> Client:
    return server.client


@pytest.fixture
def upgrade_cli(
    server: WorkflowEnvironment,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Callable[..., Awaitable[dict[str, Any]]]:
    """`devicepool upgrade --deployment-name DEPLOYMENT ARGS -o json` against this server
    (the real CLI, in a thread: a process per poll would cost its imports each time)."""
    run = cli_in_thread(server, monkeypatch, capsys)

    async def upgrade(*args: str) -> dict[str, Any]:
        code, out, err = await run("upgrade", "--deployment-name", DEPLOYMENT, *args, "-o", "json")
        assert code == 0, err
        answer: dict[str, Any] = json.loads(out)
        return answer

    return upgrade


class Build:
    """One build's workers: the versioned workflow queue and, for the first build, the
    unversioned activity queues (one process may poll each of those only once; a second
    build's process would poll them too, serving every build)."""

    def __init__(
        self, client: Client, activities: DeviceActivities, build_id: str, *, first: bool
    ) -> None:
        self.build_id = build_id
        versioned = deployment_config(DEPLOYMENT, build_id)
        if first:
            self.workers = [
                *pool_queue_workers(client, activities, deployment_config=versioned),
                *account_workers(client, activities, list(ACCOUNTS)),
            ]
        else:
            self.workers = [
                new_worker(
                    client,
                    task_queue=TASK_QUEUE,
                    workflows=WORKFLOWS,
                    activities=[*activities.pool_queue_activities(), activities.watch_devices],
                    disable_eager_activity_execution=True,
                    deployment_config=versioned,
                )
            ]
        self.tasks = [asyncio.ensure_future(w.run()) for w in self.workers]

    async def stop(self) -> None:
        for worker in self.workers:
            await worker.shutdown()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def build_of(handle: WorkflowHandle[Any, Any]) -> str:
    """The build the pool's current run is pinned to."""
    described = await handle.describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return str(info.deployment_version.build_id)


async def test_a_pinned_pool_moves_to_the_promoted_build_and_back_at_its_hand_overs(
    client: Client,
    worker: DeviceActivities,
    control: Any,
    upgrade_cli: Callable[..., Awaitable[dict[str, Any]]],
) -> None:
    name = f"versioned-{uuid.uuid4().hex[:6]}"
    a = Build(client, worker, "build-a", first=True)
    b: Build | None = None
    try:
        await promote(client, DEPLOYMENT, "build-a")
        handle = await start_pool(client, name, 2, settings=SETTINGS)
        first_run = (await handle.describe()).run_id
        assert first_run is not None

        async def ready(want: int) -> bool:
            status = await client.get_workflow_handle(handle.id).query("status")
            return bool(status["readyDevices"] == want)

        await eventually(lambda: ready(2), timeout=60, every=POLL, what="2 ready on build A")
        assert await build_of(handle) == "build-a"

        b = Build(client, worker, "build-b", first=False)

        # The operator's step: promote B and wake the pools (`devicepool upgrade`).
        # As the refusal tells an operator: again once B's workers have polled (under load
        # their first poll can come after this line).
        async def promote_b() -> dict[str, Any] | None:
            try:
                return await upgrade_cli("--build-id", "build-b")
            except AssertionError as refused:
                if "no worker of that build has polled" in str(refused):
                    return None
                raise

        promoted = await eventually(promote_b, timeout=30, every=POLL, what="B promoted")
        assert promoted["currentBuild"] == "build-b"
        assert await current_build(client, DEPLOYMENT) == "build-b"

        latest = client.get_workflow_handle(handle.id)

        async def moved() -> bool:
            described = await latest.describe()
            return described.run_id != first_run and await build_of(latest) == "build-b"

        await eventually(moved, timeout=60, every=POLL, what="the pool's new run on build B")

        async def none_behind() -> bool:
            return (await upgrade_cli())["poolsBehind"] == []

        await eventually(none_behind, timeout=30, every=POLL, what="upgrade to list no pool behind")
        await latest.execute_update("scale_update", {"replicas": 3})
        await eventually(lambda: ready(3), timeout=60, every=POLL, what="3 ready on build B")
        devices = await pool_devices(control, name)
        assert len(devices) == 3  # nothing rented twice across the move

        # Rolling back is promoting the old build again: the pool moves back the same way.
        on_b = (await latest.describe()).run_id
        rolled_back = await upgrade_cli("--build-id", "build-a")
        assert rolled_back["currentBuild"] == "build-a"

        async def moved_back() -> bool:
            described = await latest.describe()
            return described.run_id != on_b and await build_of(latest) == "build-a"

        await eventually(
            moved_back, timeout=60, every=POLL, what="the pool's next run back on build A"
        )
        await eventually(lambda: ready(3), timeout=60, every=POLL, what="3 still ready on build A")
        kept = sorted(d["id"] for d in await pool_devices(control, name))
        assert kept == sorted(d["id"] for d in devices)  # the same three, none rented again
        await latest.cancel()
        await eventually(lambda: _gone(control, name), timeout=60, every=POLL, what="teardown")
        assert await task_failures(client, handle.id) == []  # in both runs of the chain
    finally:
        await a.stop()
        if b is not None:
            await b.stop()


async def _gone(control: Any, name: str) -> bool:
    return not [d for d in await pool_devices(control, name) if d["status"] != "terminating"]
