"""bench/_actions.py counts what Temporal Cloud bills (no server: a recorded probe).

`data/actions-probe.json`: one workflow run against `temporal server start-dev
--metrics-port` (temporal CLI 1.9.1, server 1.32.0) that did one of each billed thing — a
client start, a signal, a query, a timer, an activity heartbeating (throttled), one retried
twice, two local activities and a patch in one workflow task, a search-attribute and a memo
upsert, a child workflow, three accepted updates and one rejected, a continue-as-new — then
its second run again without the signal and query: both runs' histories and the server's
`action` lines after it (stack traces and identities scrubbed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

ROOT = Path(__file__).resolve().parents[2]
PROBE = json.loads((Path(__file__).parent / "data" / "actions-probe.json").read_text())


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_actions", ROOT / "bench" / "_actions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_actions", module)
    spec.loader.exec_module(module)
    return module


actions = _load()
SCRAPE = "\n".join(["# HELP action action counter", "# TYPE action counter", *PROBE["metrics"]])


def test_the_servers_count_by_category() -> None:
    found = actions.categorise(actions.parse_actions(SCRAPE))
    assert found == {
        "workflow start": 1,
        "continue-as-new": 1,
        "child workflow": 4,  # two a child, the second run started it again
        "signal": 1,
        "query": 1,
        "update accepted": 3,
        "update rejected": 1,
        "timer": 2,
        "search-attribute upsert": 4,  # 2 TemporalChangeVersion among them
        "memo upsert": 2,
        "activity start": 4,
        "activity retry": 5,
        "heartbeat": 7,
        "markers": 2,  # one a workflow task: 2 local activities + a patch each run
    }


def test_only_the_namespace_asked_for_counts() -> None:
    assert actions.parse_actions(SCRAPE)["grpc_StartWorkflowExecution"] == 1
    assert actions.parse_actions(SCRAPE, namespace="temporal_system") == {
        "grpc_StartWorkflowExecution": 2
    }
    assert actions.parse_actions('action_total{namespace="default"} 3\nactions 4\n') == {}


def test_an_unknown_action_type_shows_by_its_name() -> None:
    assert actions.categorise({"grpc_SomethingNew": 2, "command_StartTimer": 0}) == {
        "other grpc_SomethingNew": 2
    }


def test_a_window_is_the_difference_of_two_scrapes() -> None:
    before = Counter({"grpc_QueryWorkflow": 10, "command_StartTimer": 3})
    after = Counter({"grpc_QueryWorkflow": 25, "command_StartTimer": 3, "activity_retry": 1})
    assert actions.since(before, after) == {"grpc_QueryWorkflow": 15, "activity_retry": 1}


def test_the_breakdown_is_scaled_and_largest_first() -> None:
    line = actions.breakdown({"timer": 1, "query": 3, "heartbeat": 0}, scale=2)
    assert line == "query 6.0, timer 2.0"
    # Per lease, a category met a few times in a phase is not printed as 0.0.
    assert actions.breakdown({"query": 600, "timer": 3}, scale=1 / 87) == "query 6.9, timer 0.034"


def test_histories_agree_with_the_server_where_they_can_see() -> None:
    """The probe's two runs, counted from their events, give the server's figure for every
    category a history records; the upserts differ by the two `TemporalChangeVersion`
    upserts (the server counts them, Temporal Cloud does not bill them)."""
    found: Counter[str] = Counter()
    for run in PROBE["runs"]:
        found += actions.history_actions(WorkflowHistory.from_json("probe", run).events)
    server = actions.categorise(actions.parse_actions(SCRAPE))
    unseen = {"query", "heartbeat", "update rejected"}
    assert found == {
        k: v - 2 if k == "search-attribute upsert" else v
        for k, v in server.items()
        if k not in unseen
    }


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            HistoryEvent(
                event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
                workflow_execution_started_event_attributes={"continued_execution_run_id": "r"},
            ),
            {},
        ),
        (
            HistoryEvent(
                event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
                workflow_execution_started_event_attributes={
                    "parent_workflow_execution": {"workflow_id": "p"}
                },
            ),
            {},
        ),
        (
            HistoryEvent(
                event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
                workflow_execution_signaled_event_attributes={
                    "external_workflow_execution": {"workflow_id": "sender"}
                },
            ),
            {},
        ),
        (
            HistoryEvent(
                event_type=EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
            ),
            {"signal": 1},
        ),
    ],
    ids=["continued run", "child", "signal from a workflow", "signal sent"],
)
def test_what_is_billed_elsewhere_is_not_counted_twice(
    event: HistoryEvent, expected: dict[str, int]
) -> None:
    assert actions.history_actions([event]) == expected


def test_heartbeats_an_hour_from_the_activities_timeouts() -> None:
    # The SDK's 60-s default cap: a 90-s and a 180-s timeout both beat once a minute.
    assert actions.heartbeats_per_hour([90, 180], cap=60) == 120
    # The cap lifted: 0.8 x the timeout (10 minutes: every 8 minutes).
    assert actions.heartbeats_per_hour([600, 600, 0], cap=4 * 7 * 86400) == 15
    assert actions.heartbeat_interval(30, cap=60) == 24
