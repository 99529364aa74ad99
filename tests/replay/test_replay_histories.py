"""Every release's recorded histories must replay on today's workflow code.

`tests/replay/histories/<release>/` holds what that release's own workflows
recorded; a change that alters the commands a running workflow would issue
makes these fail in CI instead of wedging a pool in production:

- `*.json`: each workflow type through one scenario (`record.py`, the release's own).
- `upgrade/*.json`: v0.1.0's pool through the passes whose commands later builds
  changed (`record_v010_upgrade.py`, run in v0.1.0's tree): a scale-down whose
  phase stays `ScalingDown`, a spec change, a scale and a health report while a
  pass awaits its terminations, a spec change while a pass that retries a slot
  awaits them, and a doomed device the health check reports.
- `corpus/<WorkflowType>.jsonl.gz`: every history the release's dev-server
  suite left on its servers (`record_release.py`, `make replay-corpus RELEASE=...`),
  replayed by workflow type.
"""

from __future__ import annotations

import gc
import gzip
import json
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf.json_format import ParseDict
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

ROOT = Path(__file__).parent / "histories"
HISTORIES = sorted(ROOT.glob("*/*.json"))
UPGRADES = sorted(ROOT.glob("*/upgrade/*.json"))
CORPORA = sorted(ROOT.glob("*/corpus/*.jsonl.gz"))
# Every workflow type the worker runs has its histories in every release.
KINDS = {"pool", "provision", "health", "ledger", "orphans"}


def _replayer() -> Replayer:
    # Without the sandbox: a replay checks the commands the code issues against the
    # history, which the sandbox does not change (a non-determinism error comes from the
    # SDK's state machines either way; removing a `workflow.patched` gate fails here).
    # The sandbox's own restrictions are met by every live test's worker. It halves the
    # module's CPU (37 -> 21 CPU-s for ~1,400 histories).
    return Replayer(
        workflows=WORKFLOWS,
        data_converter=DATA_CONVERTER,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )


def test_every_release_has_every_workflow_type() -> None:
    releases = sorted(p for p in ROOT.iterdir() if p.is_dir())
    assert releases, "no recorded release under tests/replay/histories"
    for release in releases:
        # The whole suite's corpus, not only a hand-picked scenario: a folder without one
        # would leave the corpus tests below with nothing to replay, and pytest would only
        # skip them ("got empty parameter set").
        assert (release / "corpus" / "manifest.json").is_file(), f"{release.name}: no corpus"
        assert list((release / "corpus").glob("*.jsonl.gz")), f"{release.name}: empty corpus"
        if list(release.glob("*.json")):  # the hand-picked scenario (`record.py`)
            kinds = {p.stem.rsplit("-", 1)[0] for p in release.glob("*.json")}
            assert kinds == KINDS, f"{release.name}: {sorted(kinds)}"


@pytest.mark.parametrize(
    "manifest",
    sorted(ROOT.glob("*/corpus/manifest.json")),
    ids=lambda p: p.parents[1].name,
)
def test_a_corpus_holds_every_workflow_type_of_its_release(manifest: Path) -> None:
    """Each type the release's worker registered has histories, as many as recorded."""
    said = json.loads(manifest.read_text())
    for workflow_type in said["workflowTypes"]:
        path = manifest.parent / f"{workflow_type}.jsonl.gz"
        assert path.is_file(), f"{manifest.parent}: no {workflow_type} history was recorded"
        with gzip.open(path, "rt") as lines:
            assert sum(1 for line in lines if line.strip()) == said["histories"][workflow_type]


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json("devicepool/recorded", json.loads(path.read_text()))
    result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


@pytest.mark.parametrize("path", UPGRADES, ids=[f"{p.parents[1].name}/{p.stem}" for p in UPGRADES])
async def test_a_v0_1_0_pass_replays_on_this_build(path: Path) -> None:
    """Before the `workflow.patched` gates of the pool's pass, each failed here:
    the scale-down with `Activity type of scheduled event 'terminate_device' does
    not match activity type of activity command 'watch_devices'` (v0.1.0's next
    pass terminated the same devices again), the spec change (osVersion "14" → "15"
    while the pass that decided a failed boot's replacement awaited its DELETE) with
    `Activity machine does not handle this event: HistoryEvent(id: 140,
    StartChildWorkflowExecutionInitiated)` (v0.1.0 started the decided batch, as
    `provision/3-2` under generation 3's keys; this build held it), the scale with `Timer machine
    does not handle this event: UpsertWorkflowSearchAttributes` (v0.1.0 upserted
    the counts a pass later), the health report with `Activity machine does not
    handle this event: HistoryEvent(id: 138, StartChildWorkflowExecutionInitiated)`
    (v0.1.0 split the 2 creates after the terminations, with the replacement owed
    by then: 2 child starts where this build decided 1). The spec change's first
    recording re-applied the manifest's own osVersion ("14": `unchanged`, no new
    generation): it failed only on the status's upserts moving a pass, with `Child
    workflow machine does not handle this event: UpsertWorkflowSearchAttributes`,
    and never reached `_as_v0_1_0_started`. The doomed device the health check
    reported failed with `UpsertWorkflowSearchAttributesMachine does not handle
    HistoryEvent(id: 137, ActivityTaskScheduled)` (the report took it out of
    `doomed`: no `terminate_device` where v0.1.0 issued one again). The spec change
    with a retry slot failed with `Child workflow machine does not handle this event:
    HistoryEvent { event_id: 247, ... ActivityTaskScheduled }` while
    `_as_v0_1_0_started` renamed the decided batches (the retry and 2 fresh slots in
    two children where v0.1.0, its new create body retrying no older key, started
    `provision/4-3` with 3 fresh slots)."""
    history = WorkflowHistory.from_json(f"devicepool/{path.stem}", json.loads(path.read_text()))
    result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


def test_the_upgrade_histories_are_there() -> None:
    scenarios = {p.stem.rsplit("-", 1)[0] for p in UPGRADES}
    assert scenarios == {
        "scale-down-phase-kept",
        "spec-change-during-terminations",
        "scale-during-terminations",
        "health-report-during-terminations",
        "doomed-device-reported",
        "spec-change-with-a-retry-slot",
    }


def corpus(path: Path) -> list[WorkflowHistory]:
    """The histories of one `corpus/<WorkflowType>.jsonl.gz`.

    Each was stored as `WorkflowHistory.to_json` wrote it, the proto's own JSON, and is
    parsed as such: `from_json` also takes the UI's JSON, and its deep copy and enum
    fix-ups cost a third more (1 of 4 CPU-s for the corpora; same events either way)."""
    with gzip.open(path, "rt") as lines:
        entries = [json.loads(line) for line in lines if line.strip()]
    return [
        WorkflowHistory(
            e["id"], ParseDict(e["history"], History(), ignore_unknown_fields=True).events
        )
        for e in entries
    ]


@pytest.mark.parametrize(
    "path", CORPORA, ids=[f"{p.parents[1].name}/{p.name.split('.')[0]}" for p in CORPORA]
)
async def test_release_corpus_replays(path: Path) -> None:
    histories = corpus(path)
    assert histories, f"{path} holds no history"

    # A type no workflow of today's registers fails too ("not registered"): a finding.
    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories:
            yield history

    with warnings.catch_warnings():
        # A run whose workflow raised in its constructor (a test started a pool with a
        # bad input: its task failed, as it does again on replay) leaves the SDK's run
        # coroutine never awaited; collected here, not in whichever test runs next.
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        results = await _replayer().replay_workflows(each(), raise_on_replay_failure=False)
        gc.collect()
    failures = {
        run_id: str(failure)[:400] for run_id, failure in results.replay_failures.items() if failure
    }
    assert not failures, f"{len(failures)} of {len(histories)} fail: {failures}"
