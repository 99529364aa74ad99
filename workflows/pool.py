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
- signal `batch_done` (`BatchReport`): a provisioning child has finished.
- queries `status` (camelCase status JSON), `devices` (`DevicesView`), `spec`.
- cancellation = deletion: stop provisioning, terminate every device until
  the provider lists none alive (the finalizer), then end CANCELED.

Loop: observe → plan (workflows/plan.py, pure) → act → publish → wait.

Cheap when idle: instead of a resync timer (≈5 history events per tick), the
pool runs one long `watch_devices` activity that polls the provider every
`resync_seconds` inside the worker, heartbeating, and returns only when the
pool's devices changed (or after `watch_max_seconds`). An idle, converged pool
therefore costs one activity (≈6 events) per `watch_max_seconds`.

Continue-as-new: when Temporal suggests it, after all handlers finished,
carrying `CarriedState`. Provisioning children are started with
`ParentClosePolicy.ABANDON` and tracked by id in the carried state, so they
survive the hand-over and report to the next run.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.models import (
        HEARTBEAT_TIMEOUT,
        CheckRefsInput,
        DeviceInfo,
        ListDevicesInput,
        PoolSettings,
        RegionStatusInput,
        TerminateDeviceInput,
        TerminatePoolInput,
        WatchDevicesInput,
        WatchDevicesResult,
        device_fingerprint,
    )
    from devicepool.api.errors import ErrorType
    from devicepool.api.names import (
        LABEL_SLOT,
        QUERY_DEVICES,
        QUERY_SPEC,
        QUERY_STATUS,
        SA_ACCOUNT,
        SA_DESIRED,
        SA_PHASE,
        SA_PLATFORM,
        SA_READY,
        SA_REGION,
        SIGNAL_BATCH_CREATED,
        SIGNAL_BATCH_DONE,
        SIGNAL_HEALTH_CONFIG,
        SIGNAL_HEALTH_REPORT,
        SIGNAL_PERMIT_INTENT,
        SIGNAL_SCALE,
        TASK_QUEUE,
        UPDATE_APPLY,
        UPDATE_SCALE,
        WORKFLOW_DEVICE_POOL,
        health_workflow_id,
        ledger_workflow_id,
        provision_workflow_id,
    )
    from devicepool.api.v1alpha1 import (
        MAX_REPLICAS,
        Condition,
        ConditionStatus,
        ConditionType,
        DevicePoolSpec,
        DevicePoolStatus,
        ObjectMeta,
        Phase,
    )
    from devicepool.workflows.cancellation import raise_if_cancelled
    from devicepool.workflows.health import PoolHealthWorkflow
    from devicepool.workflows.ledger import PermitIntent
    from devicepool.workflows.messages import (
        Accepted,
        ApplyRequest,
        BatchReport,
        CarriedState,
        DevicesView,
        HealthConfig,
        HealthInput,
        HealthReport,
        InFlightBatch,
        PoolInput,
        ProvisionBatchInput,
        ScaleRequest,
    )
    from devicepool.workflows.plan import Plan, plan_pool
    from devicepool.workflows.provision import ProvisionBatchWorkflow

KEY_PLATFORM = SearchAttributeKey.for_keyword(SA_PLATFORM)
KEY_REGION = SearchAttributeKey.for_keyword(SA_REGION)
KEY_ACCOUNT = SearchAttributeKey.for_keyword(SA_ACCOUNT)
KEY_PHASE = SearchAttributeKey.for_keyword(SA_PHASE)
KEY_DESIRED = SearchAttributeKey.for_int(SA_DESIRED)
KEY_READY = SearchAttributeKey.for_int(SA_READY)

# Fields a running pool cannot change: its devices were rented under them.
IMMUTABLE_FIELDS = ("provider", "platform", "region", "provider_credential_ref")
# Mutable spec fields that go into a create's body (with the immutable ones).
CREATE_BODY_FIELDS = ("os_version", "proxy")

SHORT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
# The finalizer and terminations keep going until the provider agrees.
FOREVER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)


@workflow.defn(name=WORKFLOW_DEVICE_POOL)
class DevicePoolWorkflow:
    @workflow.init
    def __init__(self, input: PoolInput) -> None:
        state = input.state or CarriedState()
        self._metadata: ObjectMeta = input.metadata
        self._spec: DevicePoolSpec = input.spec
        self._settings: PoolSettings | None = input.settings
        # Settings given in the input (tests, a caller overriding the worker) are
        # kept across continue-as-new; otherwise each run re-reads the worker's.
        self._settings_pinned = input.settings is not None
        self._generation = state.generation
        self._next_slot = state.next_slot
        self._next_batch = state.next_batch
        self._retry_slots: list[tuple[int, int]] = list(state.retry_slots)
        self._body_generation = state.body_generation
        self._in_flight: dict[str, InFlightBatch] = {b.workflow_id: b for b in state.in_flight}
        self._doomed: set[str] = set(state.doomed)
        self._status = (
            DevicePoolStatus.model_validate(state.status)
            if state.status
            else DevicePoolStatus(desired_replicas=input.spec.replicas)
        )
        self._created_at: datetime | None = state.created_at
        # Failing replacements: consecutive devices that never became ready, and
        # the durable back-off that stops creates in the region meanwhile.
        self._failure_streak = state.failure_streak
        self._backoff_seconds = state.backoff_seconds
        self._backoff_until: datetime | None = state.backoff_until
        self._provider_problem: str | None = state.provider_problem
        self._health: HealthReport | None = None
        # The maxUnhealthy the health child was started with or last told.
        self._health_max_unhealthy: int | str = input.spec.max_unhealthy
        self._replaced_total = state.replaced_total
        self._replacements_owed = state.replacements_owed
        self._devices: list[DeviceInfo] = []
        # Batch reports wait here until an observation made after their arrival
        # (`batch_created`: slots whose creates landed; `batch_done`: the end).
        self._reports: list[BatchReport] = list(state.reports)
        self._created: list[BatchReport] = list(state.created_reports)
        self._refs_problems: list[str] | None = None
        self._observe_failed = False
        # Child starts in progress: continue-as-new waits for them to resolve.
        self._starting: set[asyncio.Task[None]] = set()
        self._dirty = False
        self._deleting = False
        self._details = ""
        self._watch: asyncio.Task[WatchDevicesResult] | None = None
        # Tell the account's ledger a permit request is on its way (a new pool,
        # or replicas raised) so it deals this pool into the next round.
        self._announce = input.state is None
        self._announced = False
        self._health_started = False

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: PoolInput) -> dict[str, Any]:
        if self._created_at is None:
            self._created_at = workflow.now()
        try:
            await self._reconcile_forever()
        except asyncio.CancelledError:
            await self._delete()
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read_settings(self) -> None:
        self._settings = await workflow.execute_activity_method(
            DeviceActivityDefinitions.pool_settings,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=SHORT_RETRY,
            summary="read the worker's intervals",
        )

    def _in_background(self, coroutine: Any) -> None:
        """Run a command that needs no answer; continue-as-new and teardown wait for it."""
        task = asyncio.ensure_future(coroutine)
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _tell_ledger(self, expecting: bool) -> None:
        try:
            await workflow.get_external_workflow_handle(ledger_workflow_id(self._account)).signal(
                SIGNAL_PERMIT_INTENT, PermitIntent(pool=self._name, expecting=expecting)
            )
        except FailureError as err:
            # No ledger for this account (yet): batches then create without permits.
            workflow.logger.info("ledger of %s not told: %s", self._account, err)

    async def _ensure_health(self) -> None:
        """Start the health child, or find it still running from the previous run."""
        try:
            child = await workflow.start_child_workflow(
                PoolHealthWorkflow.run,
                HealthInput(
                    pool=self._name,
                    parent_workflow_id=workflow.info().workflow_id,
                    account=self._account,
                    settings=self._settings_,
                    config=HealthConfig(max_unhealthy=self._spec.max_unhealthy),
                ),
                id=health_workflow_id(self._name),
                task_queue=TASK_QUEUE,
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"health checks of {self._name}",
            )
            _forget_outcome(child)
        except WorkflowAlreadyStartedError:
            # Abandoned by the previous run at continue-as-new: it keeps its
            # offline clocks and reports to this run (signals go by id).
            workflow.logger.info("pool %s: health check already running", self._name)
        except FailureError as err:
            # Started in the background: try again on the next pass.
            workflow.logger.warning("pool %s: health check not started: %s", self._name, err)
            self._health_started = False

    async def _sync_health_config(self) -> None:
        """Tell the health child when `maxUnhealthy` changed."""
        if self._spec.max_unhealthy == self._health_max_unhealthy:
            return
        try:
            await workflow.get_external_workflow_handle(health_workflow_id(self._name)).signal(
                SIGNAL_HEALTH_CONFIG, HealthConfig(max_unhealthy=self._spec.max_unhealthy)
            )
        except FailureError as err:
            workflow.logger.warning("health check of %s not told: %s", self._name, err)
            return
        self._health_max_unhealthy = self._spec.max_unhealthy

    async def _reconcile_forever(self) -> None:
        need_observe = True
        while True:
            # A deletion that arrived while an activity was awaited surfaces
            # here (see workflows/cancellation.py), before anything is acted on.
            raise_if_cancelled()
            # Reports are applied against an observation that started after they
            # arrived. Applied to an older one, a batch would stop counting as
            # in flight before its devices are seen, and the pool would create
            # them again. Later ones wait for the next pass.
            inbox = len(self._created), len(self._reports)
            if self._announce:
                self._announce, self._announced = False, True
                self._in_background(self._tell_ledger(expecting=True))
            # One round trip for everything the pass must know, not one each.
            looks = []
            if self._settings is None:
                looks.append(self._read_settings())
            if self._refs_problems is None:
                looks.append(self._check_refs())
            if need_observe:
                looks.append(self._observe())
            await asyncio.gather(*looks)
            if not self._health_started:
                self._health_started = True
                self._in_background(self._ensure_health())
            self._settle_created(inbox[0])
            self._take_reports(inbox[1])
            await self._sync_health_config()
            await self._probe_region_after_backoff()
            raise_if_cancelled()
            plan = self._plan()
            if not self._observe_failed:
                await self._act(plan)
            if self._announced:
                self._announced = False
                if self._observe_failed or not plan.create:
                    # Nothing to ask for after all: the ledger need not wait.
                    self._in_background(self._tell_ledger(expecting=False))
            raise_if_cancelled()
            self._publish(plan)

            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() and not self._starting
                )
                raise_if_cancelled()  # never carry a deletion into a new run
                self._continue_as_new()

            need_observe = await self._wait(plan)

    # ------------------------------------------------------------------ observe / plan / act

    async def _observe(self) -> None:
        try:
            result = await workflow.execute_activity_method(
                DeviceActivityDefinitions.list_devices,
                ListDevicesInput(account=self._account, pool=self._name),
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=5),
                retry_policy=SHORT_RETRY,
                summary="observe devices",
            )
        except ActivityError as err:
            # Keep the last observation; never create or terminate on a guess.
            # The pool looks again after `resync_seconds`.
            workflow.logger.warning("pool %s: cannot list devices: %s", self._name, err)
            self._observe_failed = True
            return
        self._observe_failed = False
        self._devices = result.devices

    def _plan(self) -> Plan:
        observed_slots = {d.labels.get(LABEL_SLOT) for d in self._devices}
        in_flight = sum(
            1
            for batch in self._in_flight.values()
            for slot in batch.slots
            if str(slot) not in observed_slots
        )
        # Devices already on their way out are not members any more.
        devices = [d for d in self._devices if d.id not in self._doomed]
        return plan_pool(
            replicas=self._spec.replicas,
            devices=devices,
            in_flight=in_flight,
            now=workflow.now(),
            idle_grace=timedelta(seconds=self._settings_.idle_grace_seconds),
            allow_create=not self._refs_problems and not self._backing_off(),
        )

    async def _act(self, plan: Plan) -> None:
        doomed = sorted(self._doomed | set(plan.remove_failed))
        if plan.terminate or doomed:
            await self._terminate(plan.terminate + doomed)
        if plan.create:
            self._start_batches(plan.create)

    def _start_batches(self, count: int) -> None:
        settings = self._settings_
        size = settings.provision_batch_size
        while count > 0:
            # Devices owed for unhealthy ones the health check removed go first,
            # in batches of their own: the account's permit ledger serves
            # replacements ahead of growth.
            replacement = self._replacements_owed > 0
            n = min(size, count, self._replacements_owed) if replacement else min(size, count)
            generation, slots = self._take_slots(n)
            self._replacements_owed -= len(slots) if replacement else 0
            count -= len(slots)
            child_id = provision_workflow_id(self._name, self._generation, self._next_batch)
            self._next_batch += 1
            self._in_flight[child_id] = InFlightBatch(
                workflow_id=child_id,
                generation=generation,
                slots=slots,
                started_at=workflow.now(),
            )
            # Not awaited: the child reports through `batch_done`, which also
            # reaches the next run after a continue-as-new.
            self._in_background(self._start_child(child_id, generation, slots, replacement))

    def _take_slots(self, n: int) -> tuple[int, list[int]]:
        """Up to `n` slots for one batch, and the generation of their idempotency keys.

        Slots whose create failed come first, under their old key: a create the
        provider accepted after its activity gave up (a killed worker, a timeout
        racing the answer) is then found again instead of renting a second
        device. A slot is dropped once its device is observed, and when the
        create body changed since (a new osVersion or proxy would make the old
        key a 422).
        """
        observed = {d.labels.get(LABEL_SLOT) for d in self._devices}
        self._retry_slots = [
            (generation, slot)
            for generation, slot in self._retry_slots
            if generation >= self._body_generation and str(slot) not in observed
        ]
        if self._retry_slots:
            generation = self._retry_slots[0][0]
            slots = [s for g, s in self._retry_slots if g == generation][:n]
            self._retry_slots = [
                (g, s) for g, s in self._retry_slots if g != generation or s not in slots
            ]
            return generation, slots
        slots = list(range(self._next_slot, self._next_slot + n))
        self._next_slot += n
        return self._generation, slots

    async def _start_child(
        self, child_id: str, generation: int, slots: list[int], replacement: bool
    ) -> None:
        settings = self._settings_
        proxy = self._spec.proxy
        try:
            child = await workflow.start_child_workflow(
                ProvisionBatchWorkflow.run,
                ProvisionBatchInput(
                    pool=self._name,
                    parent_workflow_id=workflow.info().workflow_id,
                    replacement=replacement,
                    account=self._account,
                    platform=self._spec.platform,
                    region=self._spec.region,
                    os_version=self._spec.os_version,
                    proxy_pool=proxy.pool_ref if proxy else None,
                    sticky_ttl=proxy.sticky_ttl if proxy else 0,
                    generation=generation,
                    slots=slots,
                    # Constant across continue-as-new; new when the pool is
                    # deleted and applied again under the same name.
                    incarnation=workflow.info().first_execution_run_id[-12:],
                    startup_timeout_seconds=settings.startup_timeout_seconds,
                    poll_seconds=min(5.0, settings.resync_seconds),
                ),
                id=child_id,
                task_queue=TASK_QUEUE,
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"provision {len(slots)} device(s) for {self._name}",
            )
            _forget_outcome(child)
        except FailureError as err:
            # Could not start (e.g. the id is taken by a batch of a terminated
            # earlier pool with the same name): forget it, the next pass re-plans.
            workflow.logger.warning("batch %s did not start: %s", child_id, err)
            self._in_flight.pop(child_id, None)
            self._dirty = True

    async def _terminate(self, device_ids: list[str]) -> None:
        async def one(device_id: str) -> None:
            await workflow.execute_activity_method(
                DeviceActivityDefinitions.terminate_device,
                TerminateDeviceInput(account=self._account, device_id=device_id),
                start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                schedule_to_close_timeout=timedelta(minutes=5),
                retry_policy=FOREVER_RETRY,
                summary=f"terminate {device_id}",
            )
            self._doomed.discard(device_id)

        results = await asyncio.gather(*(one(d) for d in device_ids), return_exceptions=True)
        for device_id, result in zip(device_ids, results, strict=True):
            if isinstance(result, ActivityError):
                # Keep it doomed: the next pass tries again.
                self._doomed.add(device_id)
                workflow.logger.warning("terminate %s failed: %s", device_id, result)
            elif isinstance(result, BaseException):
                raise result

    def _settle_created(self, count: int) -> None:
        """Slots whose creates landed are counted by observation from now on."""
        created, self._created = self._created[:count], self._created[count:]
        for report in created:
            batch = self._in_flight.get(report.workflow_id)
            if batch is not None:
                self._retry_failed(batch, report)
                settled = set(report.created) | set(report.failed_slots)
                batch.slots = [slot for slot in batch.slots if slot not in settled]

    def _retry_failed(self, batch: InFlightBatch, report: BatchReport) -> None:
        """Slots of `batch` whose create failed are planned again under their keys."""
        self._retry_slots += [
            (batch.generation, slot) for slot in batch.slots if slot in report.failed_slots
        ]

    def _take_reports(self, count: int) -> None:
        reports, self._reports = self._reports[:count], self._reports[count:]
        for report in reports:
            batch = self._in_flight.pop(report.workflow_id, None)
            if batch is not None and not report.cancelled:
                self._retry_failed(batch, report)
            self._doomed.update(report.failed_devices)
            self._count_failures(report)
        # A batch whose report never came (its run was terminated by hand)
        # must not hold its slots forever.
        limit = timedelta(seconds=2 * self._settings_.startup_timeout_seconds + 60)
        now = workflow.now()
        for child_id, batch in list(self._in_flight.items()):
            if now - batch.started_at > limit:
                workflow.logger.warning("batch %s never reported; forgetting it", child_id)
                del self._in_flight[child_id]

    def _count_failures(self, report: BatchReport) -> None:
        region_down = [
            r
            for r in report.failed_slots.values()
            if r.startswith(ErrorType.REGION_UNAVAILABLE.value)
        ]
        # Creates the provider never answered (a worker died, the call timed out)
        # are re-planned; only its refusals and devices that never booted count.
        refused = len(report.failed_slots) - len(report.unanswered_slots)
        failures = refused + len(report.failed_devices)
        if report.ready:
            # Devices come up again: the region works.
            self._failure_streak = 0
            self._backoff_seconds = 0
            self._backoff_until = None
            self._provider_problem = None
        self._failure_streak += failures
        settings = self._settings_
        if region_down:
            self._back_off(f"RegionUnavailable: {region_down[0]}")
        elif self._failure_streak >= settings.failure_streak_limit:
            self._back_off(
                f"ReplacementsFailing: {self._failure_streak} device(s) in a row never became "
                f"ready in {self._spec.region}"
            )

    def _back_off(self, problem: str) -> None:
        settings = self._settings_
        self._backoff_seconds = min(
            settings.backoff_max_seconds,
            max(settings.backoff_initial_seconds, 2 * self._backoff_seconds),
        )
        self._backoff_until = workflow.now() + timedelta(seconds=self._backoff_seconds)
        self._provider_problem = problem
        workflow.logger.warning(
            "pool %s: creates paused for %ss: %s", self._name, self._backoff_seconds, problem
        )

    def _backing_off(self) -> bool:
        return self._backoff_until is not None and workflow.now() < self._backoff_until

    async def _probe_region_after_backoff(self) -> None:
        """When a back-off ends, ask the provider about the region before creating again."""
        if self._backoff_until is None or self._backing_off():
            return
        try:
            region = await workflow.execute_activity_method(
                DeviceActivityDefinitions.region_status,
                RegionStatusInput(account=self._account, region=self._spec.region),
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(minutes=2),
                retry_policy=SHORT_RETRY,
                summary=f"probe region {self._spec.region}",
            )
        except ActivityError as err:
            self._back_off(f"RegionProbeFailed: {_error_message(err)}")
            return
        if region.status == "down":
            self._back_off(f"RegionDown: the provider reports {self._spec.region} down")
            return
        # Up (or degraded): try again, one failure away from a longer back-off.
        self._backoff_until = None
        self._failure_streak = max(0, self._settings_.failure_streak_limit - 1)

    async def _check_refs(self) -> None:
        proxy = self._spec.proxy
        result = await workflow.execute_activity_method(
            DeviceActivityDefinitions.check_pool_refs,
            CheckRefsInput(account=self._account, proxy_pool=proxy.pool_ref if proxy else None),
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=SHORT_RETRY,
            summary="check account and proxy pool",
        )
        self._refs_problems = result.problems

    # ------------------------------------------------------------------ wait

    async def _wait(self, plan: Plan) -> bool:
        """Wait for something worth a pass; return whether devices must be listed again."""
        settings = self._settings_
        if self._watch is None and not self._observe_failed:
            self._watch = asyncio.ensure_future(
                workflow.execute_activity_method(
                    DeviceActivityDefinitions.watch_devices,
                    WatchDevicesInput(
                        account=self._account,
                        pool=self._name,
                        fingerprint=device_fingerprint(self._devices),
                        poll_seconds=settings.resync_seconds,
                        max_seconds=settings.watch_max_seconds,
                    ),
                    start_to_close_timeout=timedelta(seconds=settings.watch_max_seconds + 120),
                    heartbeat_timeout=timedelta(seconds=max(30.0, 3 * settings.resync_seconds)),
                    retry_policy=SHORT_RETRY,
                    summary="watch for changes",
                )
            )
        watch = self._watch
        timeout = self._wake_after(plan)
        timed_out = False
        try:
            await workflow.wait_condition(
                lambda: self._dirty or (watch is not None and watch.done()),
                timeout=timeout,
                timeout_summary="next check",
            )
        except TimeoutError:
            timed_out = True

        need_observe = timed_out or self._dirty
        if self._dirty:
            self._dirty = False
        if watch is not None and watch.done():
            self._watch = None
            try:
                self._devices = watch.result().devices
            except ActivityError as err:
                workflow.logger.warning("watch failed: %s", err)
                need_observe = True
        if timed_out and self._refs_problems:
            self._refs_problems = None  # look again: the worker config may be fixed
        return need_observe

    def _wake_after(self, plan: Plan) -> timedelta | None:
        """A timer only when a deadline exists; an idle converged pool sets none."""
        now = workflow.now()
        deadlines: list[datetime] = []
        if plan.next_idle_at is not None:
            deadlines.append(plan.next_idle_at)
        if self._backoff_until is not None:
            deadlines.append(self._backoff_until)
        if self._refs_problems or self._doomed or self._observe_failed:
            deadlines.append(now + timedelta(seconds=self._settings_.resync_seconds))
        if self._in_flight:
            limit = timedelta(seconds=2 * self._settings_.startup_timeout_seconds + 61)
            deadlines.append(min(b.started_at for b in self._in_flight.values()) + limit)
        if not deadlines:
            return None
        return max(timedelta(seconds=1), min(deadlines) - now)

    # ------------------------------------------------------------------ publish

    def _publish(self, plan: Plan) -> None:
        spec = self._spec
        counts = plan.counts
        serving = counts["ready"] + counts["busy"]
        now = workflow.now()

        self._set_condition(self._ready_condition(plan, serving), now)
        # A batch whose creates all landed only waits for boots: its devices are
        # counted by observation (as provisioning), not as creates.
        creating = any(b.slots for b in self._in_flight.values()) or plan.create > 0
        self._set_condition(
            (
                ConditionType.PROGRESSING,
                ConditionStatus.TRUE if creating or plan.terminate else ConditionStatus.FALSE,
                "Provisioning" if creating else ("ScalingDown" if plan.terminate else "Stable"),
                f"{counts['provisioning']} device(s) provisioning" if creating else "",
            ),
            now,
        )
        if self._provider_problem:
            reason, _, message = self._provider_problem.partition(": ")
            until = (
                f"; next try at {self._backoff_until.isoformat(timespec='seconds')}"
                if self._backoff_until
                else ""
            )
            self._set_condition(
                (ConditionType.PROVIDER_AVAILABLE, ConditionStatus.FALSE, reason, message + until),
                now,
            )
        else:
            self._set_condition(
                (ConditionType.PROVIDER_AVAILABLE, ConditionStatus.TRUE, "Available", ""), now
            )
        health = self._health
        if health is not None and health.paused:
            self._set_condition(
                (
                    ConditionType.REMEDIATION_PAUSED,
                    ConditionStatus.TRUE,
                    "TooManyUnhealthy",
                    f"{health.unhealthy} of {health.devices} devices unhealthy, more than "
                    f"maxUnhealthy ({self._spec.max_unhealthy} = {health.max_unhealthy}); "
                    "replacements wait until the count drops",
                ),
                now,
            )
        else:
            self._set_condition(
                (ConditionType.REMEDIATION_PAUSED, ConditionStatus.FALSE, "Healthy", ""), now
            )
        if plan.blocked_surplus:
            self._set_condition(
                (
                    ConditionType.SCALE_DOWN_BLOCKED,
                    ConditionStatus.TRUE,
                    "DevicesBusy",
                    f"{plan.blocked_surplus} device(s) above the desired size are busy or "
                    "recently used; they are removed once idle",
                ),
                now,
            )
        else:
            self._drop_condition(ConditionType.SCALE_DOWN_BLOCKED)

        if self._refs_problems or self._provider_problem:
            phase = Phase.DEGRADED
        elif counts["offline"] or counts["failed"] or (health is not None and health.paused):
            phase = Phase.DEGRADED
        elif serving + counts["provisioning"] < spec.replicas or creating:
            phase = Phase.PROVISIONING
        elif plan.members > spec.replicas:
            phase = Phase.SCALING_DOWN
        elif serving >= spec.replicas:
            phase = Phase.READY
        else:
            phase = Phase.PROVISIONING

        self._status = self._status.model_copy(
            update={
                "phase": phase,
                "desired_replicas": spec.replicas,
                "ready_devices": counts["ready"],
                "busy_devices": counts["busy"],
                "provisioning_devices": counts["provisioning"],
                "offline_devices": counts["offline"],
                "last_reconciled": now,
                "observed_generation": self._generation,
                "device_ids": sorted(d.id for d in self._devices if d.id not in self._doomed),
            }
        )
        self._publish_search_attributes()
        self._publish_details()

    def _ready_condition(self, plan: Plan, serving: int) -> tuple[str, ConditionStatus, str, str]:
        if self._refs_problems:
            reason = (
                "UnknownAccount"
                if any("account" in p for p in self._refs_problems)
                else "UnknownProxyPool"
            )
            return (
                ConditionType.READY,
                ConditionStatus.FALSE,
                reason,
                "; ".join(self._refs_problems) + " — provisioning stopped",
            )
        if serving >= self._spec.replicas:
            return (ConditionType.READY, ConditionStatus.TRUE, "Converged", "")
        return (
            ConditionType.READY,
            ConditionStatus.FALSE,
            "BelowDesired",
            f"{serving}/{self._spec.replicas} devices ready",
        )

    def _set_condition(self, cond: tuple[str, ConditionStatus, str, str], now: datetime) -> None:
        type_, status, reason, message = cond
        old = self._status.condition(type_)
        if old and (old.status, old.reason, old.message) == (status, reason, message):
            return
        new = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=(
                old.last_transition_time if old and old.status == status else now
            ),
            observed_generation=self._generation,
        )
        others = [c for c in self._status.conditions if c.type != type_]
        self._status = self._status.model_copy(
            update={"conditions": sorted([*others, new], key=lambda c: c.type)}
        )

    def _drop_condition(self, type_: str) -> None:
        if self._status.condition(type_) is not None:
            self._status = self._status.model_copy(
                update={"conditions": [c for c in self._status.conditions if c.type != type_]}
            )

    def _publish_search_attributes(self) -> None:
        """Upsert only what differs from the workflow's current search attributes."""
        wanted: list[SearchAttributePair[Any]] = [
            SearchAttributePair(KEY_PLATFORM, self._spec.platform.value),
            SearchAttributePair(KEY_REGION, self._spec.region),
            SearchAttributePair(KEY_ACCOUNT, self._account),
            SearchAttributePair(KEY_PHASE, self._status.phase.value),
            SearchAttributePair(KEY_DESIRED, self._spec.replicas),
            SearchAttributePair(KEY_READY, self._status.ready_devices + self._status.busy_devices),
        ]
        current = workflow.info().typed_search_attributes
        updates = [
            pair.key.value_set(pair.value) for pair in wanted if current.get(pair.key) != pair.value
        ]
        if updates:
            workflow.upsert_search_attributes(updates)

    def _publish_details(self) -> None:
        s = self._status
        lines = [
            f"**{self._name}** · {self._spec.platform.value} · {self._spec.region} · "
            f"account `{self._account}` · generation {self._generation}",
            "",
            "| phase | desired | ready | busy | provisioning | offline |",
            "|---|---|---|---|---|---|",
            f"| {s.phase.value} | {s.desired_replicas} | {s.ready_devices} | {s.busy_devices} "
            f"| {s.provisioning_devices} | {s.offline_devices} |",
        ]
        if s.conditions:
            lines += ["", "| condition | status | reason | message |", "|---|---|---|---|"]
            lines += [
                f"| {c.type} | {c.status.value} | {c.reason} | {c.message} |" for c in s.conditions
            ]
        details = "\n".join(lines)
        if details != self._details:
            self._details = details
            workflow.set_current_details(details)

    # ------------------------------------------------------------------ delete

    async def _delete(self) -> None:
        """The finalizer: stop provisioning, remove every device, then end."""
        self._deleting = True
        self._status = self._status.model_copy(update={"phase": Phase.DELETING})
        self._publish_search_attributes()
        self._publish_details()
        self._drop_watch()

        teardown = asyncio.ensure_future(self._teardown())
        while not teardown.done():
            try:
                await asyncio.shield(teardown)
            except asyncio.CancelledError:
                # A second delete must not abort the finalizer halfway.
                workflow.logger.info("pool %s: already deleting", self._name)
        teardown.result()

        self._status = self._status.model_copy(
            update={
                "phase": Phase.DELETED,
                "ready_devices": 0,
                "busy_devices": 0,
                "provisioning_devices": 0,
                "offline_devices": 0,
                "device_ids": [],
                "last_reconciled": workflow.now(),
            }
        )
        self._publish_search_attributes()
        self._publish_details()

    async def _teardown(self) -> None:
        # Child starts still in progress resolve first, so their cancels land.
        await workflow.wait_condition(lambda: not self._starting)
        try:
            await workflow.get_external_workflow_handle(health_workflow_id(self._name)).cancel()
        except FailureError as err:
            workflow.logger.info("health check of %s already ended: %s", self._name, err)
        for child_id in list(self._in_flight):
            try:
                await workflow.get_external_workflow_handle(child_id).cancel()
            except FailureError as err:
                workflow.logger.info("batch %s already ended: %s", child_id, err)
        # Let running batches stop creating before the sweep, so no create
        # lands after it; a batch that never answers is waited out for a while.
        try:
            await workflow.wait_condition(
                lambda: not set(self._in_flight) - {r.workflow_id for r in self._reports},
                timeout=timedelta(seconds=self._settings_.startup_timeout_seconds + 60),
                timeout_summary="wait for provisioning batches to stop",
            )
        except TimeoutError:
            workflow.logger.warning("pool %s: batches still running at teardown", self._name)
        while True:
            try:
                await workflow.execute_activity_method(
                    DeviceActivityDefinitions.terminate_pool,
                    TerminatePoolInput(account=self._account, pool=self._name),
                    start_to_close_timeout=timedelta(minutes=5),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=FOREVER_RETRY,
                    summary="terminate every device of the pool",
                )
                return
            except ActivityError as err:
                if _error_type(err) != ErrorType.UNKNOWN_ACCOUNT:
                    raise
                if self._next_slot == 0 and not self._devices:
                    return  # this pool never rented anything under that account
                # Devices exist under an account the worker no longer knows: the
                # finalizer waits for the configuration to come back.
                self._set_condition(
                    (
                        ConditionType.READY,
                        ConditionStatus.FALSE,
                        "UnknownAccount",
                        f"cannot delete devices: {_error_message(err)}",
                    ),
                    workflow.now(),
                )
                self._publish_details()
                await workflow.sleep(
                    timedelta(seconds=60), summary="wait for the account to be configured"
                )

    # ------------------------------------------------------------------ continue-as-new

    def _drop_watch(self) -> None:
        """Cancel the running watch without awaiting it (its outcome no longer matters)."""
        if self._watch is not None:
            self._watch.cancel()
            # Retrieve the outcome so asyncio does not log "exception never retrieved".
            self._watch.add_done_callback(lambda task: task.cancelled() or task.exception())
            self._watch = None

    def _continue_as_new(self) -> None:
        self._drop_watch()
        workflow.continue_as_new(
            PoolInput(
                metadata=self._metadata,
                spec=self._spec,
                settings=self._settings if self._settings_pinned else None,
                state=CarriedState(
                    generation=self._generation,
                    next_slot=self._next_slot,
                    next_batch=self._next_batch,
                    in_flight=list(self._in_flight.values()),
                    doomed=sorted(self._doomed),
                    status=self._status.to_json_dict(),
                    fingerprint=device_fingerprint(self._devices),
                    created_at=self._created_at,
                    failure_streak=self._failure_streak,
                    reports=self._reports,
                    created_reports=self._created,
                    retry_slots=self._retry_slots,
                    body_generation=self._body_generation,
                    backoff_seconds=self._backoff_seconds,
                    backoff_until=self._backoff_until,
                    provider_problem=self._provider_problem,
                    replaced_total=self._replaced_total,
                    replacements_owed=self._replacements_owed,
                ),
            )
        )

    # ------------------------------------------------------------------ messages

    @workflow.update(name=UPDATE_APPLY)
    def apply(self, request: ApplyRequest) -> Accepted:
        if request.spec != self._spec:
            self._announce = self._announce or request.spec.replicas > self._spec.replicas
            body_changed = any(
                getattr(request.spec, field) != getattr(self._spec, field)
                for field in CREATE_BODY_FIELDS
            )
            self._spec = request.spec
            self._generation += 1
            if body_changed:
                self._body_generation = self._generation
            self._refs_problems = None
            self._dirty = True
        self._metadata = request.metadata
        return Accepted(generation=self._generation, replicas=self._spec.replicas)

    @apply.validator
    def _validate_apply(self, request: ApplyRequest) -> None:
        self._refuse_while_deleting()
        if request.metadata.name != self._name:
            raise ValueError(
                f"metadata.name: this pool is {self._name!r}, got {request.metadata.name!r}"
            )
        for field in IMMUTABLE_FIELDS:
            old, new = getattr(self._spec, field), getattr(request.spec, field)
            if old != new:
                alias = DevicePoolSpec.model_fields[field].alias or field
                raise ValueError(
                    f"spec.{alias}: cannot change from {_plain(old)!r} to {_plain(new)!r} on a "
                    "running pool; delete it and apply again"
                )

    @workflow.update(name=UPDATE_SCALE)
    def scale_update(self, request: ScaleRequest) -> Accepted:
        self._scale(request.replicas)
        return Accepted(generation=self._generation, replicas=self._spec.replicas)

    @scale_update.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self._refuse_while_deleting()
        _check_replicas(request.replicas)

    @workflow.signal(name=SIGNAL_SCALE)
    def scale_signal(self, payload: Any = None) -> None:
        """Signal `scale` `{"replicas": N}`: plain JSON, checked here, never trusted."""
        now = workflow.now()
        try:
            if self._deleting:
                raise ValueError("the pool is being deleted")
            request = ScaleRequest.model_validate(payload)
            _check_replicas(request.replicas)
        except (ValidationError, ValueError) as err:
            message = _one_line(err)
            workflow.logger.warning("pool %s: refused scale signal: %s", self._name, message)
            self._set_condition(
                (
                    ConditionType.SPEC_REJECTED,
                    ConditionStatus.TRUE,
                    "InvalidScaleSignal",
                    f"signal scale {_short_json(payload)} refused: {message}",
                ),
                now,
            )
            self._publish_details()
            return
        self._drop_condition(ConditionType.SPEC_REJECTED)
        self._scale(request.replicas)

    @workflow.signal(name=SIGNAL_BATCH_CREATED)
    def batch_created(self, report: BatchReport) -> None:
        self._created.append(report)
        self._dirty = True

    @workflow.signal(name=SIGNAL_BATCH_DONE)
    def batch_done(self, report: BatchReport) -> None:
        self._reports.append(report)
        self._dirty = True

    @workflow.signal(name=SIGNAL_HEALTH_REPORT)
    def health_report(self, report: HealthReport) -> None:
        self._health = report
        if report.terminated:
            self._replaced_total += len(report.terminated)
            self._replacements_owed += len(report.terminated)
            for device_id, reason in sorted(report.terminated.items()):
                workflow.logger.info("pool %s: replacing %s (%s)", self._name, device_id, reason)
        self._dirty = True

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> dict[str, Any]:
        return self._status.to_json_dict()

    @workflow.query(name=QUERY_DEVICES)
    def devices(self) -> DevicesView:
        return DevicesView(devices=list(self._devices))

    @workflow.query(name=QUERY_SPEC)
    def spec(self) -> dict[str, Any]:
        return {
            "metadata": self._metadata.to_json_dict(),
            "spec": self._spec.to_json_dict(),
            "generation": self._generation,
        }

    # ------------------------------------------------------------------ helpers

    def _scale(self, replicas: int) -> None:
        if replicas != self._spec.replicas:
            self._announce = self._announce or replicas > self._spec.replicas
            self._spec = self._spec.model_copy(update={"replicas": replicas})
            self._generation += 1
            self._dirty = True

    def _refuse_while_deleting(self) -> None:
        if self._deleting:
            raise ValueError(f"pool {self._name!r} is being deleted")

    @property
    def _name(self) -> str:
        return self._metadata.name

    @property
    def _account(self) -> str:
        return self._spec.provider_credential_ref

    @property
    def _settings_(self) -> PoolSettings:
        return self._settings or PoolSettings()


def _forget_outcome(child: asyncio.Future[Any]) -> None:
    """An abandoned child reports by signal; its result future is never awaited.
    Retrieve its outcome anyway, so a cancelled child logs no "never retrieved"."""
    child.add_done_callback(lambda done: done.cancelled() or done.exception())


def _error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _error_message(err: ActivityError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(err)


def _check_replicas(replicas: int) -> None:
    if replicas < 0:
        raise ValueError(f"replicas: must be >= 0, got {replicas}")
    if replicas > MAX_REPLICAS:
        raise ValueError(f"replicas: must be <= {MAX_REPLICAS}, got {replicas}")


def _one_line(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        return f"{where}: {first['msg']}"
    return str(err)


def _short_json(payload: Any) -> str:
    text = repr(payload)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)
