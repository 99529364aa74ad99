"""The orphan sweep: a device whose pool has no running workflow is terminated after the grace.

Against the session's dev server, emulator and workers (conftest.py). Each
test starts the `default` account's janitor as a worker does
(`start_janitors`) with a short grace, and terminates it when done, so no
other test of the session meets it (an xdist worker runs one test at a time,
on a dev server and emulator of its own): the janitor sweeps the whole account.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.activities.models import AccountSettings, LedgerConfig
from devicepool.activities.orphan_models import (
    FindOrphansInput,
    JanitorConfig,
    TerminateOrphansInput,
)
from devicepool.api.names import (
    QUERY_ORPHANS,
    SIGNAL_LEDGER_CONFIGURE,
    TASK_QUEUE,
    WORKFLOW_ACCOUNT_LEDGER,
    health_workflow_id,
    janitor_workflow_id,
    ledger_workflow_id,
    pool_workflow_id,
    provision_workflow_id,
)
from devicepool.client.pool_client import PoolClient
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import create_device, eventually
from devicepool.worker.accounts import start_janitors
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.ledger.state import LedgerInput
from devicepool.workflows.orphans.state import OrphanReport
from devicepool.workflows.reconciler.search_attributes import KEY_ACCOUNT
from tests.helpers.cli import CliRun
from tests.helpers.histories import history_digest
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    CAN_THRESHOLD,
    EMULATOR_URL,
    Workers,
    pool_devices,
    start_pool,
)

pytestmark = pytest.mark.devserver

AUTH = {"Authorization": f"Bearer {ACCOUNTS['default']}"}
Janitor = Callable[..., Awaitable[WorkflowHandle[Any, Any]]]


@pytest.fixture
async def janitor(env: WorkflowEnvironment, workers: Workers) -> AsyncIterator[Janitor]:
    """Start the default account's janitor with a grace (as the worker does); ended after."""
    started: list[WorkflowHandle[Any, Any]] = []

    async def start(grace: float, name: str = "default") -> WorkflowHandle[Any, Any]:
        account = AccountSettings(
            name=name, base_url=EMULATOR_URL, api_key=SecretStr(ACCOUNTS.get(name, "none"))
        )
        await start_janitors(env.client, {name: account}, JanitorConfig(grace_seconds=grace))
        handle = env.client.get_workflow_handle(janitor_workflow_id(name))
        started.append(handle)
        return handle

    yield start
    for handle in started:
        try:
            await handle.terminate("test over")
        except RPCError:
            pass  # already ended


async def report(handle: WorkflowHandle[Any, Any]) -> OrphanReport:
    return await handle.query(QUERY_ORPHANS, result_type=OrphanReport)


async def alive(control: httpx.AsyncClient, device_id: str) -> bool:
    answer = await control.get(f"/api/v1/devices/{device_id}", headers=AUTH)
    return answer.status_code == 200 and answer.json()["status"] not in (
        "terminating",
        "terminated",
    )


async def rent(control: httpx.AsyncClient, pool: str) -> str:
    """A device created for `pool` as a batch would (its labels), outside any pool's state."""
    answer = await create_device(
        control,
        api_key=ACCOUNTS["default"],
        name=f"{pool}-by-hand",
        labels={"pool": pool, "managed-by": "devicepool"},
        idempotency_key=uuid.uuid4().hex,
    )
    answer.raise_for_status()
    return str(answer.json()["id"])


async def status_of(client: Client, workflow_id: str) -> WorkflowExecutionStatus | None:
    return (await client.get_workflow_handle(workflow_id).describe()).status


async def scans_after(handle: WorkflowHandle[Any, Any], count: int) -> Callable[[], Any]:
    """A check that is true once the janitor scanned `count` more times (across runs)."""
    start = datetime.now(UTC)
    seen: list[datetime] = []

    async def check() -> bool:
        scanned = (await report(handle)).scanned_at
        if scanned is not None and scanned > start and (not seen or scanned > seen[-1]):
            seen.append(scanned)
        return len(seen) >= count

    return check


def swept_metric(workers: Workers) -> float:
    counter = workers.activities.metrics.orphans_terminated
    return float(counter.labels(account="default", platform="android")._value.get())


# ---------------------------------------------------------------- a terminated pool


async def test_a_terminated_pools_devices_are_swept_after_the_grace_and_its_children_end(
    env: WorkflowEnvironment,
    workers: Workers,
    control: httpx.AsyncClient,
    pool_name: str,
    janitor: Janitor,
) -> None:
    handle = await start_pool(env.client, pool_name, 2)

    async def converged() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, pool_name)
        return (
            devices if len(devices) == 2 and all(d["status"] == "ready" for d in devices) else None
        )

    devices = {d["id"] for d in await eventually(converged, what="2 ready devices", timeout=30)}
    grace = 3.0
    sweeper = await janitor(grace)
    # Earlier tests on this worker's account may have left orphans (pools terminated by
    # hand): swept by hand before the grace lets the janitor, so the count below is this
    # pool's devices alone.
    await PoolClient(env.client).orphans(delete=True, accounts=["default"])
    before = swept_metric(workers)
    try:
        # A running pool's devices are no orphans, however many scans look.
        await eventually(await scans_after(sweeper, 3), what="three scans", timeout=20)
        assert not {o.id for o in (await report(sweeper)).orphans} & devices

        await handle.terminate("test: a hurried operator")
        terminated_at = datetime.now(UTC)

        async def swept() -> bool:
            return not await pool_devices(control, pool_name)

        await eventually(swept, what="the orphans swept", timeout=grace + 20)
        # Not before the grace: each was first seen orphaned at a scan after
        # the termination and terminated at least `grace` later.
        state = await report(sweeper)
        events = {e.device.id: e for e in state.swept if e.device.pool == pool_name}
        assert set(events) == devices
        for event in events.values():
            assert event.reason == "grace"
            assert event.orphaned_seconds >= grace
            assert (event.at - terminated_at).total_seconds() >= grace - 0.5
            assert event.device.pool_state == "TERMINATED"
        assert state.terminated_total >= 2
        # A scan a second, past the test server's low threshold: the janitor
        # continued-as-new on the way, and its record of the sweep came along.
        info = (await sweeper.describe()).raw_description.workflow_execution_info
        if CAN_THRESHOLD <= 100:  # not when recording one long run
            assert info.execution.run_id != info.first_run_id
        # Nothing left to sweep by hand (an update in the janitor's history too).
        (now,) = await PoolClient(env.client).orphans(delete=True, accounts=["default"])
        assert not {d.id for d in now.terminated} & devices

        # The janitor's current run replays on today's code (the release corpus
        # is recorded by tests/replay/record.py).
        history = await sweeper.fetch_history()
        await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(history)
        assert swept_metric(workers) - before == 2
        # The pool's children end: the health check within a cycle, batches are done.
        health = await eventually(
            lambda: _ended(env.client, health_workflow_id(pool_name)),
            what="the health check ended",
            timeout=FAST.health_seconds + 10,
        )
        assert health == WorkflowExecutionStatus.COMPLETED
        running = [
            w.id
            async for w in env.client.list_workflows(
                f'WorkflowId STARTS_WITH "devicepool/{pool_name}/" '
                "AND ExecutionStatus = 'Running'"
            )
        ]
        assert running == []
    except BaseException:
        print(await history_digest(env.client, sweeper.id))
        raise


async def _ended(client: Client, workflow_id: str) -> WorkflowExecutionStatus | None:
    status = await status_of(client, workflow_id)
    return None if status == WorkflowExecutionStatus.RUNNING else status


# ---------------------------------------------------------------- a running pool's new device


async def test_a_running_pools_device_it_has_not_observed_yet_is_no_orphan(
    env: WorkflowEnvironment,
    workers: Workers,
    control: httpx.AsyncClient,
    pool_name: str,
    janitor: Janitor,
) -> None:
    """Between a create and the pool's next listing a device is in no state: not an orphan.

    The pool runs on a queue no worker polls, so it never observes anything:
    its workflow runs, the device carries its labels, and it is not in its state.
    """
    pool = await start_pool(env.client, pool_name, 1, task_queue=f"nobody-{uuid.uuid4().hex}")
    device = await rent(control, pool_name)
    sweeper = await janitor(1.0)
    try:
        await eventually(await scans_after(sweeper, 4), what="four scans", timeout=20)
        assert await alive(control, device)
        assert device not in {o.id for o in (await report(sweeper)).orphans}

        # Its pool gone, the same device is an orphan and goes after the grace.
        await pool.terminate("test: gone")
        await eventually(lambda: _not(alive(control, device)), what="the orphan swept", timeout=20)
    except BaseException:
        print(await history_digest(env.client, sweeper.id))
        raise


async def _not(check: Awaitable[bool]) -> bool:
    return not await check


# ---------------------------------------------------------------- the command


async def test_orphans_lists_them_with_age_and_cost_and_delete_sweeps_now(
    env: WorkflowEnvironment,
    workers: Workers,
    control: httpx.AsyncClient,
    pool_name: str,
    janitor: Janitor,
) -> None:
    """`PoolClient.orphans()` (what `devicepool orphans` prints) asks the janitor to scan now."""
    running = await start_pool(env.client, pool_name, 1, task_queue=f"nobody-{uuid.uuid4().hex}")
    kept = await rent(control, pool_name)
    gone_pool = f"gone-{uuid.uuid4().hex[:8]}"  # a pool whose workflow never ran here
    orphan = await rent(control, gone_pool)
    await janitor(3600.0)  # the grace never runs out during the test
    client = PoolClient(env.client)
    try:
        (listed,) = await client.orphans(accounts=["default"])
        entries = {o.id: o for o in listed.orphans}
        assert orphan in entries and kept not in entries
        entry = entries[orphan]
        assert (entry.pool, entry.pool_state, entry.platform) == (gone_pool, "NOT_FOUND", "android")
        assert (entry.sweep_at - entry.first_seen_at).total_seconds() == 3600
        assert await alive(control, orphan)  # listing deletes nothing

        (swept,) = await client.orphans(delete=True, accounts=["default"])
        assert orphan in {d.id for d in swept.terminated}
        assert kept not in {d.id for d in swept.terminated}
        assert orphan not in {o.id for o in swept.orphans}
        assert not await alive(control, orphan)
        assert await alive(control, kept)
        assert [e.reason for e in swept.swept if e.device.id == orphan] == ["manual"]
    finally:
        await running.terminate("test over")


async def test_the_cli_lists_orphans_with_cost_and_deletes_them(
    workers: Workers, control: httpx.AsyncClient, janitor: Janitor, cli: CliRun
) -> None:
    gone_pool = f"gone-{uuid.uuid4().hex[:8]}"
    orphan = await rent(control, gone_pool)
    await janitor(3600.0)
    code, out, err = await cli("orphans", "--account", "default", "-o", "json")
    assert code == 0, err
    listed = {o["id"]: o for o in json.loads(out)["orphans"]}
    assert listed[orphan]["pool"] == gone_pool
    assert listed[orphan]["account"] == "default"
    assert listed[orphan]["ageSeconds"] >= 0
    assert listed[orphan]["costUsd"] >= 0
    assert json.loads(out)["pricePerDeviceHourUsd"] == 0.10

    code, out, err = await cli("orphans", "--account", "default", "-o", "table")
    assert code == 0, err
    assert orphan in out and "$0.10 per device-hour" in out

    code, out, err = await cli("orphans", "--account", "default", "--delete", "-o", "table")
    assert code == 0, err
    assert out.startswith("terminated ") and orphan in out
    assert not await alive(control, orphan)

    code, _, err = await cli("orphans", "--account", "nobody", "-o", "json")
    assert code == 1
    # The CLI's own lines (stderr also carries what the in-process workers log).
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "nobody" in line, err


async def test_an_account_whose_scan_fails_is_one_error_line_after_the_others_answers(
    workers: Workers, control: httpx.AsyncClient, janitor: Janitor, cli: CliRun
) -> None:
    """A janitor left for an account no worker serves any more must not hide the rest."""
    orphan = await rent(control, f"gone-{uuid.uuid4().hex[:8]}")
    await janitor(3600.0)
    await janitor(3600.0, "retired")  # the session's workers do not know this account
    argv = ["orphans", "--account", "default", "--account", "retired", "-o", "json"]
    code, out, err = await cli(*argv)
    assert code == 1
    assert orphan in {o["id"] for o in json.loads(out)["orphans"]}
    # The CLI's own lines (stderr also carries what the in-process workers log).
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: account retired: scan failed"), err
    assert await alive(control, orphan)


# ---------------------------------------------------------------- checked again before the DELETE


async def test_terminate_checks_each_device_and_its_pool_again_right_before_the_delete(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """An orphan seen by a scan whose pool is applied again before its grace ends is kept;
    a pool of that name on another account does not protect it (it never lists this one)."""
    activities = ActivityEnvironment(client=env.client)
    sweep = workers.activities
    device = await rent(control, pool_name)
    found = await activities.run(sweep.find_orphans, FindOrphansInput(account="default"))
    assert device in {o.id for o in found.orphans}

    pool = await start_pool(env.client, pool_name, 1, task_queue=f"nobody-{uuid.uuid4().hex}")
    try:
        result = await activities.run(
            sweep.terminate_orphans,
            TerminateOrphansInput(account="default", device_ids=[device, "no-such-device"]),
        )
        assert result.terminated == []
        assert {k.id: (k.why, k.settled) for k in result.kept} == {
            device: (f"pool {pool_name} is running", True),
            "no-such-device": ("already gone", True),
        }
        assert await alive(control, device)
    finally:
        await pool.terminate("test: gone again")

    # The same name, on the other account: this account's device is still an orphan.
    other = await env.client.start_workflow(
        "DevicePool",
        id=pool_workflow_id(pool_name),
        task_queue=f"nobody-{uuid.uuid4().hex}",
        search_attributes=TypedSearchAttributes([SearchAttributePair(KEY_ACCOUNT, "second")]),
    )
    try:
        result = await activities.run(
            sweep.terminate_orphans,
            TerminateOrphansInput(account="default", device_ids=[device], reason="manual"),
        )
        (gone,) = result.terminated
        assert (gone.id, gone.pool, gone.pool_state) == (
            device,
            pool_name,
            "runs on account second",
        )
        assert not await alive(control, device)
    finally:
        await other.terminate("test over")


async def test_a_scan_returns_the_oldest_orphans_first_and_at_most_its_cap(
    env: WorkflowEnvironment,
    workers: Workers,
    control: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However many pools were terminated at once, a scan's answer stays small."""
    import devicepool.activities.orphan_models

    gone = f"gone-{uuid.uuid4().hex[:8]}"
    rented = []
    for _ in range(3):
        rented.append(await rent(control, gone))
        await asyncio.sleep(0.01)  # distinct creation times (the emulator counts in ms)
    activities = ActivityEnvironment(client=env.client)
    before = await activities.run(
        workers.activities.find_orphans, FindOrphansInput(account="default")
    )
    cap = before.orphans_found - 1  # all but the newest: the third one
    monkeypatch.setattr(devicepool.activities.orphan_models, "MAX_ORPHANS_PER_SCAN", cap)
    found = await activities.run(
        workers.activities.find_orphans, FindOrphansInput(account="default")
    )
    assert found.orphans_found == before.orphans_found
    ids = [o.id for o in found.orphans]
    assert len(ids) == cap
    assert rented[0] in ids and rented[1] in ids and rented[2] not in ids
    assert ids == [o.id for o in sorted(found.orphans, key=lambda o: (o.created_at, o.id))]
    await activities.run(
        workers.activities.terminate_orphans,
        TerminateOrphansInput(account="default", device_ids=rented, reason="manual"),
    )


# ---------------------------------------------------------------- children that outlive their pool


async def test_a_terminated_pools_batch_waiting_for_permits_ends_and_rents_nothing_more(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """A batch of a pool that is gone stops at its next look (a permit wait or a grant)
    instead of renting the rest of its slots for nobody when the window opens."""
    ledger = await env.client.start_workflow(
        WORKFLOW_ACCOUNT_LEDGER,
        LedgerInput(account="default"),
        id=ledger_workflow_id("default"),
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal=SIGNAL_LEDGER_CONFIGURE,
        # one create per five minutes: the batch's second and third slots wait
        start_signal_args=[LedgerConfig(capacity=1, window_seconds=300, margin_seconds=0)],
    )
    batch_id = provision_workflow_id(pool_name, 1, 0)
    # A permit wait lasts the startup timeout: a short one, for a look soon after the end.
    settings = FAST.model_copy(update={"startup_timeout_seconds": 5})
    try:
        pool = await start_pool(env.client, pool_name, 3, settings=settings)

        async def one_rented() -> bool:
            return len(await pool_devices(control, pool_name)) == 1

        await eventually(one_rented, what="the window's one create", timeout=20)
        assert await status_of(env.client, batch_id) == WorkflowExecutionStatus.RUNNING
        await pool.terminate("test: a hurried operator")

        ended = await eventually(
            lambda: _ended(env.client, batch_id),
            what="the batch ended",
            timeout=settings.startup_timeout_seconds + 15,
        )
        assert ended == WorkflowExecutionStatus.COMPLETED
        report = await env.client.get_workflow_handle(batch_id).result()
        assert len(report["created"]) == 1
        # A create of the ended batch still on its way would have landed by now.
        await asyncio.sleep(2)
        assert len(await pool_devices(control, pool_name)) == 1
    except BaseException:
        print(await history_digest(env.client, batch_id))
        raise
    finally:
        await ledger.terminate("test over")
        for device in await pool_devices(control, pool_name):
            await control.delete(f"/api/v1/devices/{device['id']}", headers=AUTH)
