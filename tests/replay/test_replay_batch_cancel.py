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

from google.protobuf.json_format import ParseDict
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

CORPUS = Path(__file__).parent / "histories" / "v0.2.0" / "corpus" / "ProvisionBatch.jsonl.gz"


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
