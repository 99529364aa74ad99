"""A pool whose workflow task keeps failing is sent again, not the end of `apply -f DIR/`.

Under load (1,000 pools applied on a busy 2-core machine) a worker let some pools'
first workflow task time out three times; from then on Temporal refuses their
update at once ("Workflow Task in failed state") until a task completes, and the
apply stopped starting pools at the first such answer (a runtime error).
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api import parse_pool
from devicepool.client import _apply
from devicepool.client._apply import apply_in_order
from devicepool.client._temporal_errors import WorkflowTaskFailing, temporal_errors
from devicepool.client.errors import DevicePoolError
from devicepool.testing import pool_manifest
from devicepool.workflows.pool.messages import Accepted, ApplyResult

FAILING = "Unable to perform workflow execution update due to Workflow Task in failed state."


def test_the_servers_answer_is_its_own_error_naming_the_pool() -> None:
    with pytest.raises(WorkflowTaskFailing) as raised:
        with temporal_errors("127.0.0.1:7233", "p1", writing=True):
            raise RPCError(FAILING, RPCStatusCode.FAILED_PRECONDITION, b"")
    assert str(raised.value).startswith('pool "p1": its workflow task keeps failing or timing out')


class Flaky:
    """`PoolClient.apply` whose pools named in `failing` are refused that many times first."""

    def __init__(self, failing: dict[str, int]) -> None:
        self.failing = failing
        self.sends: dict[str, list[str | None]] = {}

    async def __call__(self, pool: Any, *, update_id: str | None = None) -> Accepted:
        self.sends.setdefault(pool.name, []).append(update_id)
        if len(self.sends[pool.name]) <= self.failing.get(pool.name, 0):
            with temporal_errors("127.0.0.1:7233", pool.name, writing=True):
                raise RPCError(FAILING, RPCStatusCode.FAILED_PRECONDITION, b"")
        return Accepted(generation=1, replicas=0, result=ApplyResult.CREATED)


POOLS = [parse_pool(pool_manifest(f"p{i}")) for i in range(6)]


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_apply, "TASK_FAILING_PAUSE", 0.0)


async def test_it_is_sent_again_with_the_same_update_and_the_rest_go_on() -> None:
    apply = Flaky({"p2": 3})
    answers = await apply_in_order(apply, POOLS, concurrency=2, on_result=None)
    assert [isinstance(a, Accepted) for a in answers] == [True] * 6
    first, *again = apply.sends["p2"]
    assert len(again) == 3 and first is not None and set(again) == {first}
    assert all(len(apply.sends[p.name]) == 1 for p in POOLS if p.name != "p2")


async def test_it_is_reported_once_the_tries_run_out_and_stops_no_other_pool() -> None:
    apply = Flaky({"p1": _apply.TASK_FAILING_TRIES})
    # One at a time: every pool after p1 is started only after p1's answer.
    answers = await apply_in_order(apply, POOLS, concurrency=1, on_result=None)
    assert len(answers) == 6
    assert isinstance(answers[1], WorkflowTaskFailing)
    assert isinstance(answers[1], DevicePoolError)
    assert len(apply.sends["p1"]) == _apply.TASK_FAILING_TRIES
    assert [isinstance(a, Accepted) for i, a in enumerate(answers) if i != 1] == [True] * 5
