"""`PoolClientBase`: what every `PoolClient` method stands on.

The Temporal client, the kind a name means when a method is not told, a running pool's
workflow handle (`PoolNotFound` otherwise), a query that may go unanswered, and what Temporal
raises as the `client.errors` tree (`_temporal_errors`). The methods a user calls are
`PoolClient`'s (`client.pool_client`)."""

from __future__ import annotations

import contextlib
from typing import Any

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import KIND_DEVICE_POOL
from devicepool.client._kind_sides import Side, side_of
from devicepool.client._temporal_errors import QUERY_TIMEOUT, temporal_errors
from devicepool.client.errors import BadInput, PoolNotFound, TemporalUnreachable

__all__ = ["PoolClientBase"]


class PoolClientBase:
    """One Temporal client's pools of a kind: handles, queries and errors (no user method)."""

    # The kind a name means when a method is not told (`kind=`).
    kind: str = KIND_DEVICE_POOL

    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def address(self) -> str:
        return str(self._client.service_client.config.target_host)

    def _device_pools_only(self, method: str) -> None:
        """`BadInput` on a `BrowserPoolClient`: it would reach the DevicePool of that name."""
        if self.kind != KIND_DEVICE_POOL:
            raise BadInput(f"{self.kind}s have no {method}: a DevicePool's (PoolClient.{method})")

    def _side(self, kind: str | None) -> Side:
        return side_of(kind or self.kind)

    async def running(self, name: str, *, kind: str | None = None) -> bool:
        """Whether a pool of that name and kind runs."""
        try:
            await self._running(name, kind)
        except PoolNotFound:
            return False
        return True

    async def _running(self, name: str, kind: str | None = None) -> WorkflowHandle[Any, Any]:
        handle = self._client.get_workflow_handle(self._side(kind).kind.workflow_id(name))
        await self._describe_running(name, handle, kind)
        return handle

    async def _describe_running(
        self, name: str, handle: WorkflowHandle[Any, Any], kind: str | None = None
    ) -> WorkflowExecutionDescription:
        with self._errors(name, kind=kind):
            desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise PoolNotFound(name, kind=self._side(kind).kind.resource)
        return desc

    async def _try_query(
        self, handle: WorkflowHandle[Any, Any], query: str, *, result_type: type = dict
    ) -> Any:
        """The query's answer, or None when no worker answered (or the pool just closed);
        `TemporalUnreachable` when the server is not there at all."""
        try:
            return await handle.query(query, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.UNAVAILABLE:
                raise TemporalUnreachable(self.address, str(err)) from err
            return None
        except (RPCTimeoutOrCancelledError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
            return None

    def _errors(
        self, name: str | None, *, writing: bool = False, kind: str | None = None
    ) -> contextlib.AbstractContextManager[None]:
        resource = self._side(kind).kind.resource
        return temporal_errors(self.address, name, writing=writing, kind=resource)
