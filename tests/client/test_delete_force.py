"""`delete --force` ends a deleted pool's leases, and never hangs or tracebacks: the pool
refuses `end_leases` until it has taken the cancel, and with no worker nobody answers."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.client import _waits
from devicepool.client.errors import DevicePoolError


class Pool:
    """A pool handle whose `end_leases` fails with `failures` first, then answers."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.asks: list[Any] = []

    async def execute_update(self, name: str, *, result_type: Any, rpc_timeout: Any) -> str:
        assert name == "end_leases" and rpc_timeout is not None  # every ask is bounded
        self.asks.append(rpc_timeout)
        if self.failures:
            raise self.failures.pop(0)
        return "1 lease(s) ended"


def not_deleting() -> WorkflowUpdateFailedError:
    return WorkflowUpdateFailedError(ApplicationError("pool 'p' is not being deleted"))


async def test_asked_again_until_the_pool_took_the_cancel() -> None:
    pool = Pool(not_deleting(), not_deleting())
    await _waits.leases_ended(pool, within=5)  # type: ignore[arg-type]
    assert len(pool.asks) == 3


async def test_no_worker_is_one_error_in_bounded_time() -> None:
    pool = Pool(*[WorkflowUpdateRPCTimeoutOrCancelledError()] * 50)
    with pytest.raises(DevicePoolError, match="no worker took it"):
        await _waits.leases_ended(pool, within=0.5)  # type: ignore[arg-type]


async def test_a_pool_that_never_takes_the_cancel_is_said_not_raised_raw() -> None:
    pool = Pool(*[not_deleting() for _ in range(50)])
    with pytest.raises(DevicePoolError, match="leases were not ended"):
        await _waits.leases_ended(pool, within=0.5)  # type: ignore[arg-type]


async def test_a_pool_gone_already_has_nothing_to_end() -> None:
    await _waits.leases_ended(Pool(RPCError("gone", RPCStatusCode.NOT_FOUND, b"")))  # type: ignore[arg-type]
