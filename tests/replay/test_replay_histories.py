"""Every release's recorded histories must replay on today's workflow code.

`tests/replay/histories/<release>/` holds each workflow type's histories as that
release ran them (`python -m tests.replay.record tests/replay/histories/vX.Y.Z`):
a change that alters the commands a running workflow would issue makes this
fail in CI instead of in production.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

ROOT = Path(__file__).parent / "histories"
HISTORIES = sorted(ROOT.glob("*/*.json"))
# Every workflow type the worker runs has its histories in every release.
KINDS = {"pool", "provision", "health", "ledger", "orphans"}


def test_every_release_has_every_workflow_type() -> None:
    releases = sorted(p for p in ROOT.iterdir() if p.is_dir())
    assert releases, "no recorded release under tests/replay/histories"
    for release in releases:
        kinds = {p.stem.rsplit("-", 1)[0] for p in release.glob("*.json")}
        assert kinds == KINDS, f"{release.name}: {sorted(kinds)}"


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    text = path.read_text()
    workflow_id = "devicepool/recorded"
    history = WorkflowHistory.from_json(workflow_id, json.loads(text))
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
