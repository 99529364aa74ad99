"""A batch cancelled as its permit request to a missing ledger fails ends; it did not.

A pool deleted right after it started a batch (test_pool_leases.py, loaded: `Creating 1
device`, then the cancel) cancels the batch. The batch's first step asks the account's
ledger for permits; with no ledger the signal fails, and when that failure and the cancel
came in one workflow task, the SDK asked Core to cancel the signal it had just resolved:
"[TMPRL1100] Nondeterminism error: Invalid transition in state machine", on every retry
of the task. The batch never ended, and the pool's teardown waited its 90 s for it.

The history: the v0.2.0 corpus's first batch (an account without a ledger) up to its
failed request, with the cancel put in before the next task, and that task completed.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

HISTORIES = Path(__file__).parent / "histories"
CORPUS = HISTORIES / "v0.2.0" / "corpus" / "ProvisionBatch.jsonl.gz"


def _cancelled_as_its_request_failed() -> WorkflowHistory:
    with gzip.open(CORPUS, "rt") as lines:
        entry = json.loads(lines.readline())
    events = entry["history"]["events"][:8]
    kinds = [e["eventType"].removeprefix("EVENT_TYPE_") for e in events]
    assert kinds[4:8] == [
        "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",
        "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED",
        "WORKFLOW_TASK_SCHEDULED",
        "WORKFLOW_TASK_STARTED",
    ], kinds
    cancel = {
        "eventTime": events[5]["eventTime"],
        "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED",
        "workflowExecutionCancelRequestedEventAttributes": {"identity": "its pool"},
    }
    completed = copy.deepcopy(events[3])
    events = [*events[:6], cancel, *events[6:], completed]
    for number, event in enumerate(events, 1):
        event["eventId"] = str(number)
    events[8]["workflowTaskStartedEventAttributes"]["scheduledEventId"] = "8"
    done = events[9]["workflowTaskCompletedEventAttributes"]
    done["scheduledEventId"], done["startedEventId"] = "8", "9"
    parsed = ParseDict({"events": events}, History(), ignore_unknown_fields=True)
    return WorkflowHistory(entry["id"], parsed.events)


async def test_a_batch_cancelled_as_its_permit_request_fails_takes_the_cancel() -> None:
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    history = _cancelled_as_its_request_failed()
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


class _Started(Interceptor):
    """Which activities the replayed workflow starts (those of its last, open task too)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        started = self.started

        class Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> Any:
                started.append(input.activity)
                return super().start_activity(input)

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


async def test_a_batch_cancelled_as_its_permit_request_fails_creates_nothing() -> None:
    """R23 #2: the task that takes that cancel (left open: a new run's, past the patch)
    ended the batch only after creating every slot without permits. Now it creates none."""
    full = _cancelled_as_its_request_failed()
    history = WorkflowHistory(full.workflow_id, list(full.events)[:-1])
    seen = _Started()
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER, interceptors=[seen])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert "create_device" not in seen.started, seen.started


@pytest.mark.parametrize("name", ["no-ledger", "ledger"])
async def test_a_v020_batch_cancelled_at_once_that_created_replays(name: str) -> None:
    """A v0.2.0 batch cancelled before its first task (with and without a ledger for its
    account) created its three slots, then took the cancel: recorded on v0.2.0 (d734be3),
    it replays on the old path (no marker, so no patch)."""
    with gzip.open(HISTORIES / f"batch-cancelled-at-once-{name}.json.gz", "rt") as text:
        history = WorkflowHistory.from_json("batch-cancelled-at-once", text.read())
    scheduled = [
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert len(scheduled) == 3
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
