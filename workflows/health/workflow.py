"""`PoolHealth`: the long-running health check of one pool, id `devicepool/<name>/health`.

Messages: signal `health_config` (`HealthConfig`: the pool's thresholds changed);
query `offline_since` (device id → first seen offline); sends its pool `health_report`
(`HealthReport`) after a check that found or did something. Activities: one long
`watch_health` on the watch queue, `terminate_device`. Continue-as-new when
suggested, carrying `HealthInput` (offline clocks included) whole. Decisions are pure,
in `triage.py`; what it replaces and why: docs/pools.md, "Health: replace, do not repair".
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.models import (
        HEARTBEAT_TIMEOUT,
        DeviceStatusInfo,
        PoolRunInput,
        PoolRunResult,
        PoolSettings,
        TerminateDeviceInput,
        WatchHealthInput,
        WatchHealthResult,
        suspects_fingerprint,
    )
    from devicepool.api.names import (
        SIGNAL_HEALTH_CONFIG,
        SIGNAL_HEALTH_REPORT,
        WORKFLOW_POOL_HEALTH,
    )
    from devicepool.workflows.health.triage import (
        METRIC_REASON,
        health_report,
        own_read_seconds,
        reason_kind,
        reuse_listing_seconds,
        triage,
    )
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.errors import (
        PROVIDER_RETRY,
        forget,
        raise_if_cancelled,
        tell,
        wait_condition,
    )
    from devicepool.workflows.shared.heartbeats import watch_heartbeat_timeout_of_run
    from devicepool.workflows.shared.placement import (
        REREAD_NODES_PATCH,
        misplaced,
        route,
    )
    from devicepool.workflows.shared.protocol import HealthConfig, HealthInput


@workflow.defn(name=WORKFLOW_POOL_HEALTH)
class PoolHealthWorkflow:
    @workflow.init
    def __init__(self, input: HealthInput) -> None:
        # The carried state, handed to the next run as it is.
        self._state = input.model_copy(deep=True)
        self._config_changed = False

    @property
    def _settings(self) -> PoolSettings:
        """The worker's settings with the pool's own thresholds (its latest `health_config`)."""
        return self._state.config.applied_to(self._state.settings)

    async def _reread_nodes(self) -> None:
        """Where the account's calls go now, from the worker's settings (the rest is the pool's)."""
        try:
            fresh = await workflow.execute_activity_method(
                DeviceActivityDefinitions.pool_settings,
                start_to_close_timeout=timedelta(seconds=10),
                schedule_to_close_timeout=timedelta(minutes=1),
                retry_policy=PROVIDER_RETRY,
                summary="read where the account's calls go",
            )
        except ActivityError as err:
            workflow.logger.warning("health check: worker settings not read: %s", err)
            return
        self._state.settings = self._state.settings.model_copy(
            update={"account_nodes": fresh.account_nodes}
        )

    @property
    def _offline_after(self) -> timedelta:
        return timedelta(seconds=self._settings.offline_after_seconds)

    @workflow.run
    async def run(self, input: HealthInput) -> None:
        """One long `watch_health` at a time (docs/pools.md, "Health"); a config change
        cancels it and judges again on a fresh read."""
        settings = self._settings
        interval = timedelta(seconds=settings.health_seconds)
        known: str | None = None  # fingerprint of the suspects judged last; None: read now
        while True:
            raise_if_cancelled()
            once = known is None or self._config_changed
            self._config_changed = False
            now = workflow.now()
            until = None
            if self._state.offline_since and not (self._state.paused or self._state.config.paused):
                deadline = min(self._state.offline_since.values()) + self._offline_after
                until = max(deadline, now + timedelta(seconds=1))
            watch = asyncio.ensure_future(self._watch(input, known or "", until, once))
            try:
                await self._answer_or_change(watch)
            except BaseException:
                forget(watch, cancel=True)
                raise
            if not watch.done():
                forget(watch, cancel=True)  # maxUnhealthy or the size changed: a fresh read next
                continue
            try:
                found = watch.result()
            except ActivityError as err:
                raise_if_cancelled()  # the pool's deletion, not a failure to read
                # The provider is unreachable: judge nothing on missing data.
                workflow.logger.warning("pool %s: health check skipped: %s", input.pool, err)
                known = None
                if misplaced(err) and workflow.patched(REREAD_NODES_PATCH):
                    await self._reread_nodes()
                await wait_condition(
                    lambda: self._config_changed, timeout=interval, summary="next health check"
                )
                continue
            raise_if_cancelled()
            if found.pool.first_run_id:
                self._state.pool_first_run_id = found.pool.first_run_id
            if not found.pool.running:
                self._ends(input, found.pool)
                return
            attempted = await self._judge(input, found)
            # What was due and not paused was terminated (gone by the next read)
            # or failed to be (to be tried again at once): the watch waits for
            # news of the others only.
            known = suspects_fingerprint([s for s in found.suspects if s.id not in attempted])
            raise_if_cancelled()
            if versions.hand_over_due():
                await workflow.wait_condition(workflow.all_handlers_finished)
                versions.continue_as_new(self._state)

    async def _watch(
        self, input: HealthInput, fingerprint: str, until: datetime | None, once: bool
    ) -> WatchHealthResult:
        settings = self._settings
        parent = workflow.info().parent
        return await workflow.execute_activity_method(
            DeviceActivityDefinitions.watch_health,
            WatchHealthInput(
                account=input.account,
                pool=input.pool,
                pool_run=PoolRunInput(
                    workflow_id=input.parent_workflow_id,
                    run_id=parent.run_id if parent is not None else "",
                    first_run_id=self._state.pool_first_run_id,
                ),
                poll_seconds=settings.health_seconds,
                max_seconds=settings.watch_max_seconds,
                startup_timeout_seconds=settings.startup_timeout_seconds,
                fingerprint=fingerprint,
                until=until,
                once=once,
                reuse_listing_seconds=reuse_listing_seconds(
                    resync_seconds=settings.resync_seconds,
                    health_seconds=settings.health_seconds,
                ),
                own_read_seconds=own_read_seconds(
                    health_seconds=settings.health_seconds,
                    offline_after_seconds=settings.offline_after_seconds,
                ),
            ),
            start_to_close_timeout=timedelta(seconds=settings.watch_max_seconds + 120),
            schedule_to_close_timeout=timedelta(seconds=settings.watch_max_seconds + 300),
            # No suspect to time (none offline, none stuck booting): a long timeout.
            heartbeat_timeout=watch_heartbeat_timeout_of_run(
                settings.health_seconds, quiet=not once and not fingerprint
            ),
            retry_policy=PROVIDER_RETRY,
            summary="read now" if once else "watch for unhealthy devices",
            # Long and mostly asleep: on a watch queue (its own queue's, or its
            # account's node's), never on the slots the pools' short activities need.
            **route(input.account, self._state.settings).watch(workflow.info().task_queue),
        )

    async def _judge(self, input: HealthInput, found: WatchHealthResult) -> set[str]:
        """Triage the watch's answer, replace what is due (unless paused) and tell the
        pool; the devices it tried to terminate."""
        state = self._state
        now = workflow.now()
        verdict = triage(
            [
                (DeviceStatusInfo(id=s.id, status=s.status, updated_at=s.updated_at), s.created_at)
                for s in found.suspects
            ],
            offline_since=state.offline_since,
            # the watch's read before this one saw none of the new suspects offline
            last_check_at=found.previous_check_at or state.last_check_at,
            max_unhealthy=state.config.max_unhealthy,
            replicas=state.config.replicas,
            now=now,
            offline_after=self._offline_after,
            startup_timeout=timedelta(seconds=self._settings.startup_timeout_seconds),
            devices=found.devices,
        )
        state.offline_since = verdict.offline_since
        state.paused = verdict.paused
        terminated: dict[str, str] = {}
        # Paused by maxUnhealthy (an outage), or by a person (`devicepool pause`).
        if verdict.due and not verdict.paused and not state.config.paused:
            terminated = await self._terminate(input, verdict.due)
        report = health_report(
            verdict,
            terminated=terminated,
            devices=found.devices,
            now=now,
            was_reporting=state.was_reporting,
        )
        if report is not None:
            await tell(input.parent_workflow_id, SIGNAL_HEALTH_REPORT, report)
        state.was_reporting = bool(verdict.unhealthy or terminated or verdict.paused)
        state.last_check_at = found.checked_at
        return set() if verdict.paused or state.config.paused else set(verdict.due)

    async def _answer_or_change(self, watch: asyncio.Future[WatchHealthResult]) -> None:
        await workflow.wait_condition(lambda: watch.done() or self._config_changed)

    def _ends(self, input: HealthInput, found: PoolRunResult) -> None:
        """Say why the check ends: its pool is gone."""
        why = (
            "another pool of that name runs now"
            if found.status == "RUNNING"
            else f"its workflow is {found.status}"
        )
        workflow.logger.warning(
            "pool %s is gone (%s): its health check ends, nothing is replaced", input.pool, why
        )
        workflow.set_current_details(f"Ended: pool {input.pool} is gone ({why}).")

    async def _terminate(self, input: HealthInput, due: dict[str, str]) -> dict[str, str]:
        async def one(device_id: str) -> None:
            await workflow.execute_activity_method(
                DeviceActivityDefinitions.terminate_device,
                TerminateDeviceInput(
                    account=input.account,
                    device_id=device_id,
                    pool=input.pool,
                    reason=METRIC_REASON[reason_kind(due[device_id])],
                    reserve_keep=self._state.config.reserve_keep,
                ),
                start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=2),
                retry_policy=PROVIDER_RETRY,
                summary=f"replace {device_id} ({reason_kind(due[device_id])})",
                **route(input.account, self._state.settings).provider(),
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
                self._state.offline_since.pop(device_id, None)
        self._state.replaced_total += len(done)
        return done

    @workflow.signal(name=SIGNAL_HEALTH_CONFIG)
    def health_config(self, config: HealthConfig) -> None:
        self._state.config = config
        self._config_changed = True

    @workflow.query(name="offline_since")
    def offline_since(self) -> dict[str, datetime]:
        return dict(self._state.offline_since)
