"""Constants and helpers shared by the rate-limit tests (fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, ClassVar

import httpx
from temporalio import workflow
from temporalio.client import WorkflowHandle

from devicepool.api.names import SIGNAL_PERMITS_GRANTED
from devicepool.workflows.shared.protocol import PermitGrant
from tests.support.settings import FAST

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
}


def name() -> str:
    """A new pool name for a rate-limit test."""
    return f"rl-{uuid.uuid4().hex[:6]}"


class CountingTransport(httpx.ASGITransport):
    """Counts the create calls that went through this worker."""

    # Test switch: pool name -> while closed, every list of that pool's devices
    # waits here (a pool whose first pass is slow on a busy worker).
    held_lists: ClassVar[dict[str, asyncio.Event]] = {}
    # Test switch: while set and closed, creates wait here before reaching the
    # provider (`at_gate` counts them).
    create_gate: ClassVar[asyncio.Event | None] = None
    at_gate: ClassVar[int] = 0
    # Test switch: while set and closed, every list of a pool's devices waits
    # here (a pool's first pass cannot get to its request).
    list_gate: ClassVar[asyncio.Event | None] = None

    def __init__(self, app: Any) -> None:
        super().__init__(app=app)
        self.creates = 0

    @classmethod
    def reset(cls) -> None:
        """Every switch back to its default (the conftest does it around each test)."""
        for gate in (cls.create_gate, cls.list_gate, *cls.held_lists.values()):
            if gate is not None:
                gate.set()
        cls.create_gate, cls.at_gate, cls.list_gate = None, 0, None
        cls.held_lists.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/devices"):
            gate = CountingTransport.create_gate
            if gate is not None and not gate.is_set():
                CountingTransport.at_gate += 1
                await gate.wait()
            self.creates += 1
        label = request.url.params.get("label", "")
        if request.method == "GET" and label.startswith("pool="):
            if CountingTransport.list_gate is not None:
                await CountingTransport.list_gate.wait()
            held = CountingTransport.held_lists.get(label[len("pool=") :])
            if held is not None:
                await held.wait()
        return await super().handle_async_request(request)


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


async def got(handle: WorkflowHandle[Any, Any], n: int) -> bool:
    """Whether the catcher behind `handle` has been granted `n` permits."""
    return bool(await handle.query(GrantCatcher.got) == n)
