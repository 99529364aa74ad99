"""Old pools that retired devices replay on this build, and now say them retiring (R20 #1).

`TerminateDeviceInput.retiring` is new: a pool's expired or replaced-when-idle device
goes only if idle, as a scale-down does, and the node's GeeLark warm reserve must not
keep it. Only an activity's input changed, not the commands: a replay matches a
scheduled activity by its type and id, not its input, so no `workflow.patched` gate.
This replays the v0.2.0 corpus's pools that retired a device (`Expired`, `Replaced`)
and reads, through a workflow interceptor, the inputs this build gives their
`terminate_device`s: at least one says `retiring`, and every history replays.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict
from temporalio import workflow
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from devicepool.activities import models as am
from devicepool.connect import DATA_CONVERTER
from devicepool.workflows import WORKFLOWS

CORPUS = Path(__file__).parent / "histories" / "v0.2.0" / "corpus" / "DevicePool.jsonl.gz"
SEEN: list[am.TerminateDeviceInput] = []


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity == "terminate_device":
            SEEN.extend(a for a in input.args if isinstance(a, am.TerminateDeviceInput))
        return super().start_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Recording(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound


def _payloads(entry: Any) -> str:
    """Every payload of a stored history, decoded (base64 JSON), one string."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, str):
                try:
                    found.append(base64.b64decode(data).decode())
                except (ValueError, UnicodeDecodeError):
                    pass
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(entry)
    return "\n".join(found)


def _retiring_pools() -> list[WorkflowHistory]:
    """The corpus's pools that terminated, only if idle, a device they retired."""
    chosen = []
    with gzip.open(CORPUS, "rt") as lines:
        for line in lines:
            if not line.strip():
                continue
            entry = json.loads(line)
            text = _payloads(entry)
            if '"onlyIfIdle":true' not in text:
                continue
            if '"reason":"Expired"' not in text and '"reason":"Replaced"' not in text:
                continue
            events = ParseDict(entry["history"], History(), ignore_unknown_fields=True).events
            chosen.append(WorkflowHistory(entry["id"], events))
    return chosen


async def test_a_v0_2_0_pool_retiring_a_device_replays_and_says_it_retiring() -> None:
    histories = _retiring_pools()
    assert histories, "no v0.2.0 pool in the corpus retired a device"
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=DATA_CONVERTER,
        workflow_runner=UnsandboxedWorkflowRunner(),
        interceptors=[_Recording()],
    )
    SEEN.clear()
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (history.workflow_id, result.replay_failure)
    retiring = [i for i in SEEN if i.retiring]
    assert retiring, [i.model_dump() for i in SEEN]
    assert all(i.only_if_idle for i in retiring)
