"""The orphan sweep's side effects: find devices whose pool is gone, terminate them.

`OrphanActivities` is mixed into `DeviceActivities` (it uses its provider
clients and metrics) and implements `activities.definitions.OrphanActivityDefinitions`:

- `find_orphans` `FindOrphansInput` → `FindOrphansResult`: one listing of the
  account's devices labelled `managed-by=devicepool` (not terminating or
  terminated), grouped by their `pool` label, and one `describe` of each
  pool's workflow `devicepool/<pool>` at Temporal. A device is an orphan when
  that workflow is not running (terminated, failed, completed, timed out,
  unknown), or when the pool of that name that runs is on another account (it
  lists only its own account, so it would never see the device). Only the
  orphans come back, never the whole listing, and at most
  `MAX_ORPHANS_PER_SCAN` (the oldest): more are handled at later scans.
- `terminate_orphans` `TerminateOrphansInput` → `TerminateOrphansResult`:
  for each device, read it again at the provider and its pool again at
  Temporal right before the DELETE; a device whose pool runs by now (applied
  again) is kept. Each DELETE counts `devicepool_orphans_terminated_total
  {account, platform}` and logs one line. A failure on one device keeps it
  (with the reason) and never stops the others: the janitor tries again at its
  next scan.

"Running" here asks only whether the pool's workflow id has a running run:
any pool of that name on the account lists devices by its `pool` label, so it
adopts them; unlike a health check (`activities.pool_runs`), the chain of runs
does not matter.

`start_janitors` is the worker's start-up step: a signal-with-start of each
account's janitor, as `activities.permits.register_accounts` does for the
ledgers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.definitions import OrphanActivityDefinitions
from devicepool.activities.device_views import parse_time
from devicepool.activities.errors import NotFoundError, ProviderError, to_application_error
from devicepool.activities.heartbeats import heartbeating
from devicepool.activities.metrics import Metrics
from devicepool.activities.models import AccountSettings, DeviceStatus
from devicepool.activities.orphan_models import (
    MAX_ORPHANS_PER_SCAN,
    FindOrphansInput,
    FindOrphansResult,
    JanitorConfig,
    JanitorInput,
    KeptDevice,
    OrphanDevice,
    TerminateOrphansInput,
    TerminateOrphansResult,
)
from devicepool.api.names import (
    LABEL_MANAGED_BY,
    LABEL_POOL,
    MANAGED_BY,
    SA_ACCOUNT,
    SIGNAL_JANITOR_CONFIGURE,
    TASK_QUEUE,
    WORKFLOW_ORPHAN_SWEEP,
    janitor_workflow_id,
    pool_workflow_id,
)

__all__ = ["OrphanActivities", "PoolCheck", "check_pool", "start_janitors"]

NOT_FOUND = "NOT_FOUND"
# Pools asked about at once (one `describe` each): 1,000 pools in seconds, not a minute.
DESCRIBES_AT_ONCE = 20
# Devices on their way out are the provider's business now, not orphans.
_LEAVING = frozenset({DeviceStatus.TERMINATING, DeviceStatus.TERMINATED})
_KEY_ACCOUNT = SearchAttributeKey.for_keyword(SA_ACCOUNT)


async def start_janitors(
    client: Client, accounts: Mapping[str, AccountSettings], config: JanitorConfig
) -> None:
    """Start (or reconfigure) each account's orphan sweep: a signal-with-start per account.

    Idempotent and safe with many workers: a running janitor only receives the
    `configure` signal (the last worker to start wins if their graces differ).
    """
    for account in accounts.values():
        await client.start_workflow(
            WORKFLOW_ORPHAN_SWEEP,
            JanitorInput(account=account.name),
            id=janitor_workflow_id(account.name),
            task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=SIGNAL_JANITOR_CONFIGURE,
            start_signal_args=[config],
            static_summary=f"orphan sweep of account `{account.name}`",
        )


@dataclass(frozen=True)
class PoolCheck:
    """What Temporal says of the pool a device names."""

    orphaned: bool
    # RUNNING, TERMINATED, ..., NOT_FOUND, or "runs on account X"
    state: str


async def check_pool(client: Client, pool: str, account: str) -> PoolCheck:
    """Whether devices of `pool` at `account` are orphans: no pool of that name runs there.

    Raises `RPCError` when Temporal does not answer (not knowing is not orphaned).
    """
    try:
        described = await client.get_workflow_handle(pool_workflow_id(pool)).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return PoolCheck(orphaned=True, state=NOT_FOUND)
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            # No workflow can have that id (a label devicepool never wrote):
            # no pool will ever list the device either.
            return PoolCheck(orphaned=True, state="no such pool (invalid name)")
        raise
    status = WorkflowExecutionStatus(described.status).name if described.status else ""
    if described.status != WorkflowExecutionStatus.RUNNING:
        return PoolCheck(orphaned=True, state=status)
    # A pool started without its attributes (a bare test, the stock CLI) is
    # taken to be on this account: when in doubt, a device is not an orphan.
    runs_on = described.typed_search_attributes.get(_KEY_ACCOUNT)
    if runs_on and runs_on != account:
        return PoolCheck(orphaned=True, state=f"runs on account {runs_on}")
    return PoolCheck(orphaned=False, state=status)


def _orphan(raw: Mapping[str, Any], check: PoolCheck) -> OrphanDevice:
    labels = raw.get("labels") or {}
    created = parse_time(raw.get("createdAt")) or parse_time(raw.get("updatedAt"))
    return OrphanDevice(
        id=str(raw["id"]),
        pool=str(labels.get(LABEL_POOL) or ""),
        status=str(raw.get("status") or ""),
        platform=str(raw.get("platform") or ""),
        region=str(raw.get("region") or ""),
        created_at=created or datetime.fromtimestamp(0, UTC),
        pool_state=check.state,
    )


class OrphanActivities(OrphanActivityDefinitions):
    """The orphan sweep's activities, over `DeviceActivities`' clients and metrics."""

    metrics: Metrics

    def _client(self, account: str) -> BitCloudPhoneClient:  # pragma: no cover - overridden
        raise NotImplementedError

    def orphan_activities(self) -> list[Any]:
        return [self.find_orphans, self.terminate_orphans]

    @activity.defn
    async def find_orphans(self, input: FindOrphansInput) -> FindOrphansResult:
        provider = self._client(input.account)
        try:
            async with heartbeating():
                raw = await provider.list_devices(labels={LABEL_MANAGED_BY: MANAGED_BY})
        except ProviderError as exc:
            raise to_application_error(exc) from exc
        devices = [d for d in raw if d.get("status") not in _LEAVING]
        by_pool: dict[str, list[Mapping[str, Any]]] = {}
        for device in devices:
            by_pool.setdefault(str((device.get("labels") or {}).get(LABEL_POOL) or ""), []).append(
                device
            )
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
        if len(orphans) > MAX_ORPHANS_PER_SCAN:
            activity.logger.warning(
                "orphan sweep of %s: %d orphans, the oldest %d handled this scan",
                input.account,
                len(orphans),
                MAX_ORPHANS_PER_SCAN,
            )
        return FindOrphansResult(
            orphans=orphans[:MAX_ORPHANS_PER_SCAN],
            orphans_found=len(orphans),
            devices=len(devices),
            pools=len(by_pool),
        )

    @activity.defn
    async def terminate_orphans(self, input: TerminateOrphansInput) -> TerminateOrphansResult:
        provider = self._client(input.account)
        temporal = activity.client()
        checks: dict[str, PoolCheck] = {}
        result = TerminateOrphansResult()
        for device_id in input.device_ids:
            activity.heartbeat(device_id)
            kept = await self._terminate_orphan(
                provider, temporal, input, device_id, checks, result.terminated
            )
            if kept is not None:
                result.kept.append(kept)
        return result

    async def _terminate_orphan(
        self,
        provider: BitCloudPhoneClient,
        temporal: Client,
        input: TerminateOrphansInput,
        device_id: str,
        checks: dict[str, PoolCheck],
        terminated: list[OrphanDevice],
    ) -> KeptDevice | None:
        """Terminate one device if it is still an orphan; else why it was kept."""

        def kept(why: str, *, settled: bool = True) -> KeptDevice:
            return KeptDevice(id=device_id, why=why, settled=settled)

        try:
            raw = await provider.get_device(device_id)
        except NotFoundError:
            return kept("already gone")
        except ProviderError as exc:
            return kept(f"status unknown ({exc.error_type.value})", settled=False)
        labels = raw.get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
            return kept("not managed by devicepool")
        if raw.get("status") in _LEAVING:
            return kept(f"already {raw.get('status')}")
        pool = str(labels.get(LABEL_POOL) or "")
        if pool not in checks:
            try:
                checks[pool] = await check_pool(temporal, pool, input.account)
            except RPCError as err:
                return kept(f"pool {pool} not known to Temporal ({err.status.name})", settled=False)
        check = checks[pool]
        if not check.orphaned:
            return kept(f"pool {pool} is running")
        try:
            await provider.delete_device(device_id)
        except NotFoundError:
            return kept("already gone")
        except ProviderError as exc:
            return kept(f"delete failed ({exc.error_type.value})", settled=False)
        orphan = _orphan(raw, check)
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
