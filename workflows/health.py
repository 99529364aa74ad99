"""`PoolHealth`: the long-running health check of one pool, id `devicepool/<name>/health`.

Messages
- signal `health_config` (`HealthConfig`): the pool's `maxUnhealthy` changed.
- query `offline_since`: device id → when it was first seen offline.
- sends the pool the signal `health_report` (`HealthReport`) after every check
  that found something or did something, so replacements are planned in the
  same pass, not at the next resync.

Rules (replace, do not repair):
- Every `health_seconds`, the pool's devices are listed and their status read
  in batches of ≤ 100. A device continuously offline for more than
  `offline_after_seconds` is terminated — never rebooted. A device that comes
  back before that is left alone (its clock is dropped).
- A device still `provisioning` (or `failed`) past `startup_timeout_seconds`
  after creation is terminated.
- Short-circuit: when more devices than `maxUnhealthy` (count or percentage of
  the pool's devices) are unhealthy at once — a region outage, not a bad
  device — remediation pauses and the pool shows `RemediationPaused=True`;
  it resumes by itself when the count drops back.
- Busy devices that go offline are replaced like any other; healthy busy
  devices are never touched.

The offline clocks live in workflow state, so they survive a worker restart
(replay rebuilds them) and are carried across continue-as-new. The check sleeps
until the next interval or the earliest offline deadline, whichever is first,
so a replacement is requested at the threshold, not up to an interval late.

The pool starts this child with `ParentClosePolicy.ABANDON`: it outlives the
pool's continue-as-new (the next run finds it running under the same id) and
is cancelled by the pool's deletion.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.models import (
        FAILED,
        HEARTBEAT_TIMEOUT,
        OFFLINE,
        PROVISIONING,
        DeviceStatusInfo,
        GetStatusesInput,
        ListDevicesInput,
        TerminateDeviceInput,
    )
    from devicepool.api.names import (
        SIGNAL_HEALTH_CONFIG,
        SIGNAL_HEALTH_REPORT,
        WORKFLOW_POOL_HEALTH,
    )
    from devicepool.api.v1alpha1 import resolve_max_unhealthy
    from devicepool.workflows.cancellation import raise_if_cancelled
    from devicepool.workflows.messages import HealthConfig, HealthInput, HealthReport

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))

REASON_OFFLINE = "Offline"
REASON_STARTUP_TIMEOUT = "StartupTimeout"
# `devicepool_replacements_total{reason}` label for each.
METRIC_REASON = {REASON_OFFLINE: "offline", REASON_STARTUP_TIMEOUT: "startup_timeout"}


@workflow.defn(name=WORKFLOW_POOL_HEALTH)
class PoolHealthWorkflow:
    @workflow.init
    def __init__(self, input: HealthInput) -> None:
        self._config = input.config
        self._offline_since: dict[str, datetime] = dict(input.offline_since)
        # When the last successful check ran (a device it saw online went
        # offline after it).
        self._last_check_at: datetime | None = input.last_check_at
        self._replaced_total = input.replaced_total
        self._paused = False
        self._config_changed = False
        # Whether the last check had anything to say (so recovery is reported once).
        self._was_reporting = False

    @workflow.run
    async def run(self, input: HealthInput) -> None:
        settings = input.settings
        threshold = timedelta(seconds=settings.offline_after_seconds)
        while True:
            raise_if_cancelled()
            await self._check(input, threshold)
            raise_if_cancelled()
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    input.model_copy(
                        update={
                            "config": self._config,
                            "offline_since": self._offline_since,
                            "replaced_total": self._replaced_total,
                            "last_check_at": self._last_check_at,
                        }
                    )
                )
            now = workflow.now()
            wake = now + timedelta(seconds=settings.health_seconds)
            if self._offline_since and not self._paused:
                wake = min(wake, min(self._offline_since.values()) + threshold)
            try:
                await workflow.wait_condition(
                    lambda: self._config_changed,
                    timeout=max(timedelta(seconds=1), wake - now),
                    timeout_summary="next health check",
                )
            except TimeoutError:
                pass
            self._config_changed = False

    async def _check(self, input: HealthInput, threshold: timedelta) -> None:
        try:
            statuses = await self._statuses(input)
        except ActivityError as err:
            # The provider is unreachable: judge nothing on missing data.
            workflow.logger.warning("pool %s: health check skipped: %s", input.pool, err)
            return
        now = workflow.now()
        startup_timeout = timedelta(seconds=input.settings.startup_timeout_seconds)

        seen = {s.id for s, _ in statuses}
        for gone in set(self._offline_since) - seen:
            del self._offline_since[gone]

        unhealthy: list[str] = []
        due: dict[str, str] = {}
        offline: list[str] = []
        for status, created_at in statuses:
            if status.status == OFFLINE:
                offline.append(status.id)
                since = self._offline_since.setdefault(
                    status.id, _went_offline(status, now, self._last_check_at)
                )
                unhealthy.append(status.id)
                if now - since >= threshold:
                    due[status.id] = (
                        f"{REASON_OFFLINE}: offline for {int((now - since).total_seconds())}s "
                        f"(threshold {int(threshold.total_seconds())}s)"
                    )
                continue
            self._offline_since.pop(status.id, None)  # back before the threshold
            if status.status in (PROVISIONING, FAILED) and now - created_at >= startup_timeout:
                unhealthy.append(status.id)
                due[status.id] = (
                    f"{REASON_STARTUP_TIMEOUT}: still {status.status} "
                    f"{int((now - created_at).total_seconds())}s after creation"
                )

        limit = resolve_max_unhealthy(self._config.max_unhealthy, len(statuses))
        self._paused = len(unhealthy) > limit
        terminated: dict[str, str] = {}
        if due and not self._paused:
            terminated = await self._terminate(input, due)

        if unhealthy or terminated or self._paused:
            await self._report(
                input,
                HealthReport(
                    checked_at=now,
                    devices=len(statuses),
                    unhealthy=len(unhealthy),
                    max_unhealthy=limit,
                    paused=self._paused,
                    terminated=terminated,
                    offline=sorted(offline),
                ),
            )
        elif self._was_reporting:
            # Everything healthy again: one last report clears the pool's condition.
            await self._report(
                input,
                HealthReport(
                    checked_at=now,
                    devices=len(statuses),
                    unhealthy=0,
                    max_unhealthy=limit,
                    paused=False,
                ),
            )
        self._was_reporting = bool(unhealthy or terminated or self._paused)
        self._last_check_at = now

    async def _statuses(self, input: HealthInput) -> list[tuple[DeviceStatusInfo, datetime]]:
        devices = (
            await workflow.execute_activity_method(
                DeviceActivityDefinitions.list_devices,
                ListDevicesInput(account=input.account, pool=input.pool),
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=2),
                retry_policy=RETRY,
                summary="list devices for the health check",
            )
        ).devices
        created = {d.id: d.created_at for d in devices}
        ids = sorted(created)
        result: list[tuple[DeviceStatusInfo, datetime]] = []
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            batch = await workflow.execute_activity_method(
                DeviceActivityDefinitions.get_statuses,
                GetStatusesInput(account=input.account, ids=chunk),
                start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=2),
                retry_policy=RETRY,
                summary=f"status of devices {start + 1}-{start + len(chunk)} of {len(ids)}",
            )
            result += [(item, created[item.id]) for item in batch.items if item.id in created]
        return result

    async def _terminate(self, input: HealthInput, due: dict[str, str]) -> dict[str, str]:
        async def one(device_id: str) -> None:
            await workflow.execute_activity_method(
                DeviceActivityDefinitions.terminate_device,
                TerminateDeviceInput(
                    account=input.account,
                    device_id=device_id,
                    pool=input.pool,
                    reason=METRIC_REASON[due[device_id].split(":")[0]],
                ),
                start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=2),
                retry_policy=RETRY,
                summary=f"replace {device_id} ({due[device_id].split(':')[0]})",
            )

        ids = sorted(due)
        results = await asyncio.gather(*(one(d) for d in ids), return_exceptions=True)
        done: dict[str, str] = {}
        for device_id, result in zip(ids, results, strict=True):
            if isinstance(result, ActivityError):
                workflow.logger.warning("terminate %s failed: %s", device_id, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                done[device_id] = due[device_id]
                self._offline_since.pop(device_id, None)
        self._replaced_total += len(done)
        return done

    async def _report(self, input: HealthInput, report: HealthReport) -> None:
        try:
            await workflow.get_external_workflow_handle(input.parent_workflow_id).signal(
                SIGNAL_HEALTH_REPORT, report
            )
        except FailureError as err:
            workflow.logger.info("pool %s did not take the health report: %s", input.pool, err)

    @workflow.signal(name=SIGNAL_HEALTH_CONFIG)
    def health_config(self, config: HealthConfig) -> None:
        self._config = config
        self._config_changed = True

    @workflow.query(name="offline_since")
    def offline_since(self) -> dict[str, datetime]:
        return dict(self._offline_since)


def _went_offline(
    status: DeviceStatusInfo, now: datetime, last_check_at: datetime | None
) -> datetime:
    """When a device newly seen offline went offline.

    The provider's `updatedAt` of the offline status, so the clock does not start
    up to a whole health interval late; but never before the previous check
    (which saw the device not offline: a provider that leaves `updatedAt`
    alone must not get a device replaced at first sight) and never in the future
    (clock skew with the provider).
    """
    since = status.updated_at if status.updated_at is not None else now
    if last_check_at is not None:
        since = max(since, last_check_at)
    return min(since, now)
