"""Recorded pool histories must replay on today's workflow code.

A change that alters the commands a running pool would issue (without
`workflow.patched`) makes this fail in CI instead of in production. To record a
new history: `DEVICEPOOL_SAVE_HISTORY=tests/replay/histories/<name>.json
.venv/bin/pytest tests/workflows/test_pool_workflow.py -k converge`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_there_is_at_least_one_recorded_history() -> None:
    assert HISTORIES, "no recorded history under tests/replay/histories"


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    text = path.read_text()
    workflow_id = "devicepool/recorded"
    history = WorkflowHistory.from_json(workflow_id, json.loads(text))
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
