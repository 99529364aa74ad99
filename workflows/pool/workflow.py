"""`DevicePool`: one long-running workflow per pool, id `devicepool/<name>`.

Messages
- update `apply` (`ApplyRequest` → `Accepted`): replace the spec. The validator
  rejects a wrong name, a change to an immutable field (platform, region,
  provider, providerCredentialRef) or any change while the pool is deleting —
  before anything is written to history.
- update `scale_update` (`ScaleRequest` → `Accepted`): the CLI's scale.
- signal `scale` (plain JSON `{"replicas": N}`, for the stock `temporal` CLI and
  the Web UI): an invalid value is refused with condition `SpecRejected=True`
  and never applied.
- signals `batch_created` / `batch_done` (`BatchReport`) from provisioning
  children, `health_report` (`HealthReport`) from the health child.
- queries `status` (camelCase status JSON), `devices` (`DevicesView`), `spec`,
  `events` (the pool's own recent events: `workflows/pool/event_log.py`, said by
  `workflows/pool/events.py`).
- cancellation = deletion: the finalizer (`workflows/pool/finalizer.py`), then the
  run ends CANCELED.

Loop: observe → plan (`workflows/pool/plan.py`) → act → publish (`workflows/pool/status.py`)
→ wait. What the pool carries is one `PoolState` (`workflows/pool/state.py`):
the slot book (`workflows/pool/slots.py`), the failure back-off
(`workflows/pool/backoff.py`), the status, the doomed devices.

Cheap when idle: instead of a resync timer (≈5 history events per tick), the
pool runs one long `watch_devices` activity that polls the provider every
`resync_seconds` inside the worker, heartbeating, and returns only when the
pool's devices changed (or after `watch_max_seconds`).

Continue-as-new: when Temporal suggests it, after all handlers finished and
child starts resolved, handing `PoolState` on whole. Children are abandoned
(not terminated) at the hand-over and report to the next run.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities import models as am
    from devicepool.api import names
    from devicepool.api.errors import ErrorType
    from devicepool.api.v1alpha1 import (
        ConditionStatus,
        ConditionType,
        DevicePoolStatus,
        Phase,
    )
    from devicepool.workflows.pool import calls, children, finalizer
    from devicepool.workflows.pool import event_log as events
    from devicepool.workflows.pool import events as pool_events
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.pool.handlers import PoolMessages
    from devicepool.workflows.pool.messages import PoolInput
    from devicepool.workflows.pool.plan import Plan, lost_offline, offline_ids, plan_pool
    from devicepool.workflows.pool.slots import Observations, observed_slots
    from devicepool.workflows.pool.state import REPLACING_LIMIT, PoolState
    from devicepool.workflows.shared.cancellation import raise_if_cancelled
    from devicepool.workflows.shared.errors import error_message, problem
    from devicepool.workflows.shared.protocol import BatchReport, HealthConfig, ProvisionBatchInput


@workflow.defn(name=names.WORKFLOW_DEVICE_POOL)
class DevicePoolWorkflow(PoolMessages):
    """The loop: observe → plan → act → publish → wait; deletion runs the finalizer."""

    @workflow.init
    def __init__(self, input: PoolInput) -> None:
        self._metadata, self._spec = input.metadata, input.spec
        self.s = input.state or PoolState(
            health_started=False,
            status=DevicePoolStatus(desired_replicas=input.spec.replicas),
            announce=True,
        )
        # Settings given in the input (tests, a caller overriding the worker) are
        # kept across continue-as-new; otherwise each run re-reads the worker's.
        self._settings, self._settings_pinned = input.settings, input.settings is not None
        # What one run knows and the next one looks up again; the listing the
        # last run handed over stands until this run's first one lands.
        self._devices = am.devices_from_rows(self.s.listing, pool=input.metadata.name)
        self.s.listing = []
        self._observations = Observations()
        self._watch_number = 0
        self._observe_failed = False
        self._observe_problem: str | None = None
        self._refs_problems: list[str] | None = None
        self._health_started = False
        if self.s.health_told is None:
            self.s.health_told = self._health_config()
        self._watch: asyncio.Task[am.WatchDevicesResult] | None = None
        # Commands that need no answer (child starts, ledger signals): the
        # hand-over and the finalizer wait for them.
        self._starting: set[asyncio.Task[Any]] = set()
        self._need_observe = True
        self._dirty, self._deleting = False, self.s.deleting
        # A pass is due that needs no fresh listing (a health report), and the
        # devices the health check reported terminated in this run.
        self._replan = False
        self._reported_gone: set[str] = set()
        # A scale-down termination failed: plan again after a resync.
        self._retry_terminations = False
        self._details = ""
        # Announced to the ledger in this pass (`PoolState.announce`): say if nothing came of it.
        self._announced = False

    @workflow.run
    async def run(self, input: PoolInput) -> dict[str, Any]:
        if self.s.created_at is None:
            self._happened(pool_events.created(self._spec.replicas))
        self.s.created_at = self.s.created_at or workflow.now()
        if self.s.deleting:
            # Continued-as-new while deleting: finish the finalizer, then end.
            if self._settings is None:
                await self._read_settings()
            await self._delete()
            return self.s.status.to_json_dict()
        try:
            while True:
                await self._pass()
        except (asyncio.CancelledError, ActivityError):
            # A deletion can also surface as the failure of an activity it
            # cancelled (the references check of a run's first pass, say):
            # that is a deletion too, and the finalizer runs.
            if workflow.cancellation_reason() is None:
                raise
            await self._delete()
            raise

    async def _pass(self) -> None:
        """One round: observe → plan → act → publish, then wait (or hand over)."""
        # A deletion absorbed by an awaited activity surfaces here (workflows/shared/cancellation.py).
        raise_if_cancelled()
        # Reports apply only against an observation that started after they arrived.
        created_mark, done_mark = self.s.slots.inbox.mark()
        if self.s.announce:
            self.s.announce, self._announced = False, True
            self._in_background(self._tell_ledger(expecting=True))
        await self._observe_all()
        if not self._health_started:
            self._health_started = True
            self._in_background(self._start_health())
        created = self.s.slots.inbox.created[:created_mark]
        self._happened(*pool_events.batches_settled(self.s.slots, created))
        self.s.slots.settle_created(created_mark, listed=(d.id for d in self._devices))
        self._take_reports(done_mark)
        await self._check_batches()
        await self._sync_health_config()
        await self._probe_region()
        raise_if_cancelled()
        plan = self._plan()
        if not self._observe_failed:
            await self._act(plan)
        if self._announced:
            self._announced = False
            if self._observe_failed or not plan.create:
                self._in_background(self._tell_ledger(expecting=False))
        raise_if_cancelled()
        self._publish(plan)
        if workflow.info().is_continue_as_new_suggested():
            await self._continue_as_new()
        self._need_observe = await self._wait(plan)

    # ------------------------------------------------------------------ observe

    async def _observe_all(self) -> None:
        """One round trip for everything the pass must know, not one each."""
        looks = []
        if self._settings is None:
            looks.append(self._read_settings())
        if self._refs_problems is None:
            looks.append(self._check_refs())
        if self._need_observe:
            looks.append(self._observe())
        await asyncio.gather(*looks)

    async def _read_settings(self) -> None:
        self._settings = await calls.read_settings()

    async def _check_refs(self) -> None:
        proxy = self._spec.proxy
        self._refs_problems = await calls.check_refs(
            self._account, proxy.pool_ref if proxy else None
        )

    async def _observe(self) -> None:
        number = self._observations.begin()
        try:
            devices = await calls.list_devices(self._account, self._name)
        except ActivityError as err:
            # Keep the last observation; never create or terminate on a guess.
            workflow.logger.warning("pool %s: cannot list devices: %s", self._name, err)
            self._observe_failed = True
            if self._observe_problem != problem(err):
                self._happened(pool_events.Happened("ListFailed", problem(err), warning=True))
            self._observe_problem = problem(err)
            return
        if self._observe_problem:
            self._happened(pool_events.Happened("Listed", "the pool's devices are listed again"))
        self._observe_failed, self._observe_problem = False, None
        if self._observations.accept(number):
            self._take_listing(devices)

    def _take_listing(self, devices: list[am.DeviceInfo]) -> None:
        """The pool's devices are these now. An offline device they show gone was
        removed by someone else (the health check, whose report may arrive after
        this listing, or a person): its create is a replacement, served ahead of growth."""
        # A device the health check reported terminated is gone, whatever a
        # listing that started before its termination says.
        self.s.slots.seen(d.id for d in devices)
        devices = [d for d in devices if d.id not in self._reported_gone]
        # The previous listing's offline devices come from the state: a run that
        # continued as new in between still knows them.
        gone = lost_offline(self.s.offline_seen, devices)
        fresh = [d for d in gone if d not in self.s.replacing and d not in self.s.doomed]
        # Credited by the health check's report first: settled now.
        self.s.replacing = [d for d in self.s.replacing if d not in gone]
        if fresh and not self.s.deleting:
            self.s.replacements_owed += len(fresh)
            self.s.replacing = (self.s.replacing + fresh)[-REPLACING_LIMIT:]
        self._devices = devices
        self.s.offline_seen = offline_ids(devices)

    def _take_reports(self, count: int) -> None:
        for report in self.s.slots.finish(count):
            self._count_removed_failed(report)
            ours = self.s.scaled_down_booting
            self._happened(*pool_events.batch_done(report, ours=ours))
            self.s.scaled_down_booting = [d for d in ours if d not in report.vanished_devices]
            self.s.doomed.update(report.failed_devices)
            problem = self.s.backoff.record(
                report, region=self._spec.region, settings=self.settings, now=workflow.now()
            )
            if problem:
                workflow.logger.warning("pool %s: creates paused: %s", self._name, problem)
                self._happened(pool_events.backed_off(self.s.backoff))

    def _count_removed_failed(self, report: BatchReport) -> None:
        """A failed device this pool removed first is still a failed boot, not a vanished one."""
        removed = [d for d in report.vanished_devices if d in self.s.removed_failed]
        if not removed:
            return
        for device_id in removed:
            report.vanished_devices.pop(device_id)
            report.failed_devices[device_id] = "failed (removed by the pool)"
        self.s.removed_failed = [d for d in self.s.removed_failed if d not in removed]

    async def _check_batches(self) -> None:
        await children.check_batches(self.s.slots, pool=self._name, every=self._batch_check_every())

    def _batch_check_every(self) -> timedelta:
        return timedelta(seconds=2 * self.settings.startup_timeout_seconds + 60)

    async def _probe_region(self) -> None:
        """When a back-off ends, ask the provider about the region before creating again."""
        backoff, now = self.s.backoff, workflow.now()
        if not backoff.probe_due(now):
            return
        try:
            region = await calls.region_status(self._account, self._spec.region)
        except ActivityError as err:
            backoff.pause(
                f"RegionProbeFailed: {error_message(err)}", settings=self.settings, now=now
            )
            self._happened(pool_events.backed_off(backoff))
            return
        if region == "down":
            problem = f"RegionDown: the provider reports {self._spec.region} down"
            backoff.pause(problem, settings=self.settings, now=now)
            self._happened(pool_events.backed_off(backoff))
        else:
            backoff.region_up(self.settings)
            self._happened(pool_events.region_up(self._spec.region, region))

    # ------------------------------------------------------------------ plan / act

    def _plan(self) -> Plan:
        """The plan; a surplus first withdraws creates that have not landed."""
        plan = self._plan_once()
        surplus = plan.members - self._spec.replicas
        if surplus <= 0 or self._observe_failed:
            return plan
        # Shrink what is not yet rented before touching a serving device: the
        # batches drop slots that hold no permit yet (newest first) and say so.
        asked = self.s.slots.withdraw(surplus, self._observed_slots())
        if not asked:
            return plan
        for batch_id, slots in asked.items():
            self._in_background(children.withdraw_slots(batch_id, slots))
        return self._plan_once()

    def _plan_once(self) -> Plan:
        return plan_pool(
            replicas=self._spec.replicas,
            # Devices already on their way out are not members any more.
            devices=[d for d in self._devices if d.id not in self.s.doomed],
            in_flight=self.s.slots.pending(self._observed_slots()),
            unseen=len(self.s.slots.unseen),
            now=workflow.now(),
            idle_grace=timedelta(seconds=self.settings.idle_grace_seconds),
            allow_create=not self._refs_problems and not self.s.backoff.active(workflow.now()),
        )

    async def _act(self, plan: Plan) -> None:
        doomed = sorted(self.s.doomed | set(plan.remove_failed))
        if plan.terminate or doomed:
            # Surplus goes only if still idle at the provider (the listing may be old).
            await self._terminate(plan.terminate + doomed, only_if_idle=set(plan.terminate))
            removed = [d for d in plan.remove_failed if d not in self.s.doomed]
            self.s.removed_failed = (self.s.removed_failed + removed)[-events.LIMIT :]
        count = plan.create
        while count > 0:
            count -= self._start_batch(count)

    def _start_batch(self, count: int) -> int:
        """Hand up to `count` creates to one provisioning child; how many it took."""
        slots, settings = self.s.slots, self.settings
        # Replacements for devices the health check removed go first, in batches
        # of their own: the account's ledger serves them ahead of growth.
        owed = self.s.replacements_owed
        n = min(settings.provision_batch_size, count, owed or count)
        generation, taken = slots.take(
            n, generation=self.s.generation, observed_slots=self._observed_slots()
        )
        self.s.replacements_owed -= len(taken) if owed else 0
        child_id = names.provision_workflow_id(
            self._name, self.s.generation, slots.next_batch_number()
        )
        slots.open_batch(child_id, generation, taken, workflow.now())
        self._happened(pool_events.batch_started(len(taken), replacement=owed > 0))
        input = children.batch_input(
            pool=self._name,
            spec=self._spec,
            settings=settings,
            generation=generation,
            slots=taken,
            replacement=owed > 0,
        )
        # Not awaited: the child reports through signals, to this run or the next.
        self._in_background(self._start_child(child_id, input))
        return len(taken)

    async def _start_child(self, child_id: str, input: ProvisionBatchInput) -> None:
        if not await children.start_batch(child_id, input):
            self.s.slots.drop(child_id)  # planned again on the next pass
            self._dirty = True

    async def _terminate(self, device_ids: list[str], *, only_if_idle: set[str]) -> None:
        self._retry_terminations = False
        seen = {d.id: d.idle_since for d in self._devices if d.id in only_if_idle}
        done = await calls.terminate_devices(
            self._account, device_ids, only_if_idle=only_if_idle, idle_since=seen
        )
        self.s.scaled_down_booting = pool_events.remember_booting(
            self.s.scaled_down_booting, self._devices, only_if_idle, done.failed, done.skipped
        )
        self._happened(
            *pool_events.terminations(
                surplus=[d for d in device_ids if d in only_if_idle and d not in done.failed],
                doomed=[d for d in device_ids if d not in only_if_idle and d not in done.failed],
                skipped=done.skipped,
            )
        )
        if done.failed:
            self._happened(pool_events.termination_failed(done.failed))
        for device_id in device_ids:
            if device_id in done.failed:
                workflow.logger.warning(
                    "terminate %s failed: %s", device_id, done.failed[device_id]
                )
                if device_id in only_if_idle:
                    # A scale-down that failed leaves a member like any other:
                    # the next pass plans again, and re-checks it is idle.
                    self._retry_terminations = True
                else:
                    self.s.doomed.add(device_id)  # must go whatever its state: tried again
            elif device_id in done.skipped:
                # Busy since the listing: kept; a fresh look decides again.
                workflow.logger.info(
                    "pool %s: kept %s (%s)", self._name, device_id, done.skipped[device_id]
                )
                self._dirty = True
            else:
                self.s.doomed.discard(device_id)

    # ------------------------------------------------------------------ publish / wait

    def _publish(self, plan: Plan) -> None:
        pause = self.s.account_pause
        if pause is not None and pause.until <= workflow.now():
            self.s.account_pause = None  # over: said by the condition going back to True
        view = st.PoolView(
            spec=self._spec,
            generation=self.s.generation,
            plan=plan,
            # A batch whose creates all landed only waits for boots: its devices
            # are counted by observation (as provisioning), not as creates.
            creating=self.s.slots.creating() or plan.create > 0,
            device_ids=sorted(d.id for d in self._devices if d.id not in self.s.doomed),
            refs_problems=self._refs_problems,
            backoff=self.s.backoff,
            health=self.s.health,
            now=workflow.now(),
            observe_problem=self._observe_problem,
            account_pause=self.s.account_pause,
        )
        self.s.status = st.published(self.s.status, view)
        self._show()

    async def _wait(self, plan: Plan) -> bool:
        """Wait for something worth a pass; return whether devices must be listed again."""
        if self._watch is None and not self._observe_failed:
            self._watch_number = self._observations.begin()
            self._watch = asyncio.ensure_future(self._watch_devices())
        watch = self._watch
        timed_out = False
        try:
            await workflow.wait_condition(
                lambda: self._dirty or self._replan or (watch is not None and watch.done()),
                timeout=self._wake_after(plan),
                timeout_summary="next check",
            )
        except TimeoutError:
            timed_out = True
        need_observe = timed_out or self._dirty
        self._dirty = self._replan = False
        if watch is not None and watch.done():
            self._watch = None
            try:
                answer = watch.result()
                devices = answer.devices
                if answer.health_ended:
                    workflow.logger.warning(
                        "pool %s: health check ended; started again", self._name
                    )
                    self._happened(
                        pool_events.Happened(
                            "HealthCheckRestarted", "the health check had ended", warning=True
                        )
                    )
                    self._health_started = False
                if self._observations.accept(self._watch_number):
                    self._take_listing(devices)
                else:
                    workflow.logger.info("pool %s: an older watch answer dropped", self._name)
            except ActivityError as err:
                workflow.logger.warning("watch failed: %s", err)
                need_observe = True
        if timed_out and self._refs_problems:
            self._refs_problems = None  # look again: the worker config may be fixed
        return need_observe

    async def _watch_devices(self) -> am.WatchDevicesResult:
        # Only once this run started (or found) the health check may it be missed.
        health = names.health_workflow_id(self._name) if self._health_started else None
        return await calls.watch_devices(
            self._account, self._name, self._devices, self.settings, health_workflow_id=health
        )

    def _wake_after(self, plan: Plan) -> timedelta | None:
        """A timer only when a deadline exists; an idle converged pool sets none."""
        now, settings = workflow.now(), self.settings
        pause = self.s.account_pause.until if self.s.account_pause else None
        deadlines: list[datetime] = [
            d for d in (plan.next_idle_at, self.s.backoff.until, pause) if d
        ]
        if self._refs_problems or self.s.doomed or self._observe_failed or self._retry_terminations:
            deadlines.append(now + timedelta(seconds=settings.resync_seconds))
        check = self.s.slots.next_check_at(self._batch_check_every())
        if check is not None:
            deadlines.append(check + timedelta(seconds=1))
        if not deadlines:
            return None
        return max(timedelta(seconds=1), min(deadlines) - now)

    # ------------------------------------------------------------------ delete / hand over

    async def _delete(self) -> None:
        """The finalizer: stop provisioning, remove every device, then end."""
        if not self.s.deleting:
            self._happened(pool_events.Happened("Deleting", "removing every device of the pool"))
        self._deleting = self.s.deleting = True
        self.s.status = self.s.status.model_copy(update={"phase": Phase.DELETING})
        self._show()
        self._drop_watch()
        teardown = asyncio.ensure_future(self._teardown())
        while not teardown.done():
            try:
                await asyncio.shield(teardown)
            except asyncio.CancelledError:
                # A second delete must not abort the finalizer halfway.
                workflow.logger.info("pool %s: already deleting", self._name)
        teardown.result()
        self._happened(pool_events.Happened("Deleted", "no device of the pool is left"))
        self.s.status = st.deleted(self.s.status, workflow.now())
        self._show()

    async def _teardown(self) -> None:
        await workflow.wait_condition(lambda: not self._starting)
        slots = self.s.slots
        await finalizer.tear_down(
            slots,
            pool=self._name,
            account=self._account,
            health_id=names.health_workflow_id(self._name),
            settings=self.settings,
            rented_anything=slots.next_slot > 0 or bool(self._devices),
            blocked=self._blocked,
            hand_over=self._hand_over_while_deleting,
        )

    def _blocked(self, reason: str, message: str) -> None:
        true, false = ConditionStatus.TRUE, ConditionStatus.FALSE
        # A pool that cannot finish deleting is not ready: an unknown account by
        # its own reason (as a pass shows it), any other block as TeardownBlocked.
        if reason == finalizer.condition_reason(ErrorType.UNKNOWN_ACCOUNT):
            self._set_condition(st.ConditionUpdate(ConditionType.READY, false, reason, message))
        else:
            blocked = ConditionType.TEARDOWN_BLOCKED.value
            ready = st.ConditionUpdate(ConditionType.READY, false, blocked, f"{reason}: {message}")
            self._set_condition(ready)
        self._set_condition(
            st.ConditionUpdate(ConditionType.TEARDOWN_BLOCKED, true, reason, message)
        )
        self._happened(pool_events.Happened("TeardownBlocked", f"{reason}: {message}", True))
        self._show_details()

    async def _hand_over_while_deleting(self) -> None:
        """Keep a long teardown's history bounded: continue-as-new, still deleting."""
        if not workflow.info().is_continue_as_new_suggested():
            return
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() and not self._starting
        )
        self._hand_over()

    async def _continue_as_new(self) -> None:
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() and not self._starting
        )
        raise_if_cancelled()  # never carry a deletion into a new run
        self._drop_watch()
        self._hand_over()

    def _hand_over(self) -> NoReturn:
        """Continue as new with the whole state and the last listing (`PoolState.listing`)."""
        settings = self._settings if self._settings_pinned else None
        self.s.listing = am.device_rows(self._devices, pool=self._name)
        workflow.continue_as_new(
            PoolInput(metadata=self._metadata, spec=self._spec, settings=settings, state=self.s)
        )

    def _drop_watch(self) -> None:
        """Cancel the running watch without awaiting it (its outcome no longer matters)."""
        if self._watch is not None:
            self._watch.cancel()
            # Retrieve the outcome so asyncio does not log "exception never retrieved".
            self._watch.add_done_callback(lambda task: task.cancelled() or task.exception())
            self._watch = None

    # ------------------------------------------------------------------ helpers

    def _in_background(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _tell_ledger(self, *, expecting: bool) -> None:
        await children.tell_ledger(account=self._account, pool=self._name, expecting=expecting)

    async def _start_health(self) -> None:
        # A new pool replaces a check left running by a dead pool of its name.
        self._health_started = await children.start_health(
            replace_stale=not self.s.health_started,
            pool=self._name,
            account=self._account,
            settings=self.settings,
            config=self.s.health_told or self._health_config(),
        )
        if self._health_started:
            self.s.health_started = True

    async def _sync_health_config(self) -> None:
        """Tell the health child when `maxUnhealthy` or the desired size changed."""
        wanted, told = self._health_config(), self.s.health_told
        if wanted == told:
            return
        if await children.tell_health(pool=self._name, config=wanted):
            self.s.health_told = wanted

    def _health_config(self) -> HealthConfig:
        return HealthConfig(max_unhealthy=self._spec.max_unhealthy, replicas=self._spec.replicas)

    def _observed_slots(self) -> set[str]:
        return observed_slots(
            (d.labels for d in self._devices), names.LABEL_SLOT, children.incarnation()
        )

    @property
    def settings(self) -> am.PoolSettings:
        return self._settings or am.PoolSettings()
