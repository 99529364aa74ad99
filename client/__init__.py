"""The user's side of devicepool: `PoolClient` (the Python API) and its errors.

    from devicepool.client import PoolClient, connect

    pool_client = PoolClient(await connect())       # TEMPORAL_ADDRESS, default 127.0.0.1:7233
    accepted = await pool_client.scale("quickstart", 8)

The rest of this package is private to the `devicepool` command; the error tree is drawn in
`devicepool.client.errors`."""

from devicepool.client.errors import (
    BadInput,
    DevicePoolError,
    PoolBlocked,
    PoolNotFound,
    TemporalUnreachable,
    WaitTimeout,
)
from devicepool.client.pool_client import DeleteResult, PoolClient, PoolSummary
from devicepool.connect import connect

__all__ = [
    "BadInput",
    "DeleteResult",
    "DevicePoolError",
    "PoolBlocked",
    "PoolClient",
    "PoolNotFound",
    "PoolSummary",
    "TemporalUnreachable",
    "WaitTimeout",
    "connect",
]
