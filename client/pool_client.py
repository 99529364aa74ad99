"""`PoolClient`: the user's side of a DevicePool, over a Temporal client.

A pool is the workflow ``devicepool/<name>`` on task queue ``devicepool``.
Writes are updates (they validate and answer); reads are queries (free, no
history). Every method rejects bad input locally, before any call to Temporal,
so a rejected command changes nothing; errors are the `client.errors` tree.
The account check and `apply_many`'s ordering live in `client/_apply.py`; the
answers, status reading and Temporal error mapping in the other `client/_*`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pydantic
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from devicepool.api import v1alpha1
from devicepool.api.conversion import stored_spec_json, to_v1beta1, wire_spec
from devicepool.api.names import (
    QUERY_COST,
    QUERY_DEVICES,
    QUERY_LEDGER,
    QUERY_SPEC,
    QUERY_STATUS,
    TASK_QUEUE,
    UPDATE_APPLY,
    UPDATE_PAUSE_REMEDIATION,
    UPDATE_PROTECT_DEVICE,
    UPDATE_REPLACE_DEVICE,
    UPDATE_RESUME_REMEDIATION,
    UPDATE_SCALE,
    UPDATE_UNPROTECT_DEVICE,
    WORKFLOW_DEVICE_POOL,
    ledger_workflow_id,
    pool_name_from_workflow_id,
    pool_workflow_id,
)
from devicepool.api.v1beta1 import DevicePool
from devicepool.client._apply import APPLY_CONCURRENCY, apply_in_order, check_account
from devicepool.client._history import recent_events
from devicepool.client._orphans import sweep_orphans
from devicepool.client._results import DeleteResult, PoolSummary, iso
from devicepool.client._search_attributes import initial_search_attributes, stale_summary
from devicepool.client._status import (
    configuration_problem,
    devices_left,
    is_converged,
    teardown_blocked,
)
from devicepool.client._temporal_errors import temporal_errors, try_query
from devicepool.client._validation import validate_name, validate_replicas
from devicepool.client.browser_pools import BrowserPoolClient
from devicepool.client.errors import (
    BadInput,
    DevicePoolError,
    PoolBlocked,
    PoolNotFound,
    WaitTimeout,
)
from devicepool.workflows.orphans.state import OrphanReport
from devicepool.workflows.pool.messages import (
    Accepted,
    ApplyResult,
    ControlAnswer,
    DeviceRef,
    DevicesView,
    PoolCost,
    ProtectRequest,
    ReplaceRequest,
    ScaleRequest,
)

__all__ = ["DeleteResult", "PoolClient", "PoolSummary", "ProgressCallback"]

# Queries need a worker to answer; without one the server holds them. A short
# timeout lets `get` fall back to the search attributes instead of hanging.
QUERY_TIMEOUT = timedelta(seconds=5)
# How long an update waits for a worker to accept it.
UPDATE_TIMEOUT = timedelta(seconds=60)
POLL_SECONDS = 1.0
# A teardown block that was already shown when `delete` was asked again may be
# stale (the cause fixed since): the finalizer sweeps again at most 60 s later.
BLOCKED_GRACE_SECONDS = 75.0
RECENT_EVENTS = 20

# Called with each status a wait reads (camelCase `DevicePoolStatus` JSON).
ProgressCallback = Callable[[dict[str, Any]], None]


class PoolClient:
    """Pools over one Temporal client: `apply`, `scale`, `delete`, `wait_ready` write or wait;
    `get`, `summary`, `list`, `devices`, `describe` read."""

    def __init__(self, client: Client) -> None:
        self._client = client
        # Accounts whose ledger was seen running: checked once per client, not once a pool.
        self._served_accounts: set[str] = set()

    @property
    def address(self) -> str:
        return str(self._client.service_client.config.target_host)

    def browser_pool_client(self) -> BrowserPoolClient:
        """The same Temporal client, for the second kind (`browserpool/NAME`)."""
        return BrowserPoolClient(self._client)

    # ------------------------------------------------------------ writes

    async def apply(
        self,
        pool: DevicePool | v1alpha1.DevicePool,
        *,
        update_id: str | None = None,
        start_first: bool = False,
    ) -> Accepted:
        """Start the pool, or replace its spec: one atomic update-with-start.

        The answer's `result` says what happened: `created` (this call started
        the pool), `configured` (the spec or metadata changed) or `unchanged`.
        Sent again with the same `update_id`, it answers the first send's outcome
        (Temporal deduplicates updates by id) instead of applying twice.

        `start_first` (`apply_many`): try a plain start first, which Temporal
        answers once it has stored the pool, without waiting for a worker to run
        it (as `kubectl apply` answers once the API server stored the object);
        a pool that exists already gets the update. A new pool's first apply
        cannot be refused (nothing to compare with), so the outcome is the same.
        """
        if isinstance(pool, v1alpha1.DevicePool):  # the article's version, from Python
            pool = to_v1beta1(pool)
        # Re-validate: a DevicePool built with model_construct() skipped its checks.
        try:
            checked = DevicePool.model_validate(pool.model_dump(by_alias=True))
        except pydantic.ValidationError as err:
            raise BadInput(f"{pool.metadata.name}: {err.errors()[0]['msg']}") from None
        pool = checked if pool.source is None else checked.read_from(pool.source)
        spec = pool.spec
        await self._check_account(pool)
        summary = (
            f"DevicePool **{pool.name}**: {spec.platform.value} {spec.os_version} in "
            f"{spec.region}, account `{spec.account}`"
            + (f", proxy `{spec.proxy.pool_ref}`" if spec.proxy else "")
        )
        # Sent in the oldest version that holds the spec (`wire_spec`); the
        # worker stores v1beta1. A dict: `PoolInput` would serialize v1beta1.
        body = {"metadata": pool.metadata.to_json_dict(), "spec": wire_spec(spec)}
        starting: dict[str, Any] = {
            "id": pool_workflow_id(pool.name),
            "task_queue": TASK_QUEUE,
            "static_summary": summary,
            "search_attributes": initial_search_attributes(spec),
        }
        existed = False
        if start_first:
            with self._errors(pool.name, writing=True):
                try:
                    await self._client.start_workflow(
                        WORKFLOW_DEVICE_POOL,
                        body,
                        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                        **starting,
                    )
                except WorkflowAlreadyStartedError:
                    existed = True  # it runs: the update below changes it (or not)
                else:
                    return Accepted(
                        generation=1, replicas=spec.replicas, result=ApplyResult.CREATED
                    )
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            WORKFLOW_DEVICE_POOL,
            body,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            **starting,
        )
        with self._errors(pool.name, writing=True):
            result = await self._client.execute_update_with_start_workflow(
                UPDATE_APPLY,
                body,
                start_workflow_operation=start,
                id=update_id,
                result_type=Accepted,
                rpc_timeout=UPDATE_TIMEOUT,
            )
        accepted = _accepted(result)
        if existed and accepted.result == ApplyResult.CREATED:
            # Started by another apply whose pool had not run its first task yet:
            # this update was the first the pool handled, but it created nothing.
            changed = accepted.generation > 1
            outcome = ApplyResult.CONFIGURED if changed else ApplyResult.UNCHANGED
            accepted = accepted.model_copy(update={"result": outcome})
        return accepted

    async def apply_many(
        self,
        pools: Sequence[DevicePool],
        *,
        concurrency: int = APPLY_CONCURRENCY,
        on_result: Callable[[DevicePool, Accepted | DevicePoolError], None] | None = None,
    ) -> list[Accepted | DevicePoolError]:
        """`apply` each pool, at most `concurrency` at once; the answers in the pools' order.

        Every account the pools name is checked first, so an unknown one anywhere
        raises `BadInput` with nothing applied. A pool whose change is refused
        answers its `BadInput` and the others go on; after any other failure
        (Temporal, no worker accepting) no further pool is started, so the
        answers cover the pools up to those already in flight. Pools start in
        their order, and `on_result` sees each answer in that order as soon as it
        and every one before it are in.

        A pool no worker took within `UPDATE_TIMEOUT` is sent again (the same
        update id, so it is never applied twice) if other pools were answered
        meanwhile: the workers are busy with the pools just started, not gone.
        """
        if concurrency < 1:
            raise BadInput(f"concurrency: must be at least 1, got {concurrency}")
        first: dict[str, DevicePool] = {}  # each account's first pool names it in a refusal
        for pool in pools:
            first.setdefault(pool.spec.account, pool)
        for pool in first.values():
            await self._check_account(pool)
        return await apply_in_order(
            functools.partial(self.apply, start_first=True),
            pools,
            concurrency=concurrency,
            on_result=on_result,
        )

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

    async def costs(self, name: str | None = None) -> list[tuple[str, PoolCost | None]]:
        """What each running pool's devices billed (query `cost`), or None where no worker
        answered (or the pool's build predates the query); one pool with `name`."""
        if name is not None:
            validate_name(name)
            handle = await self._running(name)
            return [(name, await self._try_query(handle, QUERY_COST, result_type=PoolCost))]
        pools = await self.list_pools()

        async def one(pool: PoolSummary) -> tuple[str, PoolCost | None]:
            handle = self._client.get_workflow_handle(pool_workflow_id(pool.name))
            return pool.name, await self._try_query(handle, QUERY_COST, result_type=PoolCost)

        return list(await asyncio.gather(*(one(p) for p in pools)))

    # ------------------------------------------------------------ one device, remediation

    async def replace_device(self, name: str, device: str, *, when_idle: bool = False) -> str:
        """Replace one device now (busy or not) or once idle; the pool's one-line answer."""
        return await self._control(
            name, UPDATE_REPLACE_DEVICE, ReplaceRequest(device=device, when_idle=when_idle)
        )

    async def protect_device(self, name: str, device: str, *, duration: str | None = None) -> str:
        """Keep a device from scale-down and expiry (for `duration`, e.g. `2h`, or until unprotected)."""
        try:
            request = ProtectRequest.model_validate({"device": device, "duration": duration})
        except pydantic.ValidationError as err:
            raise BadInput(f"--for: {err.errors()[0]['msg']}") from None
        return await self._control(name, UPDATE_PROTECT_DEVICE, request)

    async def unprotect_device(self, name: str, device: str) -> str:
        return await self._control(name, UPDATE_UNPROTECT_DEVICE, DeviceRef(device=device))

    async def pause_remediation(self, name: str) -> str:
        """The health check stops replacing unhealthy devices (it still shows them)."""
        return await self._control(name, UPDATE_PAUSE_REMEDIATION, None)

    async def resume_remediation(self, name: str) -> str:
        return await self._control(name, UPDATE_RESUME_REMEDIATION, None)

    async def _control(self, name: str, update: str, request: Any) -> str:
        validate_name(name)
        handle = await self._running(name)
        args = [] if request is None else [request]
        with self._errors(name, writing=True):
            answer = await handle.execute_update(
                update, args=args, result_type=ControlAnswer, rpc_timeout=UPDATE_TIMEOUT
            )
        return str(answer.message)

    async def delete(
        self,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
    ) -> DeleteResult:
        """Cancel the pool workflow: it tears every device down, then ends CANCELED.

        With `wait`, `PoolBlocked` as soon as the pool shows `TeardownBlocked=True`
        (it keeps retrying; only a person fixes the cause). A block already shown
        before this call may be one the cause was fixed for since: it gets
        `BLOCKED_GRACE_SECONDS` (one retry of the sweep) to clear first.
        """
        validate_name(name)
        handle = await self._running(name)
        before = await self._try_query(handle, QUERY_STATUS) if wait else None
        grace_until = time.monotonic() + (
            BLOCKED_GRACE_SECONDS if isinstance(before, dict) and teardown_blocked(before) else 0.0
        )
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
                return DeleteResult(
                    name,
                    closed=True,
                    execution_status=status_name,
                    devices_left=0,
                    profiles_retired=await self._retired(handle, desc.status),
                )
            status = await self._try_query(handle, QUERY_STATUS)
            if isinstance(status, dict):
                left = devices_left(status)
                if on_progress is not None:
                    on_progress(status)
                blocked = teardown_blocked(status)
                if blocked is not None and time.monotonic() >= grace_until:
                    raise PoolBlocked(
                        name,
                        "cannot finish deleting",
                        str(blocked.get("reason") or "TeardownBlocked"),
                        str(blocked.get("message") or ""),
                        "; it keeps retrying until the cause is fixed "
                        f"(devicepool describe {name})",
                    )
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
        """Poll `status` until the pool has converged on `generation` (or `WaitTimeout`).

        `PoolBlocked` at once when a pass over `generation` reports `Ready=False`
        for a configuration error (`_status.CONFIGURATION_REASONS`): the pool
        stopped provisioning, and waiting would only run out the timeout.
        """
        handle = self._client.get_workflow_handle(pool_workflow_id(name))
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while True:
            answer = await self._try_query(handle, QUERY_STATUS)
            if isinstance(answer, dict):
                status = answer
                if on_progress is not None:
                    if status.get("pendingDevices"):
                        # Creates not landed yet: say whether they wait for the account's window.
                        status = {**status, "accountWindow": await self._window(handle)}
                    on_progress(status)
                if is_converged(status, generation):
                    return status
                problem = configuration_problem(status, generation)
                if problem is not None:
                    raise PoolBlocked(
                        name,
                        "cannot become ready",
                        str(problem.get("reason")),
                        str(problem.get("message") or ""),
                    )
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
        events = await recent_events(handle, limit=RECENT_EVENTS, rpc_timeout=QUERY_TIMEOUT)
        resource = summary.to_resource()
        resource["devices"] = devices
        resource["workflow"] = {
            "id": desc.id,
            "runId": desc.run_id,
            "taskQueue": desc.task_queue,
            "status": desc.status.name if desc.status else "UNKNOWN",
            "startTime": iso(desc.start_time),
            "historyLength": desc.history_length,
        }
        resource["events"] = events
        if summary.stale:
            resource["note"] = "no worker answered; spec and status are from search attributes"
        return resource

    # ------------------------------------------------------------ helpers

    async def _check_account(self, pool: DevicePool) -> None:
        """Refuse a pool whose account no worker serves (`_apply.check_account`)."""
        await check_account(self._client, self.address, pool, self._served_accounts)

    async def running(self, name: str) -> bool:
        """Whether a DevicePool of that name runs."""
        try:
            await self._running(name)
        except PoolNotFound:
            return False
        return True

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
                spec=stored_spec_json(spec_answer.get("spec") or {}),
                status=dict(status_answer),
                # The pool's creation, carried across its runs (a run's start restarts at
                # every continue-as-new); a worker from before answers without it.
                created=_created(spec_answer) or execution.start_time,
                metadata=dict(spec_answer.get("metadata") or {}),
            )
        return stale_summary(name, execution)

    async def _window(self, pool: WorkflowHandle[Any, Any]) -> dict[str, Any] | None:
        """The pool's account window as its ledger counts it (`ledger` query), or None."""
        spec = await self._try_query(pool, QUERY_SPEC)
        provider = stored_spec_json((spec or {}).get("spec") or {}).get("provider") or {}
        account = provider.get("account")
        if not account:
            return None
        ledger = self._client.get_workflow_handle(ledger_workflow_id(str(account)))
        view = await self._try_query(ledger, QUERY_LEDGER)
        return view if isinstance(view, dict) else None

    async def _retired(
        self, handle: WorkflowHandle[Any, Any], status: WorkflowExecutionStatus
    ) -> int | None:
        """What a deleted pool kept at a provider with no delete (`profilesRetired`), or None
        when it cannot be told: the result of a run that ended COMPLETED (a teardown
        continued-as-new), else the CANCELED run's `status`, which a worker replays to answer."""
        final: Any = None
        try:
            if status == WorkflowExecutionStatus.COMPLETED:
                final = await handle.result(rpc_timeout=QUERY_TIMEOUT)
            else:
                final = await self._try_query(handle, QUERY_STATUS)
        except Exception:  # the pool is deleted: only this count is unknown
            return None
        if not isinstance(final, dict):
            return None
        return int(final.get("profilesRetired") or 0)

    async def _try_query(
        self, handle: WorkflowHandle[Any, Any], query: str, *, result_type: type = dict
    ) -> Any:
        """The query's answer, or None when no worker answers (or the pool just closed)."""
        return await try_query(
            handle, query, address=self.address, rpc_timeout=QUERY_TIMEOUT, result_type=result_type
        )

    def _errors(
        self, name: str | None, *, writing: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        return temporal_errors(self.address, name, writing=writing)

    async def orphans(
        self, *, delete: bool = False, accounts: list[str] | None = None
    ) -> list[OrphanReport]:
        """Devices whose pool has no running workflow, one report per account (`_orphans`).

        Each account's janitor scans when asked; with `delete` it terminates them
        now, grace or not (never a device whose pool runs). `accounts`: default,
        every account whose janitor runs.
        """
        return await sweep_orphans(
            self._client, self.address, accounts=accounts, delete=delete, timeout=UPDATE_TIMEOUT
        )

    # `PoolClient.list()`, defined last: a method named `list` would shadow the
    # builtin in the annotations of every method after it.
    list = list_pools


def _accepted(result: Any) -> Accepted:
    if isinstance(result, Accepted):
        return result
    return Accepted.model_validate(result)


def _created(spec_answer: dict[str, Any]) -> datetime | None:
    """When the pool was created, from its `spec` query (`createdAt`), if it says."""
    try:
        return datetime.fromisoformat(str(spec_answer["createdAt"]))
    except (KeyError, ValueError):
        return None
