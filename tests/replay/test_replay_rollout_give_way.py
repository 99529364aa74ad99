"""A pool whose rollout kept a busy device rolling replays on this build, unchanged.

`BUSY_ROLLING_GIVES_WAY_PATCH` (workflows/pool/lifecycle.py): a drifted device picked to
roll that is busy when it should go now gives way to an idle drifted one. The history here
is a run of such a pool recorded before that change (a loaded run of
test_pool_rollout_surge.py: {maxSurge: 0, maxUnavailable: 1}, its pass picked a device
the listing showed idle whose session had started; `Kept 1 device(s) busy since the
plan`, and the run carried `rolling` = that device, two idle drifted ones waiting). On
this build each of its passes would roll an idle one instead: it replays only because
the gate keeps runs without the marker as they were (without the gate, a
nondeterminism error at its first pass).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.pool.lifecycle import BUSY_ROLLING_GIVES_WAY_PATCH

HISTORY = Path(__file__).parent / "histories" / "rollout-busy-rolling-kept.json.gz"


async def test_a_run_that_kept_a_busy_device_rolling_replays_without_the_marker() -> None:
    with gzip.open(HISTORY, "rt") as text:
        raw = json.load(text)
    history = WorkflowHistory.from_json("devicepool/wf-93adf8bc", raw)
    assert BUSY_ROLLING_GIVES_WAY_PATCH.encode() not in json.dumps(raw).encode()
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
