"""`PoolClient`: the user's side of a DevicePool, over a Temporal client.

A pool is the workflow ``devicepool/<name>`` on task queue ``devicepool``.
Writes are updates (they validate and answer); reads are queries (free, no
history). Every method rejects bad input locally, before any call to Temporal,
so a rejected command changes nothing; errors are the `client.errors` tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import (
    QUERY_DEVICES,
    QUERY_SPEC,
    QUERY_STATUS,
    SA_ACCOUNT,
    SA_DESIRED,
    SA_PHASE,
    SA_PLATFORM,
    SA_READY,
    SA_REGION,
    TASK_QUEUE,
    UPDATE_APPLY,
    UPDATE_SCALE,
    WORKFLOW_ACCOUNT_LEDGER,
    WORKFLOW_DEVICE_POOL,
    account_from_ledger_id,
    ledger_workflow_id,
    pool_name_from_workflow_id,
    pool_workflow_id,
)
from devicepool.api.v1alpha1 import MAX_REPLICAS, DevicePool, ObjectMeta, Phase
from devicepool.client.errors import (
    BadInput,
    DevicePoolError,
    PoolNotFound,
    TemporalUnreachable,
    WaitTimeout,
)
from devicepool.workflows.messages import (
    Accepted,
    ApplyRequest,
    DevicesView,
    PoolInput,
    ScaleRequest,
)

# Queries need a worker to answer; without one the server holds them. A short
# timeout lets `get` fall back to the search attributes instead of hanging.
QUERY_TIMEOUT = timedelta(seconds=5)
# How long an update waits for a worker to accept it.
UPDATE_TIMEOUT = timedelta(seconds=60)
POLL_SECONDS = 1.0
RECENT_EVENTS = 20

_PLATFORM = SearchAttributeKey.for_keyword(SA_PLATFORM)
_REGION = SearchAttributeKey.for_keyword(SA_REGION)
_DESIRED = SearchAttributeKey.for_int(SA_DESIRED)
_READY = SearchAttributeKey.for_int(SA_READY)
_PHASE = SearchAttributeKey.for_keyword(SA_PHASE)
_ACCOUNT = SearchAttributeKey.for_keyword(SA_ACCOUNT)


@dataclass
class PoolSummary:
    """One pool as `get` shows it: the resource shape (metadata, spec, status)."""

    name: str
    spec: dict[str, Any]
    status: dict[str, Any]
    created: datetime | None = None
    # Set when the worker did not answer and the row comes from search attributes.
    stale: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_resource(self) -> dict[str, Any]:
        metadata = {"name": self.name, **{k: v for k, v in self.metadata.items() if k != "name"}}
        if self.created is not None:
            metadata["creationTimestamp"] = _iso(self.created)
        return {
            "apiVersion": DevicePool.model_fields["api_version"].default,
            "kind": DevicePool.model_fields["kind"].default,
            "metadata": metadata,
            "spec": self.spec,
            "status": self.status,
        }


@dataclass
class DeleteResult:
    name: str
    closed: bool
    execution_status: str
    devices_left: int | None


ProgressCallback = Callable[[dict[str, Any]], None]


def validate_name(name: str) -> str:
    """A pool name is a DNS-1123 label; anything else is `BadInput` (exit 2)."""
    try:
        ObjectMeta.model_validate({"name": name})
    except pydantic.ValidationError as err:
        reason = err.errors()[0]["msg"].removeprefix("Value error, ")
        raise BadInput(f"invalid pool name {name!r}: {reason}") from None
    return name


def validate_replicas(replicas: int) -> int:
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise BadInput(f"replicas: must be an integer, got {replicas!r}")
    if not 0 <= replicas <= MAX_REPLICAS:
        raise BadInput(f"replicas: must be between 0 and {MAX_REPLICAS}, got {replicas}")
    return replicas


def devices_left(status: dict[str, Any]) -> int:
    ids = status.get("deviceIds")
    if isinstance(ids, list):
        return len(ids)
    return sum(
        int(status.get(k) or 0)
        for k in ("readyDevices", "provisioningDevices", "busyDevices", "offlineDevices")
    )


def is_converged(status: dict[str, Any], generation: int) -> bool:
    """Every desired device is up (ready or busy) and no surplus or stragglers remain."""
    desired = int(status.get("desiredReplicas") or 0)
    up = int(status.get("readyDevices") or 0) + int(status.get("busyDevices") or 0)
    total = (
        up + int(status.get("provisioningDevices") or 0) + int(status.get("offlineDevices") or 0)
    )
    return int(status.get("observedGeneration") or 0) >= generation and up == desired == total


class PoolClient:
    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def address(self) -> str:
        return str(self._client.service_client.config.target_host)

    # ------------------------------------------------------------ writes

    async def apply(self, pool: DevicePool) -> Accepted:
        """Start the pool, or replace its spec: one atomic update-with-start."""
        # Re-validate: a DevicePool built with model_construct() skipped its checks.
        try:
            pool = DevicePool.model_validate(pool.model_dump(by_alias=True))
        except pydantic.ValidationError as err:
            raise BadInput(f"{pool.metadata.name}: {err.errors()[0]['msg']}") from None
        spec = pool.spec
        await self._check_account(spec.provider_credential_ref)
        summary = (
            f"DevicePool **{pool.name}**: {spec.platform.value} {spec.os_version} in "
            f"{spec.region}, account `{spec.provider_credential_ref}`"
            + (f", proxy `{spec.proxy.pool_ref}`" if spec.proxy else "")
        )
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            WORKFLOW_DEVICE_POOL,
            PoolInput(metadata=pool.metadata, spec=spec),
            id=pool_workflow_id(pool.name),
            task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=summary,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(_PLATFORM, spec.platform.value),
                    SearchAttributePair(_REGION, spec.region),
                    SearchAttributePair(_DESIRED, spec.replicas),
                    SearchAttributePair(_READY, 0),
                    SearchAttributePair(_PHASE, Phase.PENDING.value),
                    SearchAttributePair(_ACCOUNT, spec.provider_credential_ref),
                ]
            ),
        )
        with self._errors(pool.name, writing=True):
            result = await self._client.execute_update_with_start_workflow(
                UPDATE_APPLY,
                ApplyRequest(metadata=pool.metadata, spec=spec),
                start_workflow_operation=start,
                result_type=Accepted,
                rpc_timeout=UPDATE_TIMEOUT,
            )
        return _accepted(result)

    async def scale(self, name: str, replicas: int) -> Accepted:
        validate_name(name)
        validate_replicas(replicas)
        handle = await self._running(name)
        with self._errors(name, writing=True):
            result = await handle.execute_update(
                UPDATE_SCALE,
                ScaleRequest(replicas=replicas),
                result_type=Accepted,
                rpc_timeout=UPDATE_TIMEOUT,
            )
        return _accepted(result)

    async def delete(
        self,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
    ) -> DeleteResult:
        """Cancel the pool workflow: it tears every device down, then ends CANCELED."""
        validate_name(name)
        handle = await self._running(name)
        with self._errors(name):
            await handle.cancel()
        if not wait:
            return DeleteResult(name, closed=False, execution_status="RUNNING", devices_left=None)
        deadline = time.monotonic() + timeout
        left: int | None = None
        while True:
            with self._errors(name):
                desc = await handle.describe()
            if desc.status != WorkflowExecutionStatus.RUNNING:
                status_name = desc.status.name if desc.status else "UNKNOWN"
                if desc.status not in (
                    WorkflowExecutionStatus.CANCELED,
                    WorkflowExecutionStatus.COMPLETED,
                ):
                    raise DevicePoolError(
                        f'pool "{name}" ended {status_name} before confirming its teardown; '
                        f"devices may be left at the provider"
                    )
                return DeleteResult(name, closed=True, execution_status=status_name, devices_left=0)
            status = await self._try_query(handle, QUERY_STATUS)
            if isinstance(status, dict):
                left = devices_left(status)
                if on_progress is not None:
                    on_progress(status)
            if time.monotonic() >= deadline:
                shown = "unknown" if left is None else str(left)
                raise WaitTimeout(
                    f'pool "{name}" still deleting after {timeout:g}s ({shown} devices left)'
                )
            await asyncio.sleep(POLL_SECONDS)

    async def wait_ready(
        self,
        name: str,
        *,
        generation: int,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Poll `status` until the pool has converged on `generation` (or `WaitTimeout`)."""
        handle = self._client.get_workflow_handle(pool_workflow_id(name))
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while True:
            answer = await self._try_query(handle, QUERY_STATUS)
            if isinstance(answer, dict):
                status = answer
                if on_progress is not None:
                    on_progress(status)
                if is_converged(status, generation):
                    return status
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f'pool "{name}" not ready after {timeout:g}s '
                    f"({status.get('readyDevices', 0)}/{status.get('desiredReplicas', '?')} ready, "
                    f"phase {status.get('phase', 'unknown')})"
                )
            await asyncio.sleep(POLL_SECONDS)

    # ------------------------------------------------------------ reads

    async def get(self, name: str) -> dict[str, Any]:
        """The pool's status (camelCase DevicePoolStatus JSON)."""
        validate_name(name)
        handle = await self._running(name)
        with self._errors(name):
            status = await handle.query(QUERY_STATUS, result_type=dict, rpc_timeout=QUERY_TIMEOUT)
        return dict(status)

    async def summary(self, name: str) -> PoolSummary:
        """Spec and status of one pool (what `get NAME` shows)."""
        validate_name(name)
        handle = self._client.get_workflow_handle(pool_workflow_id(name))
        desc = await self._describe_running(name, handle)
        return await self._summary(name, desc)

    async def list_pools(self) -> list[PoolSummary]:
        """Every running pool (visibility), each with its live spec and status."""
        query = f"WorkflowType = '{WORKFLOW_DEVICE_POOL}' AND ExecutionStatus = 'Running'"
        executions = []
        with self._errors(None):
            async for execution in self._client.list_workflows(query):
                if pool_name_from_workflow_id(execution.id):
                    executions.append(execution)
        limit = asyncio.Semaphore(16)

        async def one(execution: Any) -> PoolSummary:
            async with limit:
                return await self._summary(str(pool_name_from_workflow_id(execution.id)), execution)

        pools = await asyncio.gather(*(one(e) for e in executions))
        return sorted(pools, key=lambda p: p.name)

    async def devices(self, name: str) -> DevicesView:
        validate_name(name)
        handle = await self._running(name)
        with self._errors(name):
            return await handle.query(
                QUERY_DEVICES, result_type=DevicesView, rpc_timeout=QUERY_TIMEOUT
            )

    async def describe(self, name: str) -> dict[str, Any]:
        """Spec, status, conditions, devices, the workflow and its recent events."""
        validate_name(name)
        handle = self._client.get_workflow_handle(pool_workflow_id(name))
        desc = await self._describe_running(name, handle)
        summary = await self._summary(name, desc)
        view = await self._try_query(handle, QUERY_DEVICES, result_type=DevicesView)
        devices = (
            [d.model_dump(mode="json", by_alias=True) for d in view.devices]
            if isinstance(view, DevicesView)
            else None
        )
        events = await self._recent_events(handle)
        resource = summary.to_resource()
        resource["devices"] = devices
        resource["workflow"] = {
            "id": desc.id,
            "runId": desc.run_id,
            "taskQueue": desc.task_queue,
            "status": desc.status.name if desc.status else "UNKNOWN",
            "startTime": _iso(desc.start_time),
            "historyLength": desc.history_length,
        }
        resource["events"] = events
        if summary.stale:
            resource["note"] = "no worker answered; spec and status are from search attributes"
        return resource

    # ------------------------------------------------------------ helpers

    async def _check_account(self, account: str) -> None:
        """Refuse a pool whose account no worker serves (`BadInput`, nothing started).

        Every worker signal-with-starts the permit ledger `devicepool-account/<name>`
        of each account in its configuration when it starts, so a running ledger
        means some worker was configured with the account (its creates would
        otherwise wait on a task queue nobody polls).
        """
        handle = self._client.get_workflow_handle(ledger_workflow_id(account))
        try:
            desc = await handle.describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
                return
        except RPCError as err:
            if err.status == RPCStatusCode.UNAVAILABLE:
                raise TemporalUnreachable(self.address, str(err)) from err
            if err.status != RPCStatusCode.NOT_FOUND:
                raise DevicePoolError(f"Temporal: {err.message}") from err
        known: list[str] = []
        query = f"WorkflowType = '{WORKFLOW_ACCOUNT_LEDGER}' AND ExecutionStatus = 'Running'"
        with contextlib.suppress(RPCError):
            async for execution in self._client.list_workflows(query):
                name = account_from_ledger_id(execution.id)
                if name is not None:
                    known.append(name)
        raise BadInput(
            f"unknown account {account!r} (spec.providerCredentialRef): no worker serves it; "
            f"known accounts: {', '.join(sorted(known)) or '(none — is a worker running?)'}"
        )

    async def _running(self, name: str) -> WorkflowHandle[Any, Any]:
        handle = self._client.get_workflow_handle(pool_workflow_id(name))
        await self._describe_running(name, handle)
        return handle

    async def _describe_running(
        self, name: str, handle: WorkflowHandle[Any, Any]
    ) -> WorkflowExecutionDescription:
        with self._errors(name):
            desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise PoolNotFound(name)
        return desc

    async def _summary(self, name: str, execution: Any) -> PoolSummary:
        handle = self._client.get_workflow_handle(execution.id)
        spec_answer, status_answer = await asyncio.gather(
            self._try_query(handle, QUERY_SPEC), self._try_query(handle, QUERY_STATUS)
        )
        if isinstance(spec_answer, dict) and isinstance(status_answer, dict):
            return PoolSummary(
                name=name,
                spec=dict(spec_answer.get("spec") or {}),
                status=dict(status_answer),
                created=execution.start_time,
                metadata=dict(spec_answer.get("metadata") or {}),
            )
        attrs: TypedSearchAttributes = execution.typed_search_attributes
        spec = {
            "platform": attrs.get(_PLATFORM),
            "region": attrs.get(_REGION),
            "replicas": attrs.get(_DESIRED),
            "providerCredentialRef": attrs.get(_ACCOUNT),
        }
        status = {
            "phase": attrs.get(_PHASE),
            "desiredReplicas": attrs.get(_DESIRED),
            "readyDevices": attrs.get(_READY),
        }
        return PoolSummary(
            name=name,
            spec={k: v for k, v in spec.items() if v is not None},
            status={k: v for k, v in status.items() if v is not None},
            created=execution.start_time,
            stale=True,
        )

    async def _try_query(
        self, handle: WorkflowHandle[Any, Any], query: str, *, result_type: type = dict
    ) -> Any:
        """The query's answer, or None when no worker answers (or the pool just closed)."""
        try:
            return await handle.query(query, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)
        except (
            RPCError,
            RPCTimeoutOrCancelledError,
            WorkflowQueryFailedError,
            WorkflowQueryRejectedError,
        ) as err:
            if isinstance(err, RPCError) and err.status == RPCStatusCode.UNAVAILABLE:
                raise TemporalUnreachable(self.address, str(err)) from err
            return None

    async def _recent_events(self, handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        activity_names: dict[int, str] = {}
        try:
            async for event in _events(handle):
                row = _event_row(event, activity_names)
                if row is not None:
                    events.append(row)
        except (RPCError, RPCTimeoutOrCancelledError):
            return []
        return events[-RECENT_EVENTS:]

    @contextlib.contextmanager
    def _errors(self, name: str | None, *, writing: bool = False) -> Iterator[None]:
        """Map Temporal client errors onto the devicepool error tree, one line each."""
        try:
            yield
        except DevicePoolError:
            raise
        except WorkflowUpdateFailedError as err:
            raise BadInput(f'pool "{name}" rejected the change: {_cause_message(err)}') from err
        except RPCTimeoutOrCancelledError as err:
            what = "accept the change" if writing else "answer"
            raise DevicePoolError(
                f'pool "{name}": no worker did {what} in time — is `devicepool worker` '
                f"(or `devicepool dev`) running?"
            ) from err
        except RPCError as err:
            if err.status == RPCStatusCode.UNAVAILABLE:
                raise TemporalUnreachable(self.address, str(err)) from err
            if err.status == RPCStatusCode.NOT_FOUND and name is not None:
                raise PoolNotFound(name) from err
            message = err.message.splitlines()[0] if err.message else str(err)
            if "search attribute" in message.lower():
                raise DevicePoolError(f"{message} — register them with `devicepool setup`") from err
            raise DevicePoolError(f"Temporal: {message}") from err

    # `PoolClient.list()`, defined last: a method named `list` would shadow the
    # builtin in the annotations of every method after it.
    list = list_pools


async def _events(handle: WorkflowHandle[Any, Any]) -> AsyncIterator[HistoryEvent]:
    async for event in handle.fetch_history_events(rpc_timeout=QUERY_TIMEOUT):
        yield event


_SKIPPED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
    EventType.EVENT_TYPE_MARKER_RECORDED,
}


def _event_row(event: HistoryEvent, activity_names: dict[int, str]) -> dict[str, Any] | None:
    """One history event as `{time, type, detail}` (None for bookkeeping events)."""
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        activity_names[event.event_id] = (
            event.activity_task_scheduled_event_attributes.activity_type.name
        )
    if kind in _SKIPPED:
        return None
    name = EventType.Name(kind).removeprefix("EVENT_TYPE_")
    type_ = "".join(part.capitalize() for part in name.split("_"))
    detail = ""
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        detail = activity_names[event.event_id]
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        attrs = event.activity_task_completed_event_attributes
        detail = activity_names.get(attrs.scheduled_event_id, "")
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        attrs_f = event.activity_task_failed_event_attributes
        detail = f"{activity_names.get(attrs_f.scheduled_event_id, '')}: {attrs_f.failure.message}"
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
        attrs_t = event.activity_task_timed_out_event_attributes
        detail = activity_names.get(attrs_t.scheduled_event_id, "")
    elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        detail = event.workflow_execution_signaled_event_attributes.signal_name
    elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        detail = (
            event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        )
    elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
        timeout = event.timer_started_event_attributes.start_to_fire_timeout
        detail = f"{timeout.ToTimedelta().total_seconds():g}s"
    elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        detail = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
    elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
        detail = (
            event.child_workflow_execution_completed_event_attributes.workflow_execution.workflow_id
        )
    elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED:
        attrs_c = event.child_workflow_execution_failed_event_attributes
        detail = f"{attrs_c.workflow_execution.workflow_id}: {attrs_c.failure.message}"
    elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        detail = "history handed to a new run"
    elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
        detail = event.workflow_task_failed_event_attributes.failure.message
    return {"time": _iso(event.event_time.ToDatetime(tzinfo=UTC)), "type": type_, "detail": detail}


def _cause_message(err: BaseException) -> str:
    cause = err.__cause__
    while cause is not None:
        if isinstance(cause, ApplicationError | FailureError):
            return str(
                cause.message if isinstance(cause, ApplicationError) else cause
            ).splitlines()[0]
        cause = cause.__cause__
    return str(err)


def _accepted(result: Any) -> Accepted:
    if isinstance(result, Accepted):
        return result
    return Accepted.model_validate(result)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
