"""The orphan sweep's side effects: find devices whose pool is gone, terminate them.

`OrphanActivities` is a mixin of `DeviceActivities`. `find_orphans` answers at most
`MAX_ORPHANS_PER_SCAN` (the oldest); `terminate_orphans` reads each device and its pool
again right before it is removed, and keeps (with the reason) what it cannot remove;
`count_devices` counts the account's managed devices (the ledger's `spendCap`). What
an orphan is: docs/pools.md, "Orphans".
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError

from devicepool.activities import orphan_models as om
from devicepool.activities.accounts import AccountProviders
from devicepool.activities.definitions import OrphanActivityDefinitions
from devicepool.activities.errors import NotFoundError, ProviderError, to_application_error
from devicepool.activities.heartbeats import heartbeating
from devicepool.activities.models import DeviceStatus
from devicepool.activities.pool_runs import PoolCheck, check_pool
from devicepool.activities.providers.base import (
    ParkedShutdown,
    ParkedSweep,
    Provider,
    ProviderDevice,
    provider_call,
)
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY

__all__ = ["OrphanActivities"]

# Pools asked about at once (one `describe` each): 1,000 pools in seconds, not a minute.
DESCRIBES_AT_ONCE = 20
# The parked phones' pass inside `find_orphans` (R24 #3): no shutdown started past this
# share of the attempt's start-to-close (set in workflows/orphans/workflow.py, 2 min: 30 s),
# the pass cut at twice that, and never later than this margin before the end.
PARKED_PASS_SHARE = 0.25
PARKED_PASS_MARGIN = 0.1
PARKED_PASS_DEFAULT = timedelta(minutes=2)  # no start-to-close given
# Devices on their way out are the provider's business now, not orphans.
_LEAVING = frozenset({DeviceStatus.TERMINATING, DeviceStatus.TERMINATED})


def _orphan(device: ProviderDevice, check: PoolCheck) -> om.OrphanDevice:
    info = device.info
    return om.OrphanDevice(
        id=info.id,
        pool=info.labels.get(LABEL_POOL, ""),
        status=info.status,
        platform=device.platform,
        region=info.region,
        created_at=info.created_at,
        pool_state=check.state,
    )


class OrphanActivities(AccountProviders, OrphanActivityDefinitions):
    """The orphan sweep's activities, over the accounts' adapters and metrics."""

    def orphan_activities(self) -> list[Any]:
        return [self.find_orphans, self.terminate_orphans, self.count_devices]

    @activity.defn
    async def find_orphans(self, input: om.FindOrphansInput) -> om.FindOrphansResult:
        devices = await self._managed(input.account, sweeping=True)
        by_pool: dict[str, list[ProviderDevice]] = {}
        for device in devices:
            by_pool.setdefault(device.info.labels.get(LABEL_POOL, ""), []).append(device)
        temporal = activity.client()
        gate = asyncio.Semaphore(DESCRIBES_AT_ONCE)

        async def check(pool: str) -> PoolCheck:
            async with gate:
                activity.heartbeat(pool)
                return await check_pool(temporal, pool, input.account)

        pools = sorted(by_pool)
        checks = await asyncio.gather(*(check(pool) for pool in pools))
        orphans = sorted(
            (
                _orphan(d, found)
                for pool, found in zip(pools, checks, strict=True)
                if found.orphaned
                for d in by_pool[pool]
            ),
            key=lambda o: (o.created_at, o.id),
        )
        # After the orphans are known, within a share of this attempt's time (R24 #3).
        parked = await self._shut_down_parked(input.account)
        if len(orphans) > om.MAX_ORPHANS_PER_SCAN:
            activity.logger.warning(
                "orphan sweep of %s: %d orphans, the oldest %d handled this scan",
                input.account,
                len(orphans),
                om.MAX_ORPHANS_PER_SCAN,
            )
        return om.FindOrphansResult(
            orphans=orphans[: om.MAX_ORPHANS_PER_SCAN],
            orphans_found=len(orphans),
            devices=len(devices),
            pools=len(by_pool),
            parked_shut_down=parked,
        )

    async def _shut_down_parked(self, account: str) -> int:
        """Parked profiles still powered, sent a shutdown again (an adapter that parks
        them: `ParkedSweep`); how many. Bounded by this attempt's start-to-close: none
        started past `PARKED_PASS_SHARE` of it, and the pass is cut at twice that (or
        `PARKED_PASS_MARGIN` of it before the end); the rest waits for the next scan. A
        failure is logged and what was sent before it is still said: the scan goes on."""
        provider = self._provider(account)
        if not isinstance(provider, ParkedSweep):
            return 0
        info = activity.info()
        limit = (info.start_to_close_timeout or PARKED_PASS_DEFAULT).total_seconds()
        elapsed = (datetime.now(UTC) - info.started_time).total_seconds()
        budget = PARKED_PASS_SHARE * limit
        cut = min(2 * budget, limit - elapsed - PARKED_PASS_MARGIN * limit)
        sent: list[ParkedShutdown] = []
        try:
            if cut <= 0:
                raise TimeoutError
            async with heartbeating(), asyncio.timeout(cut):
                with provider_call(sweeping=True):
                    await provider.shut_down_parked(budget, sent)
        except TimeoutError:
            activity.logger.warning(
                "orphan sweep of %s: parked phones' pass cut at its time budget (%d sent); "
                "the rest next scan",
                account,
                len(sent),
            )
        except ProviderError as exc:
            activity.logger.warning(
                "orphan sweep of %s: parked phones not all checked for power (%s)",
                account,
                exc.error_type.value,
            )
        for parked in sent:
            self.metrics.parked_phone_shut_down(account)
            activity.logger.warning(
                "orphan sweep of %s: cloud phone %s, parked %s for pool %s, still listed "
                "powered (status %s) past the grace after its removal's shutdown: shut down again",
                account,
                parked.phone_id,
                parked.state,
                parked.pool,
                parked.status,
            )
        return len(sent)

    @activity.defn
    async def count_devices(self, input: om.CountDevicesInput) -> om.CountDevicesResult:
        return om.CountDevicesResult(devices=len(await self._managed(input.account)))

    async def _managed(self, account: str, *, sweeping: bool = False) -> list[ProviderDevice]:
        """The account's managed devices, any pool, not on their way out (`sweeping`: as
        the orphan sweep sees them, a GeeLark node's reserve phones too)."""
        provider = self._provider(account)
        try:
            async with heartbeating():
                with provider_call(sweeping=sweeping):
                    listed = await provider.list_managed()
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        return [d for d in listed if d.info.status not in _LEAVING]

    @activity.defn
    async def terminate_orphans(self, input: om.TerminateOrphansInput) -> om.TerminateOrphansResult:
        provider = self._provider(input.account)
        temporal = activity.client()
        checks: dict[str, PoolCheck] = {}
        result = om.TerminateOrphansResult()
        for device_id in input.device_ids:
            activity.heartbeat(device_id)
            with provider_call(sweeping=True):
                kept = await self._terminate_orphan(
                    provider, temporal, input, device_id, checks, result.terminated
                )
            if kept is not None:
                result.kept.append(kept)
        return result

    async def _terminate_orphan(
        self,
        provider: Provider,
        temporal: Client,
        input: om.TerminateOrphansInput,
        device_id: str,
        checks: dict[str, PoolCheck],
        terminated: list[om.OrphanDevice],
    ) -> om.KeptDevice | None:
        """Terminate one device if it is still an orphan; else why it was kept."""

        def kept(why: str, *, settled: bool = True) -> om.KeptDevice:
            return om.KeptDevice(id=device_id, why=why, settled=settled)

        try:
            device = await provider.get_device(device_id)
        except NotFoundError:
            return kept("already gone")
        except ProviderError as exc:
            return kept(f"status unknown ({exc.error_type.value})", settled=False)
        labels = device.info.labels
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
            return kept("not managed by devicepool")
        if device.info.status in _LEAVING:
            return kept(f"already {device.info.status}")
        pool = labels.get(LABEL_POOL, "")
        if pool not in checks:
            try:
                checks[pool] = await check_pool(temporal, pool, input.account)
            except RPCError as err:
                return kept(f"pool {pool} not known to Temporal ({err.status.name})", settled=False)
        check = checks[pool]
        if not check.orphaned:
            return kept(f"pool {pool} is running")
        try:
            await provider.remove_device(device_id)
        except NotFoundError:
            return kept("already gone")
        except ProviderError as exc:
            return kept(f"delete failed ({exc.error_type.value})", settled=False)
        orphan = _orphan(device, check)
        terminated.append(orphan)
        self.metrics.orphan_terminated(input.account, orphan.platform)
        activity.logger.warning(
            "orphan sweep: terminated device %s of pool %s (account %s, %s): "
            "its pool's workflow is %s (%s)",
            device_id,
            pool,
            input.account,
            orphan.platform or "unknown platform",
            check.state,
            "asked by `devicepool orphans --delete`"
            if input.reason == "manual"
            else "orphaned past the grace period",
        )
        return None
