"""A long watch whose workflow ended while it was being dropped ends quietly.

A health check drops its watch (a config change) and starts another; if the
check then ends before the dropped one hears its cancel, the server answers its
next heartbeat with "not found" and the SDK cancels it for that reason. Raised
as a plain cancellation, the SDK logged it as a failed activity with a
traceback (the end of every `bench/cloud_phones.py` run). Nobody is left to
answer: it ends as a benign failure (logged at debug), while a cancel that was
asked for still ends as a cancellation.

"Not found" also answers the heartbeat of an attempt the server timed out (the
worker's event loop stalled past the heartbeat timeout) while the workflow runs
on: that attempt is no longer the current one. Then it is no benign end: the
watch logs a warning with the traceback and ends cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.activity import ActivityCancellationDetails
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory, CancelledError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities, watches
from devicepool.activities.models import WatchDevicesInput, device_fingerprint
from devicepool.api.errors import ErrorType
from tests.activities.test_health_reads import (
    POOL,
    health_input,
    pool_still_runs,  # noqa: F401  (autouse fixture: the pool runs)
    worker_process,
)
from tests.helpers.emulator import Emulator


@pytest.fixture
async def acts(emulator: Emulator) -> AsyncIterator[DeviceActivities]:
    worker = worker_process(emulator)
    yield worker
    await worker.aclose()


def _watches(acts: DeviceActivities) -> dict[str, tuple[Callable[..., Awaitable[Any]], Any]]:
    return {
        "health": (acts.watch_health, health_input(poll_seconds=0.05, max_seconds=30)),
        "devices": (
            acts.watch_devices,
            WatchDevicesInput(
                account="default",
                pool=POOL,
                fingerprint=device_fingerprint([]),  # what it lists: it polls on
                poll_seconds=0.05,
                max_seconds=30,
            ),
        ),
    }


class Temporal:
    """What Temporal says of the watch's own workflow run (`describe`), and who asked."""

    def __init__(self, status: WorkflowExecutionStatus | None) -> None:
        self.status = status  # None: not found
        self.asked: list[tuple[str, str | None]] = []

    def get_workflow_handle(self, workflow_id: str, *, run_id: str | None = None) -> Any:
        self.asked.append((workflow_id, run_id))

        async def describe() -> Any:
            if self.status is None:
                raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
            return SimpleNamespace(status=self.status)

        return SimpleNamespace(describe=describe)


async def _cancelled(
    acts: DeviceActivities,
    which: str,
    details: ActivityCancellationDetails,
    temporal: Temporal | None = None,
) -> BaseException:
    fn, arg = _watches(acts)[which]
    env = ActivityEnvironment(client=temporal or Temporal(None))  # type: ignore[arg-type]
    running = asyncio.ensure_future(env.run(fn, arg))
    await asyncio.sleep(0.3)
    env.cancel(details)
    with pytest.raises(BaseException) as caught:
        await running
    return caught.value


@pytest.mark.parametrize("ended", [None, WorkflowExecutionStatus.COMPLETED], ids=["gone", "ended"])
@pytest.mark.parametrize("which", ["health", "devices"])
async def test_a_watch_whose_workflow_is_gone_ends_as_a_benign_failure(
    acts: DeviceActivities, which: str, ended: WorkflowExecutionStatus | None
) -> None:
    temporal = Temporal(ended)
    error = await _cancelled(acts, which, ActivityCancellationDetails(not_found=True), temporal)
    assert temporal.asked == [("test", "test-run")]  # its own run, not the id's latest
    assert isinstance(error, ApplicationError), repr(error)
    assert error.category == ApplicationErrorCategory.BENIGN
    assert error.type == ErrorType.NOT_FOUND.value and error.non_retryable


@pytest.mark.parametrize("which", ["health", "devices"])
async def test_a_watch_cancelled_on_request_is_still_cancelled(
    acts: DeviceActivities, which: str
) -> None:
    error = await _cancelled(acts, which, ActivityCancellationDetails(cancel_requested=True))
    assert isinstance(error, asyncio.CancelledError | CancelledError), repr(error)


@pytest.mark.parametrize("which", ["health", "devices"])
async def test_a_timed_out_attempt_whose_workflow_runs_on_is_logged_not_quiet(
    acts: DeviceActivities, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Review defect 4. Before: any "not found" without a requested cancel ended as the
    benign "its workflow is gone", logged at debug: an attempt timed out by a stalled
    event loop lost its traceback, and the message was wrong."""
    caplog.set_level(logging.DEBUG)
    details = ActivityCancellationDetails(not_found=True)
    error = await _cancelled(acts, which, details, Temporal(WorkflowExecutionStatus.RUNNING))
    assert isinstance(error, asyncio.CancelledError | CancelledError), repr(error)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(r.exc_info and "timed out" in r.getMessage() for r in warned), [
        r.getMessage() for r in caplog.records
    ]


class Described:
    """What Temporal says of the watch's own run: its status and the watch's pending state
    (None: no longer pending); every describe is counted."""

    def __init__(
        self, status: WorkflowExecutionStatus, state: PendingActivityState | None, attempt: int = 1
    ) -> None:
        self.status, self.state, self.attempt = status, state, attempt
        self.described = 0

    def get_workflow_handle(self, workflow_id: str, *, run_id: str | None = None) -> Any:
        async def describe() -> Any:
            self.described += 1
            raw = DescribeWorkflowExecutionResponse()
            if self.state is not None:
                raw.pending_activities.append(
                    PendingActivityInfo(activity_id="test", state=self.state, attempt=self.attempt)
                )
            return SimpleNamespace(status=self.status, raw_description=raw)

        return SimpleNamespace(describe=describe)


def _quiet_env(temporal: Described) -> ActivityEnvironment:
    """A quiet watch's activity: it hears a cancel only every 8 minutes (0.8 × 10)."""
    env = ActivityEnvironment(client=temporal)  # type: ignore[arg-type]
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(minutes=10))
    return env


DROPPED = {
    "handed-over": (
        WorkflowExecutionStatus.CONTINUED_AS_NEW,
        PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        1,
    ),
    "deleted": (
        WorkflowExecutionStatus.CANCELED,
        PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        1,
    ),
    "dropped": (
        WorkflowExecutionStatus.RUNNING,
        PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED,
        1,
    ),
    "retried-elsewhere": (
        WorkflowExecutionStatus.RUNNING,
        PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        2,
    ),
    "no-longer-pending": (WorkflowExecutionStatus.RUNNING, None, 1),
}


@pytest.mark.parametrize("case", list(DROPPED))
@pytest.mark.parametrize("which", ["health", "devices"])
async def test_a_quiet_watch_no_longer_wanted_ends_at_its_next_look_at_its_run(
    acts: DeviceActivities, which: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R11 #4. A dropped quiet watch heard its cancel only from a heartbeat's answer,
    once in 8 minutes, and listed the provider every poll until then. It now asks Temporal
    (a describe: no billed Action) every `OWN_RUN_EVERY_SECONDS` whether its run still runs
    and still waits for this attempt."""
    monkeypatch.setattr(watches, "OWN_RUN_EVERY_SECONDS", 0.2)
    temporal = Described(*DROPPED[case])
    fn, arg = _watches(acts)[which]
    with pytest.raises(ApplicationError) as caught:
        await asyncio.wait_for(_quiet_env(temporal).run(fn, arg), 5)
    assert caught.value.category == ApplicationErrorCategory.BENIGN
    assert caught.value.non_retryable
    assert temporal.described >= 1


@pytest.mark.parametrize("which", ["health", "devices"])
async def test_a_quiet_watch_still_wanted_polls_on(
    acts: DeviceActivities, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watches, "OWN_RUN_EVERY_SECONDS", 0.2)
    temporal = Described(
        WorkflowExecutionStatus.RUNNING, PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    )
    fn, arg = _watches(acts)[which]
    arg = arg.model_copy(update={"max_seconds": 1.0})
    await _quiet_env(temporal).run(fn, arg)  # answers at its deadline, unchanged
    assert 2 <= temporal.described <= 6


async def test_a_watch_that_hears_its_cancel_soon_asks_nothing(
    acts: DeviceActivities, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch in motion (a 30 s heartbeat timeout: a cancel heard within 24 s) costs no
    describe."""
    monkeypatch.setattr(watches, "OWN_RUN_EVERY_SECONDS", 0.2)
    temporal = Described(
        WorkflowExecutionStatus.RUNNING, PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    )
    fn, arg = _watches(acts)["devices"]
    env = ActivityEnvironment(client=temporal)  # type: ignore[arg-type]
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.2))
    await env.run(fn, arg.model_copy(update={"max_seconds": 1.0}))
    assert temporal.described == 0
