"""`OrphanSweep`: one janitor per provider account, id `devicepool-account/<name>/janitor`.

Terminates the account's managed devices whose pool has no running workflow, once
orphaned for `orphanGraceSeconds`; every worker signal-with-starts it for each account
it serves (`worker.accounts.start_janitors`).

Messages: signal `configure` (`JanitorConfig`); update `sweep_orphans` (`SweepRequest`
→ `OrphanReport`: scan now, with `delete` terminate every orphan now; a failed scan
answers with its `lastError`); query `orphans` (`OrphanReport`). Activities
`find_orphans`, `terminate_orphans`. Continue-as-new when suggested or after
`MAX_SCANS_PER_RUN` scans, carrying `JanitorState` (`state.py`) whole. Why:
docs/pools.md, "Orphans".
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import OrphanActivityDefinitions
    from devicepool.activities.models import HEARTBEAT_TIMEOUT
    from devicepool.activities.orphan_models import (
        FindOrphansInput,
        JanitorConfig,
        TerminateOrphansInput,
        TerminateOrphansResult,
    )
    from devicepool.api.names import (
        QUERY_ORPHANS,
        SIGNAL_JANITOR_CONFIGURE,
        UPDATE_SWEEP_ORPHANS,
        WORKFLOW_ORPHAN_SWEEP,
    )
    from devicepool.workflows.orphans.state import (
        JanitorInput,
        JanitorState,
        OrphanReport,
        SweepRequest,
        scan_seconds,
    )
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.errors import PROVIDER_RETRY, wait_condition
    from devicepool.workflows.shared.placement import provider_queue

__all__ = ["MAX_SCANS_PER_RUN", "OrphanSweepWorkflow"]

# A backstop for servers that never suggest continue-as-new (the time-skipping one).
MAX_SCANS_PER_RUN = 500
# The terminate activity's input limit.
TERMINATE_CHUNK = 500


@workflow.defn(name=WORKFLOW_ORPHAN_SWEEP)
class OrphanSweepWorkflow:
    @workflow.init
    def __init__(self, input: JanitorInput) -> None:
        self._account = input.account
        self._s = input.state or JanitorState()
        if input.config is not None:
            self._s.config = input.config
        # Per run: a scan and a sweep never interleave (the loop's and an update's).
        self._lock = asyncio.Lock()
        self._dirty = False
        self._scans = 0
        self._details = ""

    @workflow.run
    async def run(self, input: JanitorInput) -> None:
        while True:
            async with self._lock:
                if await self._scan():
                    due = self._s.due(workflow.now())
                    if due:
                        await self._terminate(due, reason="grace")
            self._publish_details()
            if versions.hand_over_due() or self._scans >= MAX_SCANS_PER_RUN:
                await workflow.wait_condition(workflow.all_handlers_finished)
                versions.continue_as_new(JanitorInput(account=self._account, state=self._s))
            await self._wait()

    async def _wait(self) -> None:
        """Until the next scan is due, or a worker sends its config."""
        self._dirty = False
        timeout = max(self._s.next_wake(workflow.now()) - workflow.now(), timedelta(milliseconds=1))
        await wait_condition(lambda: self._dirty, timeout=timeout, summary="next orphan scan")

    async def _scan(self) -> bool:
        """List the account's orphans; False if it could not (`last_error` says why)."""
        self._scans += 1
        try:
            found = await workflow.execute_activity_method(
                OrphanActivityDefinitions.find_orphans,
                FindOrphansInput(account=self._account),
                start_to_close_timeout=timedelta(minutes=2),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=3),
                retry_policy=PROVIDER_RETRY,
                summary="find orphaned devices",
                **provider_queue(self._s.config.node),
            )
        except ActivityError as err:
            self._s.last_error = f"scan failed: {err.cause or err}"
            workflow.logger.warning("orphan sweep of %s: %s", self._account, self._s.last_error)
            return False
        self._s.observe(found, workflow.now())
        return True

    async def _terminate(self, ids: list[str], *, reason: str) -> TerminateOrphansResult:
        total = TerminateOrphansResult()
        for start in range(0, len(ids), TERMINATE_CHUNK):
            chunk = ids[start : start + TERMINATE_CHUNK]
            try:
                result = await workflow.execute_activity_method(
                    OrphanActivityDefinitions.terminate_orphans,
                    TerminateOrphansInput(account=self._account, device_ids=chunk, reason=reason),
                    start_to_close_timeout=timedelta(minutes=5),
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    schedule_to_close_timeout=timedelta(minutes=10),
                    retry_policy=PROVIDER_RETRY,
                    summary=f"terminate {len(chunk)} orphaned device(s)",
                    **provider_queue(self._s.config.node),
                )
            except ActivityError as err:
                self._s.last_error = f"terminate failed: {err.cause or err}"
                workflow.logger.warning("orphan sweep of %s: %s", self._account, err.cause or err)
                continue
            self._s.record(result, workflow.now(), reason=reason)
            total.terminated += result.terminated
            total.kept += result.kept
        if total.terminated:
            workflow.logger.warning(
                "orphan sweep of %s: terminated %d orphaned device(s) (%s): %s",
                self._account,
                len(total.terminated),
                reason,
                ", ".join(f"{d.id} (pool {d.pool})" for d in total.terminated),
            )
        return total

    # ------------------------------------------------------------------ messages

    @workflow.signal(name=SIGNAL_JANITOR_CONFIGURE)
    def configure(self, config: JanitorConfig) -> None:
        self._s.config = config
        self._dirty = True

    @workflow.update(name=UPDATE_SWEEP_ORPHANS)
    async def sweep_orphans(self, request: SweepRequest) -> OrphanReport:
        async with self._lock:
            # A failed scan is answered too (its `last_error`), so that one
            # account's trouble does not hide the others' orphans.
            scanned = await self._scan()
            result = None
            if scanned and request.delete and self._s.seen:
                result = await self._terminate(sorted(self._s.seen), reason="manual")
        self._publish_details()
        report = self._s.report(self._account, workflow.now())
        if result is not None:
            report.terminated, report.kept = result.terminated, result.kept
        return report

    @workflow.query(name=QUERY_ORPHANS)
    def orphans(self) -> OrphanReport:
        return self._s.report(self._account, workflow.now())

    def _publish_details(self) -> None:
        s = self._s
        lines = [
            f"orphan sweep of account `{self._account}` · grace {s.config.grace_seconds:g}s · "
            f"scans every {scan_seconds(s.config.grace_seconds):g}s",
            "",
            f"last scan: {s.scanned_at.isoformat() if s.scanned_at else 'none yet'} · "
            f"{s.devices} device(s) in {s.pools} pool(s) · orphans waiting: {len(s.seen)} · "
            f"terminated so far: {s.terminated_total}"
            + (
                f" · parked phones shut down again: {s.parked_shut_down_total}"
                if s.parked_shut_down_total
                else ""
            )
            + (f" · **{s.last_error}**" if s.last_error else ""),
        ]
        if s.swept:
            lines += ["", "last terminated:"]
            lines += [
                f"- {e.at.isoformat()} `{e.device.id}` of pool `{e.device.pool}` "
                f"({e.reason}, orphaned {e.orphaned_seconds:.0f}s; its pool {e.device.pool_state})"
                for e in reversed(s.swept[-10:])
            ]
        details = "\n".join(lines)
        if details != self._details:
            self._details = details
            workflow.set_current_details(details)
