"""`DeviceActivities`: every BitCloudPhone side effect of a DevicePool, as bound activities.

The class owns one `BitCloudPhoneClient` per provider account (built once, closed
by `aclose()` at worker shutdown) and the proxy pools. Inputs and results name
accounts and proxy pools only; keys and passwords are resolved here, in the
worker, and never logged. Every provider failure leaves through
`activities.errors.to_application_error`, so workflows see one vocabulary;
every provider text has passed the worker's `Scrubber` (`activities.secrets`)
in the client first.

Provider calls run under `activities.heartbeats.heartbeating()`: workflows
schedule them with `HEARTBEAT_TIMEOUT`, so an attempt lost with a killed worker
is retried elsewhere within seconds. Provider JSON becomes the pool's view in
`activities.device_views`.

Activities (name → input → result):

- `pool_settings` () → `PoolSettings`
- `check_pool_refs` `CheckRefsInput` → `CheckRefsResult`
- `list_devices` `ListDevicesInput` → `ListDevicesResult`
- `watch_devices` `WatchDevicesInput` → `WatchDevicesResult` (long-running; heartbeats;
  on the watch queue, `watch_queue_activities()`)
- `watch_health` `WatchHealthInput` → `WatchHealthResult` (the health check's long
  poll; heartbeats; on the watch queue). It may reuse a listing of the same pool
  this process made for the pool's own watch (at most `reuse_listing_seconds`
  old), so a pool and its health check cost the provider one read per interval;
  without one (that watch runs on another worker, or lists less often than the
  check polls) its own reads are at least `own_read_seconds` apart. A change is
  answered on a read of its own, never on that listing alone
- `create_device` `CreateDeviceInput` → `CreateDeviceResult`
- `get_statuses` `GetStatusesInput` → `GetStatusesResult`
- `terminate_device` `TerminateDeviceInput` → `TerminateDeviceResult`
- `terminate_pool` `TerminatePoolInput` → `TerminatePoolResult` (the finalizer; heartbeats)
- `pool_running` `PoolRunInput` → `PoolRunResult` (asks Temporal, not the provider;
  `activities.pool_runs`)
- `find_orphans`, `terminate_orphans`: the per-account orphan sweep (`activities.orphans`)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities import pool_runs
from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.definitions import DeviceActivityDefinitions
from devicepool.activities.device_views import device_info, device_status_info, health_suspects
from devicepool.activities.errors import (
    TEARDOWN_PENDING,
    NotFoundError,
    ProviderError,
    configuration_error,
    to_application_error,
)
from devicepool.activities.heartbeats import finish_even_if_cancelled, heartbeating
from devicepool.activities.ledger_calls import ledger_hold, report_rate_limited
from devicepool.activities.metrics import Metrics, replacement_reason
from devicepool.activities.models import (
    ALIVE_STATUSES,
    AccountSettings,
    CheckRefsInput,
    CheckRefsResult,
    CreateDeviceInput,
    CreateDeviceResult,
    DeviceInfo,
    DeviceStatus,
    GetStatusesInput,
    GetStatusesResult,
    ListDevicesInput,
    ListDevicesResult,
    PoolRunInput,
    PoolRunResult,
    PoolSettings,
    ProxyPoolSettings,
    RegionStatusInput,
    RegionStatusResult,
    RunningWorkflowsInput,
    RunningWorkflowsResult,
    TerminateDeviceInput,
    TerminateDeviceResult,
    TerminatePoolInput,
    TerminatePoolResult,
    WatchDevicesInput,
    WatchDevicesResult,
    WatchHealthInput,
    WatchHealthResult,
    device_fingerprint,
    device_rows,
    suspects_fingerprint,
)
from devicepool.activities.orphans import OrphanActivities
from devicepool.activities.proxy import resolve_proxy
from devicepool.activities.secrets import Scrubber
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY

__all__ = ["DeviceActivities", "device_fingerprint", "device_info", "device_status_info"]

# Listings older than this are dropped from the reuse cache (a deleted pool's among them).
LISTING_KEEP_SECONDS = 600.0


def _watch_answer(
    input: WatchDevicesInput, devices: list[DeviceInfo], fingerprint: str, *, changed: bool
) -> WatchDevicesResult:
    if input.compact:
        rows = device_rows(devices, pool=input.pool)
        return WatchDevicesResult(rows=rows, fingerprint=fingerprint, changed=changed)
    return WatchDevicesResult(devices=devices, fingerprint=fingerprint, changed=changed)


def _health_answer(
    pool: PoolRunResult,
    listing: tuple[datetime, list[DeviceInfo]],
    *,
    startup: timedelta,
    previous: datetime | None,
) -> WatchHealthResult:
    """`watch_health`'s answer on one listing: the suspects in it and a count."""
    checked_at, devices = listing
    suspects = health_suspects(devices, now=checked_at, startup_timeout=startup)
    return WatchHealthResult(
        pool=pool,
        devices=len(devices),
        suspects=suspects,
        fingerprint=suspects_fingerprint(suspects),
        checked_at=checked_at,
        previous_check_at=previous,
    )


async def _still_running(workflow_id: str) -> bool:
    """Whether Temporal runs this workflow; not knowing (an RPC error) counts as running."""
    try:
        described = await activity.client().get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        return err.status != RPCStatusCode.NOT_FOUND
    return described.status == WorkflowExecutionStatus.RUNNING


# ---------------------------------------------------------------- the activities


class DeviceActivities(OrphanActivities, DeviceActivityDefinitions):
    """Bound activities over the worker's accounts and proxy pools."""

    def __init__(
        self,
        *,
        accounts: Mapping[str, AccountSettings],
        proxy_pools: Mapping[str, ProxyPoolSettings],
        settings: PoolSettings | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: Metrics | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        self._settings = settings or PoolSettings()
        # Every secret the worker holds (`scrubber`, built once from its config)
        # and, in any case, those handed here: cleaned out of every provider text.
        own = Scrubber.of(accounts=accounts.values(), proxy_pools=proxy_pools.values())
        self._scrubber = own if scrubber is None else scrubber | own
        # A private registry unless the worker hands its own (the one it serves).
        self.metrics = metrics if metrics is not None else Metrics()
        self._proxy_pools = dict(proxy_pools)
        for pool in self._proxy_pools.values():
            # Fail at worker start, not on the first create, if a template is broken.
            resolve_proxy(pool, idempotency_key="check", ttl=0)
        self._clients: dict[str, BitCloudPhoneClient] = {
            name: BitCloudPhoneClient(
                base_url=account.base_url,
                api_key=account.api_key,
                timeout=account.timeout_seconds,
                transport=transport,
                metrics=self.metrics,
                scrubber=self._scrubber,
            )
            for name, account in accounts.items()
        }
        # (account, pool) -> (monotonic time, wall time, devices) of the last listing
        self._listings: dict[tuple[str, str], tuple[float, datetime, list[DeviceInfo]]] = {}
        self._listings_swept = time.monotonic()

    def __repr__(self) -> str:
        return (
            f"DeviceActivities(accounts={sorted(self._clients)!r}, "
            f"proxy_pools={sorted(self._proxy_pools)!r})"
        )

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    # ------------------------------------------------------------ helpers

    def _client(self, account: str) -> BitCloudPhoneClient:
        client = self._clients.get(account)
        if client is None:
            raise configuration_error(ErrorType.UNKNOWN_ACCOUNT, self._unknown_account(account))
        return client

    def _unknown_account(self, account: str) -> str:
        known = ", ".join(sorted(self._clients)) or "(none)"
        return f"unknown account {account!r} (providerCredentialRef); known: {known}"

    def _unknown_proxy_pool(self, pool: str) -> str:
        known = ", ".join(sorted(self._proxy_pools)) or "(none)"
        return f"unknown proxy pool {pool!r} (proxy.poolRef); known: {known}"

    async def _pool_devices(self, account: str, pool: str) -> list[DeviceInfo]:
        """The pool's devices at the provider that are not `terminated` (raises ProviderError)."""
        raw = await self._client(account).list_devices(labels={LABEL_POOL: pool})
        devices = [device_info(d) for d in raw if d.get("status") != DeviceStatus.TERMINATED]
        for d in devices:
            self.metrics.device_seen(
                d.id, d.status, created_at=d.created_at, updated_at=d.updated_at
            )
        self._remember(account, pool, devices)
        return devices

    def _remember(self, account: str, pool: str, devices: list[DeviceInfo]) -> None:
        now = time.monotonic()
        self._listings[(account, pool)] = (now, datetime.now(UTC), devices)
        if now - self._listings_swept >= LISTING_KEEP_SECONDS:
            self._listings_swept = now
            for key, (at, _, _) in list(self._listings.items()):
                if now - at > LISTING_KEEP_SECONDS:
                    del self._listings[key]

    def _shared_listing(
        self, account: str, pool: str, max_age: float
    ) -> tuple[datetime, list[DeviceInfo]] | None:
        """(when it was made, the listing): this process's last listing of the pool if
        at most `max_age` seconds old, else None."""
        hit = self._listings.get((account, pool))
        if max_age > 0 and hit is not None and time.monotonic() - hit[0] <= max_age:
            return hit[1], hit[2]
        return None

    async def _new_listing(self, account: str, pool: str) -> tuple[datetime, list[DeviceInfo]]:
        """(when it was made, the listing) of a provider read now (raises ProviderError)."""
        devices = await self._pool_devices(account, pool)
        return self._listings[(account, pool)][1], devices

    # ------------------------------------------------------------ activities

    def pool_queue_activities(self) -> list[Any]:
        """The short activities the `devicepool` task queue serves (all but creates and watches)."""
        return [
            self.pool_settings,
            self.check_pool_refs,
            self.list_devices,
            self.get_statuses,
            self.region_status,
            self.terminate_device,
            self.terminate_pool,
            self.pool_running,
            self.running_workflows,
            ledger_hold,
            *self.orphan_activities(),
        ]

    def watch_queue_activities(self) -> list[Any]:
        """What the `devicepool-watch` task queue serves: the long, mostly sleeping watches."""
        return [self.watch_devices, self.watch_health]

    def account_queue_activities(self) -> list[Any]:
        """What each account's own task queue serves: creates, under its window."""
        return [self.create_device]

    @activity.defn
    async def pool_settings(self) -> PoolSettings:
        return self._settings.model_copy()

    @activity.defn
    async def check_pool_refs(self, input: CheckRefsInput) -> CheckRefsResult:
        problems: list[str] = []
        if input.account not in self._clients:
            problems.append(self._unknown_account(input.account))
        if input.proxy_pool is not None and input.proxy_pool not in self._proxy_pools:
            problems.append(self._unknown_proxy_pool(input.proxy_pool))
        return CheckRefsResult(problems=problems)

    @activity.defn
    async def list_devices(self, input: ListDevicesInput) -> ListDevicesResult:
        try:
            async with heartbeating():
                devices = await self._pool_devices(input.account, input.pool)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        if input.compact:
            return ListDevicesResult(rows=device_rows(devices, pool=input.pool))
        return ListDevicesResult(devices=devices)

    @activity.defn
    async def watch_devices(self, input: WatchDevicesInput) -> WatchDevicesResult:
        self._client(input.account)  # an unknown account fails at once, not at the deadline
        deadline = time.monotonic() + input.max_seconds
        health_due = time.monotonic() + input.health_every_seconds
        poll = max(input.poll_seconds, 0.0)
        devices: list[DeviceInfo] | None = None
        last_error: ProviderError | None = None
        while True:
            try:
                # Heartbeats while listing too: a slow or endless listing stays cancellable.
                async with heartbeating():
                    devices = await self._pool_devices(input.account, input.pool)
                last_error = None
            except ProviderError as exc:
                if not exc.retryable:
                    raise to_application_error(exc) from exc
                last_error = exc
                activity.logger.warning(
                    "pool %s: listing devices failed, will poll again: %s", input.pool, exc
                )
            if devices is not None and last_error is None:
                fingerprint = device_fingerprint(devices)
                if fingerprint != input.fingerprint:
                    return _watch_answer(input, devices, fingerprint, changed=True)
            if input.health_workflow_id and devices is not None and time.monotonic() >= health_due:
                health_due = time.monotonic() + input.health_every_seconds
                if not await _still_running(input.health_workflow_id):
                    answer = _watch_answer(
                        input, devices, device_fingerprint(devices), changed=False
                    )
                    return answer.model_copy(update={"health_ended": True})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if devices is None:
                    # Never saw the pool at all: an empty "unchanged" answer would lie.
                    assert last_error is not None
                    raise to_application_error(last_error) from last_error
                return _watch_answer(input, devices, device_fingerprint(devices), changed=False)
            activity.heartbeat()
            # Cancellation (delivered through the heartbeat) lands here as CancelledError.
            await asyncio.sleep(min(poll, remaining))

    @activity.defn
    async def watch_health(self, input: WatchHealthInput) -> WatchHealthResult:
        """Poll every `poll_seconds` until the suspects differ from `fingerprint`, the
        pool is gone, `until` (after a fresh read there) or `max_seconds`.

        A poll reads the pool's listing this process made for the pool's own
        watch when there is one at most `reuse_listing_seconds` old; otherwise
        the provider, but no sooner than `own_read_seconds` after this watch's
        last read of its own (a poll in between only asks whether the pool still
        runs). What it answers is always a read of its own: a change seen on the
        pool's listing is read again first.

        Each poll first asks Temporal whether the pool still runs (not knowing is
        running); a provider error is polled past, except on a fresh read (`once`,
        `until`), where the check must not judge on old data: it raises.
        """
        self._client(input.account)  # an unknown account fails at once, not at the deadline
        start = time.monotonic()
        deadline = start + input.max_seconds
        until = (
            None
            if input.until is None
            else start + (input.until - datetime.now(UTC)).total_seconds()
        )
        poll = max(input.poll_seconds, 0.0)
        startup = timedelta(seconds=input.startup_timeout_seconds)
        run = input.pool_run
        previous: datetime | None = None
        last: WatchHealthResult | None = None
        last_error: ProviderError | None = None
        own_read_at: float | None = None  # monotonic time of this watch's last provider read
        while True:
            fresh = input.once or (until is not None and time.monotonic() >= until)
            pool = await self._pool_run(run)
            run = run.model_copy(update={"first_run_id": pool.first_run_id or run.first_run_id})
            if not pool.running:
                return WatchHealthResult(
                    pool=pool, checked_at=datetime.now(UTC), previous_check_at=previous
                )
            shared = (
                None
                if fresh
                else self._shared_listing(input.account, input.pool, input.reuse_listing_seconds)
            )
            found = (
                None
                if shared is None
                else _health_answer(pool, shared, startup=startup, previous=previous)
            )
            # A change on that listing is read again before it is answered: the check
            # acts on an answer at once (a device whose clock ran out is terminated, as
            # when a pause ends), and the listing may be `reuse_listing_seconds` old: a
            # device back since then would go.
            confirm = found is not None and found.fingerprint != input.fingerprint
            if confirm:
                found = None
            # No listing of the pool's own watch to reuse (it runs on another worker, or
            # lists less often than this watch polls): this watch's own reads keep their
            # spacing, or the pool would cost the provider a read per health poll on top
            # of its resyncs.
            put_off = (
                found is None
                and not (fresh or confirm)
                and own_read_at is not None
                and time.monotonic() - own_read_at < input.own_read_seconds
            )
            if found is None and not put_off:
                own_read_at = time.monotonic()
                try:
                    async with heartbeating():
                        listing = await self._new_listing(input.account, input.pool)
                    last_error = None
                    found = _health_answer(pool, listing, startup=startup, previous=previous)
                except ProviderError as exc:
                    if fresh or not exc.retryable:
                        raise to_application_error(exc) from exc
                    last_error = exc
                    activity.logger.warning(
                        "pool %s: health listing failed, will poll again: %s", input.pool, exc
                    )
            if found is not None:
                last = found
                if fresh or found.fingerprint != input.fingerprint:
                    return found
                previous = found.checked_at
            now = time.monotonic()
            if now >= deadline:
                if last is None:
                    assert last_error is not None
                    raise to_application_error(last_error) from last_error
                return last
            activity.heartbeat()
            wait = min(poll, deadline - now)
            if until is not None:
                wait = min(wait, max(until - now, 0.0))
            # Cancellation (delivered through the heartbeat) lands here as CancelledError.
            await asyncio.sleep(wait)

    async def _pool_run(self, run: PoolRunInput) -> PoolRunResult:
        """`pool_running`, where not knowing (Temporal did not answer) counts as running."""
        try:
            return await pool_runs.pool_running(activity.client(), run)
        except RPCError as err:
            activity.logger.warning("pool %s: not known if still running: %s", run.workflow_id, err)
            return PoolRunResult(running=True, first_run_id=run.first_run_id, status="UNKNOWN")

    @activity.defn
    async def create_device(self, input: CreateDeviceInput) -> CreateDeviceResult:
        client = self._client(input.account)
        proxy_body: dict[str, Any] | None = None
        if input.proxy_pool is not None:
            proxy_settings = self._proxy_pools.get(input.proxy_pool)
            if proxy_settings is None:
                raise configuration_error(
                    ErrorType.UNKNOWN_PROXY_POOL, self._unknown_proxy_pool(input.proxy_pool)
                )
            proxy_body = resolve_proxy(
                proxy_settings, idempotency_key=input.idempotency_key, ttl=input.sticky_ttl
            ).body()
        labels = {**input.extra_labels, LABEL_POOL: input.pool, LABEL_MANAGED_BY: MANAGED_BY}
        activity.logger.info(
            "pool %s: creating device %s (key %s, proxy pool %s)",
            input.pool,
            input.name,
            input.idempotency_key,
            input.proxy_pool,
        )
        try:
            raw = await finish_even_if_cancelled(
                client.create_device(
                    input.platform,
                    region=input.region,
                    os_version=input.os_version,
                    name=input.name,
                    labels=labels,
                    proxy=proxy_body,
                    idempotency_key=input.idempotency_key,
                )
            )
        except ProviderError as exc:
            activity.logger.info("pool %s: create %s failed: %s", input.pool, input.name, exc)
            failure = to_application_error(exc)
            # A 429 the ledger did not prevent: it pauses the account and restarts slowly.
            await report_rate_limited(failure, account=input.account, pool=input.pool)
            raise failure from exc
        device = device_info(raw)
        self.metrics.device_created(device.id, device.created_at)
        return CreateDeviceResult(device=device)

    @activity.defn
    async def get_statuses(self, input: GetStatusesInput) -> GetStatusesResult:
        client = self._client(input.account)
        try:
            async with heartbeating():
                items, not_found = await client.batch_status(input.ids)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        infos = [device_status_info(item) for item in items]
        for info in infos:
            self.metrics.device_seen(info.id, info.status, updated_at=info.updated_at)
        return GetStatusesResult(items=infos, not_found=not_found)

    @activity.defn
    async def terminate_device(self, input: TerminateDeviceInput) -> TerminateDeviceResult:
        client = self._client(input.account)
        async with heartbeating():
            try:
                if input.only_if_idle:
                    # A scale-down: never counted as a replacement.
                    if busy := await self._not_idle(client, input.device_id, input.idle_since):
                        return TerminateDeviceResult(device_id=input.device_id, skipped=busy)
                else:
                    await self._count_replacement(client, input)
            except NotFoundError:
                return TerminateDeviceResult(device_id=input.device_id, already_gone=True)
            try:
                await client.delete_device(input.device_id)
            except NotFoundError:
                return TerminateDeviceResult(device_id=input.device_id, already_gone=True)
            except ProviderError as exc:
                raise to_application_error(exc) from exc
        return TerminateDeviceResult(device_id=input.device_id)

    async def _not_idle(
        self, client: BitCloudPhoneClient, device_id: str, seen_idle_since: datetime | None
    ) -> str | None:
        """Why the device serves right now (None if not): read just before a scale-down.

        Idle (ready, no session, not used since the plan's listing saw it idle
        since `seen_idle_since`) or still booting may go; a scale-down removes
        a booting device before an idle one.
        """
        try:
            raw = await client.get_device(device_id)
        except NotFoundError:
            raise
        except ProviderError as exc:
            # Unknown is not idle: the next pass tries again.
            return f"status unknown ({exc.error_type.value})"
        status = str(raw.get("status") or "")
        if status not in (DeviceStatus.READY, DeviceStatus.PROVISIONING):
            return f"status {status}"
        if raw.get("sessionActive"):
            return "session active"
        if seen_idle_since is not None and status == DeviceStatus.READY:
            since = device_info(raw).idle_since
            # A second of slack: listings travel as compact rows, to the millisecond.
            if since > seen_idle_since + timedelta(seconds=1):
                return f"used since the plan's listing (at {since.isoformat(timespec='seconds')})"
        return None

    async def _count_replacement(
        self, client: BitCloudPhoneClient, input: TerminateDeviceInput
    ) -> None:
        """Count `devicepool_replacements_total` for a device removed because it is unhealthy.

        Without a reason from the caller, one GET tells offline/failed/never-booted
        devices (replacements) from idle ones (a scale-down). Only a 404 matters
        to the caller (the device is gone); any other failure of this lookup
        must not stop the termination, so it only costs the count.
        """
        pool, reason = input.pool, input.reason
        if reason is None:
            try:
                raw = await client.get_device(input.device_id)
            except NotFoundError:
                raise
            except ProviderError as exc:
                activity.logger.info(
                    "device %s: status unknown before delete: %s", input.device_id, exc
                )
                return
            reason = replacement_reason(str(raw.get("status") or ""))
            pool = pool or str((raw.get("labels") or {}).get(LABEL_POOL) or "")
        if reason is not None and activity.info().attempt == 1:
            self.metrics.device_replaced(pool or "unknown", reason)

    @activity.defn
    async def region_status(self, input: RegionStatusInput) -> RegionStatusResult:
        """The provider's word on one region (`up`, `degraded`, `down`, or `unknown`)."""
        try:
            regions = await self._client(input.account).regions()
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        for region in regions:
            if region.get("name") == input.region:
                return RegionStatusResult(region=input.region, status=str(region.get("status")))
        return RegionStatusResult(region=input.region, status="unknown")

    @activity.defn
    async def running_workflows(self, input: RunningWorkflowsInput) -> RunningWorkflowsResult:
        """Which of these workflows still run (a batch that ended without reporting is lost).

        Asks Temporal, not the provider: through the client the worker polls with.
        An id Temporal does not know is not running.
        """
        client = activity.client()
        running = []
        for workflow_id in input.workflow_ids:
            try:
                described = await client.get_workflow_handle(workflow_id).describe()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                continue
            if described.status == WorkflowExecutionStatus.RUNNING:
                running.append(workflow_id)
        return RunningWorkflowsResult(running=running)

    @activity.defn
    async def terminate_pool(self, input: TerminatePoolInput) -> TerminatePoolResult:
        """Delete every device of the pool; succeed only once the provider lists none left.

        Devices still `terminating` make it raise a retryable error, so the
        activity's retry policy carries the finalizer until the provider is done.
        """
        client = self._client(input.account)
        deleted = 0
        try:
            async with heartbeating():
                for device in await self._pool_devices(input.account, input.pool):
                    activity.heartbeat(device.id)
                    if device.status == DeviceStatus.TERMINATING:
                        continue
                    try:
                        await client.delete_device(device.id)
                    except NotFoundError:
                        continue
                    deleted += 1
                left = await self._pool_devices(input.account, input.pool)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        if left:
            alive = sum(1 for d in left if d.status in ALIVE_STATUSES)
            activity.logger.info(
                "pool %s: %d device(s) left at the provider (%d terminating), will retry",
                input.pool,
                len(left),
                len(left) - alive,
            )
            raise ApplicationError(
                f"pool {input.pool!r}: {len(left)} device(s) not yet terminated "
                f"({len(left) - alive} terminating); deleted {deleted} in this attempt",
                TerminatePoolResult(terminated=deleted, remaining=len(left)).to_json_dict(),
                type=TEARDOWN_PENDING.value,
                non_retryable=False,
                # Waiting on the provider is the expected path, not a failure to alert on.
                category=ApplicationErrorCategory.BENIGN,
            )
        activity.logger.info("pool %s: torn down (%d deleted in this attempt)", input.pool, deleted)
        return TerminatePoolResult(terminated=deleted, remaining=0)

    # ------------------------------------------------ asks Temporal, not the provider

    @activity.defn
    async def pool_running(self, input: PoolRunInput) -> PoolRunResult:
        """Is the pool that started a health check still running? Through the
        client the worker polls with (`activities.pool_runs`)."""
        return await pool_runs.pool_running(activity.client(), input)
