"""`DeviceActivities`: every side effect of a DevicePool, as bound activities over the provider seam.

Each account is reached through its adapter (`AccountProviders`), never through HTTP
here; every provider failure leaves through `errors.to_application_error`, and provider
calls run under `heartbeats.heartbeating()`. What a create does is `create_device`,
whole. The watches, the orphan sweep, the node registry read and the questions to
Temporal are in `watches`, `orphans`, `node_registry` and `pool_runs`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from devicepool.activities import connect_models as cm
from devicepool.activities import models as am
from devicepool.activities import pool_runs
from devicepool.activities.accounts import REGIONS_RECHECK_SECONDS
from devicepool.activities.definitions import DeviceActivityDefinitions
from devicepool.activities.errors import (
    TEARDOWN_PENDING,
    NotFoundError,
    ProviderError,
    QuotaExceededError,
    configuration_error,
    to_application_error,
)
from devicepool.activities.heartbeats import finish_even_if_cancelled, heartbeating
from devicepool.activities.ledger_calls import ledger_hold, report_rate_limited
from devicepool.activities.metrics import replacement_reason
from devicepool.activities.node_registry import NodeRegistryActivities
from devicepool.activities.orphans import OrphanActivities
from devicepool.activities.providers.base import NewDevice, Provider, provider_call
from devicepool.activities.proxy import ResolvedProxy, resolve_proxy
from devicepool.activities.watches import WatchActivities
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_TEMPLATE_HASH, MANAGED_BY

__all__ = ["DeviceActivities"]


class DeviceActivities(
    WatchActivities, OrphanActivities, NodeRegistryActivities, DeviceActivityDefinitions
):
    """Bound activities over the worker's accounts (one adapter each) and proxy pools."""

    def __repr__(self) -> str:
        return (
            f"DeviceActivities(accounts={sorted(self._providers)!r}, "
            f"proxy_pools={sorted(self._proxy_pools)!r})"
        )

    def pool_queue_activities(self) -> list[Any]:
        """The short activities the `devicepool` task queue serves (all but creates and watches)."""
        return [
            *self._short_provider_activities(),
            self.pool_settings,
            self.pool_running,
            self.running_workflows,
            # BrowserPool placement: the node registry read (activities/node_registry.py).
            self.live_nodes,
            ledger_hold,
        ]

    def watch_queue_activities(self) -> list[Any]:
        """What the `devicepool-watch` task queue serves: the long, mostly sleeping watches."""
        return [self.watch_devices, self.watch_health]

    def node_queue_activities(self) -> list[Any]:
        """What a node worker's queue serves for the cloud-phone accounts it serves: every
        short activity that reaches the provider, creates too (`worker/node.py`)."""
        return [*self._short_provider_activities(), self.create_device]

    def _short_provider_activities(self) -> list[Any]:
        return [
            self.check_pool_refs,
            self.list_devices,
            self.get_statuses,
            self.region_status,
            self.terminate_device,
            self.terminate_pool,
            self.lease_connect,
            self.reset_device,
            *self.orphan_activities(),
        ]

    def account_queue_activities(self) -> list[Any]:
        """What each account's own task queue serves: creates, under its window."""
        return [self.create_device]

    # ------------------------------------------------------------ create

    @activity.defn
    async def create_device(self, input: am.CreateDeviceInput) -> am.CreateDeviceResult:
        """Create one device of the pool's template (the only create there is)."""
        provider = self._provider(input.account)
        template = input.template
        new = NewDevice(
            template=template,
            name=input.name,
            labels={
                **input.extra_labels,
                LABEL_POOL: input.pool,
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_TEMPLATE_HASH: am.template_hash(template),
            },
            idempotency_key=input.idempotency_key,
            proxy=self._proxy(template.proxy_pool, input.idempotency_key, template.sticky_ttl),
        )
        activity.logger.info(
            "pool %s: creating device %s (key %s, proxy pool %s)",
            input.pool,
            input.name,
            input.idempotency_key,
            template.proxy_pool,
        )
        try:
            with provider_call(
                pool=input.pool, replacement=input.replacement, claim_keep=input.reserve_keep
            ):
                device = await finish_even_if_cancelled(provider.create_device(new))
        except ProviderError as exc:
            activity.logger.info("pool %s: create %s failed: %s", input.pool, input.name, exc)
            failure = to_application_error(exc)
            # A 429 the ledger did not prevent: it pauses the account and restarts slowly.
            await report_rate_limited(failure, account=input.account, pool=input.pool)
            raise failure from exc
        self.metrics.device_created(device.id, device.created_at)
        return am.CreateDeviceResult(device=device)

    def _proxy(self, pool: str | None, idempotency_key: str, ttl: int) -> ResolvedProxy | None:
        """The proxy pool's gateway for one create (its sticky session derived from the key)."""
        if pool is None:
            return None
        settings = self._proxy_pools.get(pool)
        if settings is None:
            raise configuration_error(ErrorType.UNKNOWN_PROXY_POOL, self._unknown_proxy_pool(pool))
        return resolve_proxy(settings, idempotency_key=idempotency_key, ttl=ttl)

    # ------------------------------------------------------------ reads

    @activity.defn
    async def pool_settings(self) -> am.PoolSettings:
        return self._settings.model_copy()

    @activity.defn
    async def check_pool_refs(self, input: am.CheckRefsInput) -> am.CheckRefsResult:
        problems: list[str] = []
        if input.account not in self._providers:
            problems.append(self._unknown_account(input.account))
        if input.proxy_pool is not None and input.proxy_pool not in self._proxy_pools:
            problems.append(self._unknown_proxy_pool(input.proxy_pool))
        if input.platform is not None and input.account in self._providers:
            refused = self._providers[input.account].platform_problem(input.platform)
            if refused is not None:
                problems.append(f"{refused} (providerCredentialRef {input.account!r})")
            # A proxy pool the account's devices cannot use (an unknown one is said above).
            proxy = self._proxy_pools.get(input.proxy_pool) if input.proxy_pool else None
            if input.proxy_pool is None or proxy is not None:
                lacking = self._providers[input.account].proxy_problem(proxy)
                if lacking is not None:
                    problems.append(lacking)
        if input.region is not None and input.account in self._providers:
            known = await self._region_names(input.account)
            if known is not None and input.region not in known:
                # A region the provider opened since the list was kept: look once more.
                known = await self._region_names(input.account, newer_than=REGIONS_RECHECK_SECONDS)
            if known is not None and input.region not in known:
                problems.append(self._unknown_region(input.region, known))
        return am.CheckRefsResult(problems=problems)

    @activity.defn
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult:
        try:
            async with heartbeating():
                devices = await self._pool_devices(input.account, input.pool)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        return am.ListDevicesResult.answer(devices, input)

    @activity.defn
    async def get_statuses(self, input: am.GetStatusesInput) -> am.GetStatusesResult:
        provider = self._provider(input.account)
        try:
            with provider_call(pool=input.pool):
                async with heartbeating():
                    infos, not_found = await provider.read_statuses(input.ids)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        for info in infos:
            self.metrics.device_seen(info.id, info.status, updated_at=info.updated_at)
        return am.GetStatusesResult(items=infos, not_found=not_found)

    @activity.defn
    async def region_status(self, input: am.RegionStatusInput) -> am.RegionStatusResult:
        """The provider's word on one region (`up`, `degraded`, `down`, or `unknown`)."""
        try:
            status = await self._provider(input.account).region_status(input.region)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        return am.RegionStatusResult(region=input.region, status=status)

    @activity.defn
    async def lease_connect(self, input: cm.LeaseConnectInput) -> cm.ConnectInfo:
        """A leased device's connect info, for the `lease_connect` update. Refused while this
        worker writes payloads in clear: its result is written to history."""
        if not self._settings.history_encrypted:
            raise ApplicationError(
                cm.NOT_ENCRYPTED, type=ErrorType.INVALID_STATE.value, non_retryable=True
            )
        try:
            with provider_call(pool=input.pool):
                info = await self._provider(input.account).connect_info(input.device)
        except ProviderError as exc:
            raise to_application_error(exc) from None
        return info

    @activity.defn
    async def reset_device(self, input: am.ResetDeviceInput) -> am.ResetDeviceResult:
        """A used device cleared for its next holder (a cloud phone's fresh start); where the
        provider has none, or none is left this month, the answer says so (the pool
        replaces the device)."""
        provider = self._provider(input.account)
        device_id = input.device_id
        async with heartbeating():
            try:
                with provider_call(pool=input.pool):
                    done = await provider.reset_device(device_id)
            except NotFoundError:
                return am.ResetDeviceResult(device_id=device_id, outcome=am.ResetOutcome.GONE)
            except QuotaExceededError as exc:
                return am.ResetDeviceResult(
                    device_id=device_id, outcome=am.ResetOutcome.QUOTA_USED, message=str(exc)
                )
            except ProviderError as exc:
                raise to_application_error(exc) from exc
        outcome = am.ResetOutcome.RESET if done else am.ResetOutcome.UNSUPPORTED
        return am.ResetDeviceResult(device_id=device_id, outcome=outcome)

    # ------------------------------------------------------------ removals

    @activity.defn
    async def terminate_device(self, input: am.TerminateDeviceInput) -> am.TerminateDeviceResult:
        provider = self._provider(input.account)
        # A device that must go (unhealthy, replaced) is a replacement's first step.
        with provider_call(
            pool=input.pool or "",
            replacement=not input.only_if_idle,
            reserve_keep=input.reserve_keep,
            used=input.used,
            retiring=input.retiring,
        ):
            return await self._terminate_device(provider, input)

    async def _terminate_device(
        self, provider: Provider, input: am.TerminateDeviceInput
    ) -> am.TerminateDeviceResult:
        async with heartbeating():
            try:
                if input.only_if_idle:
                    # A scale-down: never counted as a replacement.
                    if busy := await self._not_idle(provider, input.device_id, input.idle_since):
                        return am.TerminateDeviceResult(device_id=input.device_id, skipped=busy)
                else:
                    await self._count_replacement(provider, input)
                await provider.remove_device(input.device_id)
            except NotFoundError:
                return am.TerminateDeviceResult(device_id=input.device_id, already_gone=True)
            except ProviderError as exc:
                raise to_application_error(exc) from exc
        return am.TerminateDeviceResult(device_id=input.device_id)

    async def _not_idle(
        self, provider: Provider, device_id: str, seen_idle_since: datetime | None
    ) -> str | None:
        """Why the device serves right now (None if not): read just before a scale-down.

        Idle (ready, no session, not used since the plan's listing saw it idle
        since `seen_idle_since`) or still booting may go; a scale-down removes
        a booting device before an idle one.
        """
        try:
            device = (await provider.get_device(device_id)).info
        except NotFoundError:
            raise
        except ProviderError as exc:
            # Unknown is not idle: the next pass tries again.
            return f"status unknown ({exc.error_type.value})"
        if device.status not in (am.DeviceStatus.READY, am.DeviceStatus.PROVISIONING):
            return f"status {device.status}"
        if device.session_active:
            return "session active"
        if seen_idle_since is not None and device.status == am.DeviceStatus.READY:
            since = device.idle_since
            # A second of slack: listings travel as compact rows, to the millisecond.
            if since > seen_idle_since + timedelta(seconds=1):
                return f"used since the plan's listing (at {since.isoformat(timespec='seconds')})"
        return None

    async def _count_replacement(self, provider: Provider, input: am.TerminateDeviceInput) -> None:
        """Count `devicepool_replacements_total` for a device removed because it is unhealthy.

        Without a reason from the caller, one read tells offline/failed/never-booted
        devices (replacements) from idle ones (a scale-down). Only a 404 matters
        to the caller (the device is gone); any other failure of this lookup
        must not stop the termination, so it only costs the count.
        """
        pool, reason = input.pool, input.reason
        if reason is None:
            try:
                device = (await provider.get_device(input.device_id)).info
            except NotFoundError:
                raise
            except ProviderError as exc:
                activity.logger.info(
                    "device %s: status unknown before delete: %s", input.device_id, exc
                )
                return
            reason = replacement_reason(device.status)
            pool = pool or device.labels.get(LABEL_POOL, "")
        if reason is not None and activity.info().attempt == 1:
            self.metrics.device_replaced(pool or "unknown", reason)

    @activity.defn
    async def terminate_pool(self, input: am.TerminatePoolInput) -> am.TerminatePoolResult:
        """Remove every device of the pool; succeed only once the provider lists none left.

        Devices still `terminating` make it raise a retryable error, so the
        activity's retry policy carries the finalizer until the provider is done.
        """
        provider = self._provider(input.account)
        deleted = 0
        try:
            with provider_call(pool=input.pool, deleting=True):
                async with heartbeating():
                    for device in await self._pool_devices(input.account, input.pool):
                        activity.heartbeat(device.id)
                        if device.status == am.DeviceStatus.TERMINATING:
                            continue
                        try:
                            await provider.remove_device(device.id)
                        except NotFoundError:
                            continue
                        deleted += 1
                    left = await self._pool_devices(input.account, input.pool)
                    # What the provider keeps of a pool (cloud phones' profiles) is let go last.
                    released = 0 if left else await provider.release_pool(input.pool)
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        if left:
            alive = sum(1 for d in left if d.status in am.ALIVE_STATUSES)
            activity.logger.info(
                "pool %s: %d device(s) left at the provider (%d terminating), will retry",
                input.pool,
                len(left),
                len(left) - alive,
            )
            raise ApplicationError(
                f"pool {input.pool!r}: {len(left)} device(s) not yet terminated "
                f"({len(left) - alive} terminating); deleted {deleted} in this attempt",
                am.TerminatePoolResult(terminated=deleted, remaining=len(left)).to_json_dict(),
                type=TEARDOWN_PENDING.value,
                non_retryable=False,
                # Waiting on the provider is the expected path, not a failure to alert on.
                category=ApplicationErrorCategory.BENIGN,
            )
        activity.logger.info(
            "pool %s: torn down (%d deleted in this attempt, %d profile(s) kept, retired)",
            input.pool,
            deleted,
            released,
        )
        return am.TerminatePoolResult(terminated=deleted, remaining=0, retired=released)

    # ------------------------------------------------ asks Temporal, not the provider

    @activity.defn
    async def pool_running(self, input: am.PoolRunInput) -> am.PoolRunResult:
        """Is the pool that started a health check or a batch still running?"""
        return await pool_runs.pool_running(activity.client(), input)

    @activity.defn
    async def running_workflows(self, input: am.RunningWorkflowsInput) -> am.RunningWorkflowsResult:
        """Which of these workflows still run (a batch that ended without reporting is lost)."""
        running = await pool_runs.workflows_running(activity.client(), input.workflow_ids)
        return am.RunningWorkflowsResult(running=running)
