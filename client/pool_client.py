"""`PoolClient`: the user's side of a pool of either kind, over a Temporal client.

A pool is the workflow ``<kind>/<name>`` (`api.kinds`) on task queue ``devicepool``; writes are
updates (they validate and answer), reads are queries. Every method rejects bad input locally,
before any call to Temporal, so a rejected command changes nothing; errors are the
`client.errors` tree. A method naming a pool takes its `kind` too (default `PoolClient.kind`).
Per kind: `client._kind_sides`; start or update: `_apply`; waits: `_waits`; reads: `_pool_reads`;
a running pool's handle, queries and Temporal's errors: `_pool_base`; a DevicePool's hand
controls: `_device_controls`."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pydantic
from temporalio.client import Client

from devicepool.activities.connect_models import ConnectInfo
from devicepool.api.browserpool.v1beta1 import BrowserPool
from devicepool.api.kinds import kind_named
from devicepool.api.names import (
    KIND_BROWSER_POOL,
    KIND_DEVICE_POOL,
    QUERY_DEVICES,
    QUERY_STATUS,
    UPDATE_SCALE,
)
from devicepool.api.v1alpha1 import PoolResource
from devicepool.api.v1beta1 import DevicePool
from devicepool.client import _connect, _leases, _pool_reads, _waits
from devicepool.client._apply import (
    APPLY_CONCURRENCY,
    apply_in_order,
    check_account,
    start_or_update,
)
from devicepool.client._device_controls import DeviceControls
from devicepool.client._encrypted_stack import refuse_keyless_apply
from devicepool.client._kind_sides import side_of, teardown_blocked
from devicepool.client._orphans import sweep_orphans
from devicepool.client._refs_check import RefsCheck
from devicepool.client._results import DeleteResult, PoolSummary
from devicepool.client._temporal_errors import (
    QUERY_TIMEOUT,
    UPDATE_TIMEOUT,
    NoWorkerInTime,
)
from devicepool.client._validation import validate_name, validate_replicas
from devicepool.client.errors import BadInput, DevicePoolError
from devicepool.workflows.orphans.state import OrphanReport
from devicepool.workflows.pool.messages import (
    Accepted,
    DevicesView,
    PoolCost,
    ScaleRequest,
)
from devicepool.workflows.reconciler.lease_messages import LeasesView, ReleaseAnswer

__all__ = ["DeleteResult", "PoolClient", "PoolSummary", "ProgressCallback"]

# A teardown block that was already shown when `delete` was asked again may be
# stale (the cause fixed since): the finalizer sweeps again at most 60 s later.
BLOCKED_GRACE_SECONDS = 75.0

# Called with each status a wait reads (camelCase status JSON).
ProgressCallback = Callable[[dict[str, Any]], None]


class PoolClient(DeviceControls):
    """Pools over one Temporal client: `apply`, `scale`, `delete`, `wait_ready` write or wait;
    `get`, `summary`, `list`, `devices`, `profiles`, `describe` read; a DevicePool's hand
    controls (`replace_device`, ...) are `DeviceControls`'."""

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        # Accounts whose ledger was seen running: checked once per client, not once a pool.
        self._served_accounts: set[str] = set()
        # The worker's check of a pool's proxy pool, region and platform (`_refs_check.RefsCheck`).
        self._refs = RefsCheck(client)
        # Whether workers poll the pools' task queues (`get` from the memo rows).
        self._workers = _pool_reads.TaskQueueWorkers(client)

    def browser_pool_client(self) -> PoolClient:
        """The same Temporal client, its names meaning BrowserPools (`BrowserPoolClient`)."""
        from devicepool.client.browser_pools import BrowserPoolClient

        return BrowserPoolClient(self._client)

    # ------------------------------------------------------------ writes

    async def apply(
        self,
        pool: PoolResource,
        *,
        update_id: str | None = None,
        start_first: bool = False,
    ) -> Accepted:
        """Start the pool, or replace its spec (its kind is the pool's own).

        The answer's `result` is `created`, `configured` (spec or metadata changed) or `unchanged`.
        A DevicePool is one atomic update-with-start: sent again with the same `update_id`, it
        answers the first send's outcome instead of applying twice. A BrowserPool is a plain start,
        then the `apply` update if it runs already.

        `start_first` (`apply_many`; always for a BrowserPool): a plain start first, answered once
        Temporal stored the pool (as `kubectl apply` answers), the update only for a pool that
        exists; a new pool's first apply cannot be refused, so the outcome is the same.
        """
        kind = kind_named(pool.kind)  # type: ignore[attr-defined]
        side = side_of(kind)
        if isinstance(pool, kind.conversion.alpha):  # the article's version, from Python
            pool = kind.conversion.to_v1beta1(pool)
        # Re-validate: a pool built with model_construct() skipped its checks.
        try:
            checked = kind.stored.model_validate(pool.model_dump(by_alias=True))
        except pydantic.ValidationError as err:
            raise BadInput(f"{pool.metadata.name}: {err.errors()[0]['msg']}") from None
        pool = checked if pool.source is None else checked.read_from(pool.source)
        if isinstance(pool, DevicePool):
            await self._check_account(pool)
            running = functools.partial(self.running, pool.name, kind=kind.name)
            await self._refs.check(pool, exists=running)
        elif isinstance(pool, BrowserPool):
            running = functools.partial(self.running, pool.name, kind=kind.name)
            await self._refs.check_browser(pool, exists=running)
        return await start_or_update(
            self._client,
            side,
            pool,
            errors=functools.partial(self._errors, pool.name, writing=True, kind=kind.name),
            update_id=update_id,
            start_first=start_first,
        )

    async def apply_many(
        self,
        pools: Sequence[PoolResource],
        *,
        concurrency: int = APPLY_CONCURRENCY,
        on_result: Callable[[Any, Accepted | DevicePoolError], None] | None = None,
    ) -> list[Accepted | DevicePoolError]:
        """`apply` each pool (of any kind), at most `concurrency` at once; the answers in the
        pools' order.

        Every account is checked first (an unknown one: `BadInput`, nothing applied). A refused
        change answers its `BadInput` and the others go on; after any other failure no further pool
        starts. `on_result` sees each answer in the pools' order as soon as it and every one before
        it are in. A pool no worker took within `UPDATE_TIMEOUT` is sent again (same update id)
        while other pools are answered meanwhile: the workers are busy, not gone.
        """
        if concurrency < 1:
            raise BadInput(f"concurrency: must be at least 1, got {concurrency}")
        await refuse_keyless_apply(self._client, pools)  # no key, encrypted history: refused
        first: dict[str, DevicePool] = {}  # each account's first pool names it in a refusal
        for pool in pools:
            if isinstance(pool, DevicePool):  # a BrowserPool's account is its nodes'
                first.setdefault(pool.spec.account, pool)
        for pool in first.values():
            await self._check_account(pool)
        return await apply_in_order(
            functools.partial(self.apply, start_first=True),
            pools,
            concurrency=concurrency,
            on_result=on_result,
        )

    async def scale(self, name: str, replicas: int, *, kind: str | None = None) -> Accepted:
        validate_name(name)
        validate_replicas(replicas)
        handle = await self._running(name, kind)
        with self._errors(name, writing=True, kind=kind):
            result = await handle.execute_update(
                UPDATE_SCALE,
                ScaleRequest(replicas=replicas),
                result_type=Accepted,
                rpc_timeout=UPDATE_TIMEOUT,
            )
        return result if isinstance(result, Accepted) else Accepted.model_validate(result)

    async def costs(self, name: str | None = None) -> list[tuple[str, PoolCost | None]]:
        """What each running DevicePool's devices billed (query `cost`), or None where no
        worker answered (or the pool's build predates the query); one pool with `name`."""
        self._device_pools_only("costs")
        return await _pool_reads.costs(self, name)

    async def delete(
        self,
        name: str,
        *,
        wait: bool = False,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
        kind: str | None = None,
        force: bool = False,
    ) -> DeleteResult:
        """Cancel the pool workflow: it tears everything down (devices, profiles), then ends.
        Leased devices are waited for (up to 5 minutes) unless `force`: their leases end now.

        With `wait`, `PoolBlocked` as soon as the pool shows `TeardownBlocked=True`
        (it keeps retrying; only a person fixes the cause). A block already shown
        before this call may be one the cause was fixed for since: a DevicePool's gets
        `BLOCKED_GRACE_SECONDS` (one retry of the sweep) to clear first (`Side.blocked_grace`).
        """
        validate_name(name)
        side = self._side(kind)
        handle = await self._running(name, kind)
        before = (
            await self._try_query(handle, QUERY_STATUS) if wait and side.blocked_grace else None
        )
        grace_until = time.monotonic() + (
            BLOCKED_GRACE_SECONDS if isinstance(before, dict) and teardown_blocked(before) else 0.0
        )
        with self._errors(name, kind=kind):
            await handle.cancel()
        if force:
            await _waits.leases_ended(handle)
        if not wait:
            return DeleteResult(name, closed=False, execution_status="RUNNING", devices_left=None)
        return await _waits.until_deleted(
            self,
            side,
            handle,
            name,
            timeout=timeout,
            grace_until=grace_until,
            on_progress=on_progress,
        )

    async def wait_ready(
        self,
        name: str,
        *,
        generation: int,
        timeout: float = 300.0,
        on_progress: ProgressCallback | None = None,
        kind: str | None = None,
    ) -> dict[str, Any]:
        """Poll `status` until the pool has converged on `generation` (or `WaitTimeout`).

        `PoolBlocked` at once when a pass over `generation` reports what waiting
        cannot fix (`_waits.CANNOT_FIX`: a configuration error, a node's Local API
        refusing its key, a spend cap below the size, no live node): waiting would
        only run out the timeout.
        """
        side = self._side(kind)
        handle = self._client.get_workflow_handle(side.kind.workflow_id(name))
        return await _waits.until_ready(
            self,
            side,
            handle,
            name,
            generation=generation,
            timeout=timeout,
            on_progress=on_progress,
        )

    # ------------------------------------------------------------ reads

    async def get(self, name: str, *, kind: str | None = None) -> dict[str, Any]:
        """The pool's status (camelCase status JSON)."""
        validate_name(name)
        handle = await self._running(name, kind)
        with self._errors(name, kind=kind):
            status = await handle.query(QUERY_STATUS, result_type=dict, rpc_timeout=QUERY_TIMEOUT)
        return dict(status)

    async def summary(self, name: str, *, kind: str | None = None) -> PoolSummary:
        """Spec and status of one pool (what `get NAME` shows)."""
        validate_name(name)
        side = self._side(kind)
        handle = self._client.get_workflow_handle(side.kind.workflow_id(name))
        desc = await self._describe_running(name, handle, kind)
        summary = await _pool_reads.summary_of(self, side.kind.name, name, desc)
        if summary is None:
            raise NoWorkerInTime(
                f'pool "{name}": no worker did answer in time — is `devicepool worker` '
                "(or `devicepool dev`) running?"
            )
        return summary

    async def list_pools(self, *, kind: str | None = None, full: bool = True) -> list[PoolSummary]:
        """Every running pool of the kind (visibility), each with its live spec and status
        (two queries a pool); without `full`, what `get`'s table shows, from the one List
        call: each pool's row in its memo (a pool without one is asked)."""
        return await _pool_reads.list_pools(self, kind, full=full)

    async def list_kinds(
        self,
        kinds: Sequence[str],
        *,
        full: bool = True,
        ask: Callable[[PoolSummary], bool] | None = None,
        watch: _pool_reads.RowWatch | None = None,
    ) -> list[PoolSummary]:
        """`list_pools` of several kinds (manifest kinds) from one List call, in their order;
        without `full`, a pool whose row `ask` answers True for is asked too; `watch`: a
        `get -w`'s refresh (`_pool_reads.RowWatch`)."""
        return await _pool_reads.list_kinds(self, kinds, full=full, ask=ask, watch=watch)

    async def devices(self, name: str) -> DevicesView:
        """A DevicePool's devices (a BrowserPool's: `profiles`)."""
        self._device_pools_only("devices")
        validate_name(name)
        handle = await self._running(name, KIND_DEVICE_POOL)
        with self._errors(name, kind=KIND_DEVICE_POOL):
            return await handle.query(
                QUERY_DEVICES, result_type=DevicesView, rpc_timeout=QUERY_TIMEOUT
            )

    async def profiles(self, name: str) -> list[dict[str, Any]]:
        """A BrowserPool's profiles, one row each."""
        validate_name(name)
        handle = await self._running(name, KIND_BROWSER_POOL)
        with self._errors(name, kind=KIND_BROWSER_POOL):
            view = await handle.query(QUERY_DEVICES, rpc_timeout=QUERY_TIMEOUT)
        return list(view.get("profiles") or [])

    async def describe(self, name: str, *, kind: str | None = None) -> dict[str, Any]:
        """Spec, status, conditions, devices (profiles), the workflow and its recent events."""
        if self._side(kind).kind.name == KIND_BROWSER_POOL:
            return await _pool_reads.describe_browser_pool(self, name)
        return await _pool_reads.describe_device_pool(self, name)

    # ------------------------------------------------------------ leases (`_leases`)

    def lease(
        self,
        name: str,
        *,
        kind: str | None = None,
        selector: Mapping[str, str] | str | Sequence[str] | None = None,
        duration: timedelta | float | str | None = None,
        wait: timedelta | float | str | None = None,
        holder: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[_leases.Lease]:
        """`async with pools.lease(NAME, duration=..., wait=...) as lease:` a device of the pool,
        renewed in the background (its idle clock; never past its end) and released on the way
        out, an exception or a cancel too. Errors as `acquire_lease`'s; docs/leases.md."""
        return _leases.held(
            self, name, kind=kind, selector=selector, duration=duration, wait=wait, holder=holder
        )

    async def acquire_lease(
        self,
        name: str,
        *,
        kind: str | None = None,
        selector: Mapping[str, str] | str | Sequence[str] | None = None,
        duration: timedelta | float | str | None = None,
        wait: timedelta | float | str | None = None,
        holder: str | None = None,
        on_progress: _leases.LeaseProgress | None = None,
    ) -> _leases.Lease:
        """A ready device matching `selector`, for `duration` (None: the pool's maxDuration),
        now or within `wait` (queued, first come first served). `LeaseRefused` when it can
        never be granted, `LeaseNotGranted` when none came free in time, `BadInput` for a
        selector not `k=v` or a duration not above 0. The holder (default `user@host:pid`)
        renews within the pool's idleTimeout (`renew_lease`) and releases it."""
        return await _leases.acquire(
            self,
            name,
            kind=kind,
            selector=selector,
            duration=duration,
            wait=wait,
            holder=holder,
            on_progress=on_progress,
        )

    async def renew_lease(
        self,
        name: str,
        lease: _leases.Lease | str,
        *,
        duration: timedelta | float | str | None = None,
        kind: str | None = None,
    ) -> _leases.Lease:
        """Renew for `duration` from now (None: as long as it was taken for), never past
        maxDuration from its grant; `LeaseGone` when it is no longer held."""
        return await _leases.renew(self, name, lease, duration=duration, kind=kind)

    async def release_lease(
        self,
        name: str,
        lease: _leases.Lease | str,
        *,
        replace: bool = False,
        kind: str | None = None,
    ) -> ReleaseAnswer:
        """Give a lease back (or drop a ticket); idempotent: an ended lease answers how it
        ended. `replace`: the device is not leased again (a new one is made)."""
        return await _leases.release(self, name, lease, replace=replace, kind=kind)

    async def leases(self, name: str, *, kind: str | None = None) -> LeasesView:
        """The leases held and the tickets waiting (the `leases` query)."""
        return await _leases.view(self, name, kind=kind)

    async def lease_connect(
        self, name: str, lease: _leases.Lease | str, *, kind: str | None = None
    ) -> ConnectInfo:
        """How the holder reaches the leased device (`adb`: a cloud phone's ADB login;
        `cdp`: a browser profile's endpoint), read now; only through encrypted history
        (`LeaseRefused` otherwise; `LeaseGone` when not held). docs/leases.md."""
        return await _connect.connect_info(self, name, lease, kind=kind)

    # ------------------------------------------------------------ helpers

    async def _check_account(self, pool: DevicePool) -> None:
        """Refuse a pool whose account no worker serves (`_apply.check_account`)."""
        await check_account(self._client, self.address, pool, self._served_accounts)

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
