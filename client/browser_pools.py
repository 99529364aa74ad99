"""`BrowserPoolClient`: the one `PoolClient`, its names meaning BrowserPools (kept for code written
against it); `BrowserPoolSummary` is `PoolSummary`."""

from __future__ import annotations

from devicepool.api.names import KIND_BROWSER_POOL
from devicepool.client._results import PoolSummary
from devicepool.client.pool_client import PoolClient

__all__ = ["BrowserPoolClient", "BrowserPoolSummary"]

BrowserPoolSummary = PoolSummary


class BrowserPoolClient(PoolClient):
    kind = KIND_BROWSER_POOL
