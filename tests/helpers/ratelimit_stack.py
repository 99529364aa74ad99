"""The session stack of tests/ratelimit: its sped-up window and accounts, and a grant catcher.

tests/ratelimit/conftest.py builds the stack from these constants (its workers
reach the emulator through `transports.CountingTransport`); `GrantCatcher` is a
requester workflow that only counts the permits a ledger grants it.
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio import workflow
from temporalio.client import WorkflowHandle

from devicepool.api.names import SIGNAL_PERMITS_GRANTED
from devicepool.workflows.shared.protocol import PermitGrant, PermitRequest
from tests.helpers.settings import FAST

URL = "http://emulator.rl"
SPEED = 20.0
WINDOW = 60.0 / SPEED
CAP = 5
WINDOW_V = 60.0  # the provider's window, in the emulator's virtual seconds
# The rate-limit tests' pools: fast, and patient with a create waiting for its window.
SETTINGS = FAST.model_copy(update={"startup_timeout_seconds": 30.0})
# one account per test, so windows do not mix
ACCOUNTS = {
    "alpha": "rl-alpha",
    "beta": "rl-beta",
    "gamma": "rl-gamma",
    "delta": "rl-delta",
    "epsilon": "rl-epsilon",
    "zeta": "rl-zeta",
}
# The one account with a spendCap in the worker config: 6 devices over all its pools.
CAPPED_ACCOUNT, ACCOUNT_MAX_DEVICES = "zeta", 6


def name() -> str:
    """A new pool name for a rate-limit test."""
    return f"rl-{uuid.uuid4().hex[:6]}"


@workflow.defn(name="GrantCatcher")
class GrantCatcher:
    """A requester that only counts the permits granted to it."""

    def __init__(self) -> None:
        self.granted = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=SIGNAL_PERMITS_GRANTED)
    def permits_granted(self, grant: PermitGrant) -> None:
        self.granted += grant.count

    @workflow.query
    def got(self) -> int:
        return self.granted


def permit_request(request_id: str, pool: str, count: int, **fields: Any) -> PermitRequest:
    """A request for `count` permits of `pool` by `batch/<request_id>`, with `fields`."""
    return PermitRequest(
        request_id=request_id, requester=f"batch/{request_id}", pool=pool, count=count, **fields
    )


async def got(handle: WorkflowHandle[Any, Any], n: int) -> bool:
    """Whether the catcher behind `handle` has been granted `n` permits."""
    return bool(await handle.query(GrantCatcher.got) == n)
