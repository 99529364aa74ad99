"""`BrowserPoolClient`: BrowserPools over one Temporal client (`apply`, `scale`, `delete`, reads).

The same shape as `PoolClient` for the second kind (workflow id
`browserpool/<name>`): `apply` is a plain start for a new pool (Temporal
answers once it stored it) and the `apply` update for one that runs; `delete`
cancels the workflow, which closes and deletes every profile on its node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from devicepool.api.browserpool.v1beta1 import BrowserPool
from devicepool.api.names import (
    BROWSER_POOL_WORKFLOW_ID_PREFIX,
    QUERY_DEVICES,
    QUERY_EVENTS,
    QUERY_SPEC,
    QUERY_STATUS,
    TASK_QUEUE,
    UPDATE_APPLY,
    UPDATE_SCALE,
    WORKFLOW_BROWSER_POOL,
    browser_pool_workflow_id,
)
from devicepool.client._results import iso
from devicepool.client._status import teardown_blocked
from devicepool.client._temporal_errors import temporal_errors, try_query
from devicepool.client.errors import (
    DevicePoolError,
    PoolBlocked,
    PoolNotFound,
    TemporalUnreachable,
    WaitTimeout,
)
from devicepool.workflows.browserpool.publish import initial_search_attributes, static_summary
from devicepool.workflows.pool.messages import Accepted, ApplyResult, ScaleRequest
from devicepool.workflows.pool.search_attributes import KEY_DESIRED, KEY_PHASE, KEY_READY

__all__ = ["BrowserPoolClient", "BrowserPoolSummary"]

QUERY_TIMEOUT = timedelta(seconds=5)
# How often `delete --wait` reads the pool.
POLL_SECONDS = 1.0
UPDATE_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True)
class BrowserPoolSummary:
    name: str
    spec: dict[str, Any]
    status: dict[str, Any]
    created: datetime | None
    # From its search attributes: no worker answered its queries (as `PoolSummary.stale`).
    stale: bool = False


class BrowserPoolClient:
    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def address(self) -> str:
        return str(self._client.service_client.config.target_host)

    def _errors(self, name: str | None, *, writing: bool = False) -> Any:
        return temporal_errors(self.address, name, writing=writing, kind="browserpool")

    async def apply(self, pool: BrowserPool) -> Accepted:
        """Start the pool (`created`), or replace its spec (`configured` / `unchanged`)."""
        body = {"metadata": pool.metadata.to_json_dict(), "spec": pool.spec.to_json_dict()}
        workflow_id = browser_pool_workflow_id(pool.name)
        with self._errors(pool.name, writing=True):
            try:
                await self._client.start_workflow(
                    WORKFLOW_BROWSER_POOL,
                    body,
                    id=workflow_id,
                    task_queue=TASK_QUEUE,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                    # Shown by the Web UI's list before the pool's first workflow task.
                    static_summary=static_summary(pool.name, pool.spec),
                    search_attributes=initial_search_attributes(pool.spec),
                )
            except WorkflowAlreadyStartedError:
                pass
            else:
                return Accepted(
                    generation=1, replicas=pool.spec.replicas, result=ApplyResult.CREATED
                )
            handle = self._client.get_workflow_handle(workflow_id)
            result = await handle.execute_update(
                UPDATE_APPLY, body, result_type=Accepted, rpc_timeout=UPDATE_TIMEOUT
            )
        if result.result == ApplyResult.CREATED:  # another apply's start won the race
            outcome = ApplyResult.CONFIGURED if result.generation > 1 else ApplyResult.UNCHANGED
            result = result.model_copy(update={"result": outcome})
        return result

    async def scale(self, name: str, replicas: int) -> Accepted:
        handle = await self._running(name)
        with self._errors(name, writing=True):
            return await handle.execute_update(
                UPDATE_SCALE,
                ScaleRequest(replicas=replicas),
                result_type=Accepted,
                rpc_timeout=UPDATE_TIMEOUT,
            )

    async def delete(
        self,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Ask the pool to tear down (it deletes every profile, then ends).

        With `wait`, until the workflow has ended (`WaitTimeout` past `timeout`);
        `PoolBlocked` when the pool shows `TeardownBlocked=True` (it keeps retrying, only
        a person fixes the cause). `on_progress` gets each status read meanwhile.
        """
        handle = await self._running(name)
        with self._errors(name, writing=True):
            await handle.cancel()
        if not wait:
            return
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while True:
            with self._errors(name):
                desc = await handle.describe()
            if desc.status != WorkflowExecutionStatus.RUNNING:
                if desc.status in (
                    WorkflowExecutionStatus.CANCELED,
                    WorkflowExecutionStatus.COMPLETED,
                ):
                    return
                shown = desc.status.name if desc.status else "UNKNOWN"
                raise DevicePoolError(
                    f"browserpool/{name} ended {shown} before confirming its teardown; "
                    "profiles may be left on its nodes"
                )
            read = await self._try_status(handle)
            if isinstance(read, dict):
                status = read
                if on_progress is not None:
                    on_progress(status)
                blocked = teardown_blocked(status)
                if blocked is not None:
                    raise PoolBlocked(
                        f"browserpool/{name}",
                        "cannot finish deleting",
                        str(blocked.get("reason") or "TeardownBlocked"),
                        str(blocked.get("message") or ""),
                        f"; it keeps retrying until the cause is fixed "
                        f"(devicepool describe browserpool/{name})",
                    )
            if time.monotonic() >= deadline:
                left = len(status.get("profileIds") or [])
                raise WaitTimeout(
                    f"browserpool/{name} still deleting after {timeout:g}s ({left} profiles left)"
                )
            await asyncio.sleep(POLL_SECONDS)

    async def _try_status(self, handle: WorkflowHandle[Any, Any]) -> Any:
        """The pool's status, or None when no worker answered this time."""
        return await try_query(
            handle, QUERY_STATUS, address=self.address, rpc_timeout=QUERY_TIMEOUT
        )

    async def summary(self, name: str) -> BrowserPoolSummary:
        handle, started = await self._started(name)
        with self._errors(name):
            spec, status = await asyncio.gather(
                handle.query(QUERY_SPEC, rpc_timeout=QUERY_TIMEOUT),
                handle.query(QUERY_STATUS, rpc_timeout=QUERY_TIMEOUT),
            )
        created = _created(spec.get("creationTimestamp")) or started
        return BrowserPoolSummary(name, dict(spec.get("spec") or {}), dict(status), created)

    async def list_pools(self) -> list[BrowserPoolSummary]:
        query = f"WorkflowType = '{WORKFLOW_BROWSER_POOL}' AND ExecutionStatus = 'Running'"
        found: list[tuple[str, Any]] = []
        with self._errors(None):
            async for execution in self._client.list_workflows(query):
                if execution.id.startswith(BROWSER_POOL_WORKFLOW_ID_PREFIX):
                    name = execution.id[len(BROWSER_POOL_WORKFLOW_ID_PREFIX) :]
                    found.append((name, execution))

        async def one(name: str, execution: Any) -> BrowserPoolSummary | None:
            try:
                got = await self.summary(name)
            except TemporalUnreachable:
                raise
            except PoolNotFound:
                return None  # it ended since the listing
            except (DevicePoolError, RPCError):
                # One that cannot answer (no worker, its task failing) must not fail a
                # `get` of every pool: what its search attributes say, marked stale.
                return stale_summary(name, execution)
            return got

        answers = await asyncio.gather(*(one(n, e) for n, e in sorted(found, key=lambda f: f[0])))
        return [a for a in answers if a is not None]

    async def profiles(self, name: str) -> list[dict[str, Any]]:
        handle = await self._running(name)
        with self._errors(name):
            view = await handle.query(QUERY_DEVICES, rpc_timeout=QUERY_TIMEOUT)
        return list(view.get("profiles") or [])

    async def describe(self, name: str) -> dict[str, Any]:
        got = await self.summary(name)
        handle = self._client.get_workflow_handle(browser_pool_workflow_id(name))
        with self._errors(name):
            events = await handle.query(QUERY_EVENTS, rpc_timeout=QUERY_TIMEOUT)
        metadata: dict[str, Any] = {"name": name}
        if got.created is not None:
            metadata["creationTimestamp"] = iso(got.created)
        return {
            "kind": "BrowserPool",
            "metadata": metadata,
            "spec": got.spec,
            "status": got.status,
            "profiles": await self.profiles(name),
            "events": list(events.get("events") or []),
        }

    async def running(self, name: str) -> bool:
        """Whether a BrowserPool of that name runs."""
        try:
            await self._running(name)
        except PoolNotFound:
            return False
        return True

    async def _running(self, name: str) -> WorkflowHandle[Any, Any]:
        return (await self._started(name))[0]

    async def _started(self, name: str) -> tuple[WorkflowHandle[Any, Any], datetime | None]:
        """The running pool's handle, and when its current run started (the pool's age when
        the pool does not say its own: a build before `creationTimestamp`)."""
        handle = self._client.get_workflow_handle(browser_pool_workflow_id(name))
        with self._errors(name):
            desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise PoolNotFound(name, kind="browserpool")
        return handle, desc.start_time


def _created(text: Any) -> datetime | None:
    """The pool's own `creationTimestamp` (ISO 8601), or None when it has none."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def stale_summary(name: str, execution: Any) -> BrowserPoolSummary | None:
    """A listed pool's search attributes as a summary (`stale`); None without them (a pool
    started by a build before them)."""
    attrs = execution.typed_search_attributes
    desired = attrs.get(KEY_DESIRED)
    if desired is None:
        return None
    status = {
        "phase": attrs.get(KEY_PHASE),
        "desiredReplicas": desired,
        "readyProfiles": attrs.get(KEY_READY),
    }
    return BrowserPoolSummary(
        name=name,
        spec={"replicas": desired},
        status={k: v for k, v in status.items() if v is not None},
        created=execution.start_time,
        stale=True,
    )
