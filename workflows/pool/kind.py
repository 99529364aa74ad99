"""`DevicePoolKind`: the DevicePool's core on the reconciler shell, one object per run.

What lives only for one run (the last listing, the watch, the worker's settings) is here;
what is handed over is `PoolState`. Its steps (their bodies in `observe`, `act`, `publish`):
docs/architecture.md, 'How a DevicePool converges'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities import models as am
    from devicepool.activities.connect_models import ConnectInfo
    from devicepool.api.errors import ErrorType
    from devicepool.api.v1beta1 import DEFAULT_LEASES, DevicePoolSpec, OnRelease, check_replicas
    from devicepool.workflows.pool import act as acting
    from devicepool.workflows.pool import (
        calls,
        children,
        finalizer,
        leasable,
        observe,
    )
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool import publish as publishing
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.pool.decide import Decision, Observed, decision_for
    from devicepool.workflows.pool.lifecycle import Lifecycle
    from devicepool.workflows.pool.messages import (
        Accepted,
        ApplyRequest,
        ApplyResult,
        PoolInput,
        body_changed,
    )
    from devicepool.workflows.pool.observe import QUOTA_HOLD_PATCH
    from devicepool.workflows.pool.plan import Plan
    from devicepool.workflows.pool.state import (
        PoolState,
        Said,
        leaving_by_report,
    )
    from devicepool.workflows.pool.watch import DeviceWatch
    from devicepool.workflows.reconciler.kind import Host, TeardownBlocked
    from devicepool.workflows.reconciler.lease_records import Candidate, Ended
    from devicepool.workflows.shared.errors import condition_reason
    from devicepool.workflows.shared.placement import Route, route
    from devicepool.workflows.shared.protocol import BatchReport, HealthConfig, HealthReport

__all__ = ["QUOTA_HOLD_PATCH", "SETTINGS_BEFORE_TEARDOWN_PATCH", "DevicePoolKind"]

# Since a teardown reads the worker's settings when its run has none yet (they say which
# node worker serves the account). Histories of v0.1.0 and v0.2.0 tear down without.
SETTINGS_BEFORE_TEARDOWN_PATCH = "settings-before-teardown"


class DevicePoolKind:
    """The DevicePool's pass, teardown and answers (`reconciler.kind.Kind`)."""

    member = "device"

    def __init__(self, host: Host[DevicePoolSpec, PoolState], input: PoolInput) -> None:
        self.h = host
        # Settings given in the input (tests, a caller overriding the worker) are
        # kept across continue-as-new; otherwise each run re-reads the worker's.
        self.worker_settings, self.settings_pinned = input.settings, input.settings is not None
        # The listing the last run handed over stands until this run's first one lands.
        self.devices = am.devices_from_rows(self.s.listing, pool=input.metadata.name)
        self.s.listing = []
        self.s.health_told = self.s.health_told or self.health_config()
        self.watch = DeviceWatch()
        # What this run knows and the next looks up again: the listing's error
        # (None: it worked), unknown references (None: not checked yet).
        self.observe_problem: str | None = None
        self.refs_problems: list[str] | None = None
        # Their check failed (a node worker took no call): no create until it works.
        self.refs_unchecked = False
        self.neighbours = children.Neighbours(pool=self.name, account=self.account)
        self.need_observe = True
        self.reported_gone: set[str] = set()  # terminated, by the health check's word
        # Of those, the ones still listed: they bill until gone (a cap or surge counts them).
        self.reported_leaving: list[am.DeviceInfo] = []
        self.retry_terminations = False  # a scale-down's termination failed
        self._announced = False  # told the ledger in this pass (`PoolState.announce`)
        # The devices this pass terminates, while it awaits the provider: leased by no one.
        self.terminating: set[str] = set()
        # What the last pass could not scale down (busy, leased): a release may allow it.
        self.blocked_surplus = 0

    @property
    def s(self) -> PoolState:
        return self.h.s

    @property
    def spec(self) -> DevicePoolSpec:
        return self.h.spec

    @property
    def name(self) -> str:
        return self.h.name

    @property
    def account(self) -> str:
        return self.h.spec.account

    # ------------------------------------------------------------------ observe

    async def observe(self) -> Observed:
        # Reports apply only against an observation that started after they arrived.
        created_mark, done_mark = self.s.slots.inbox.mark()
        if self.s.announce:
            self.s.announce, self._announced = False, True
            self.neighbours.tell_ledger(expecting=True)
        await observe.look(self)
        self.neighbours.ensure_health(self.s, self.settings, self.health_config())
        observe.take_reports(self, created_mark, done_mark)
        await children.check_batches(self.s.slots, pool=self.name, every=self.check_every)
        await self.neighbours.sync_health(self.s, self.health_config())
        await observe.probe_region(self)
        return self.observed()

    def observed(self) -> Observed:
        return Observed(
            devices=tuple(self.devices),
            reported_leaving=tuple(self.reported_leaving),
            settings=self.settings,
            price=self.price,
            now=workflow.now(),
            observe_problem=self.observe_problem,
            refs_problems=self.refs_problems,
            refs_unchecked=self.refs_unchecked,
        )

    async def read_settings(self) -> None:
        self.worker_settings = await calls.read_settings()

    def take_listing(self, devices: list[am.DeviceInfo]) -> None:
        self.devices = self.s.take_listing(devices, reported_gone=self.reported_gone)
        self.reported_leaving = leaving_by_report(devices, self.reported_gone)

    # ------------------------------------------------------------------ decide / act

    def decide(self, seen: Observed) -> Decision:
        if seen.observe_problem is None:  # expiry moves on a fresh listing only
            self.h.happened(*self.life().advance())
        return self.decision(seen, act=True)

    def decision(self, seen: Observed, *, act: bool) -> Decision:
        return decision_for(
            seen,
            pool=self.name,
            spec=self.spec,
            state=self.s,
            incarnation=children.incarnation(),
            act=act,
            patched=workflow.patched,
        )

    def life(self) -> Lifecycle:
        return Lifecycle(self.spec, self.s, self.devices, workflow.now(), workflow.patched)

    async def act(self, seen: Observed, decision: Decision) -> Plan:
        self.terminating = set(decision.terminate)
        try:
            await acting.carry_out(self, decision)
        finally:
            self.terminating = set()
        if self.s.resets or self.s.replaced_after_use:
            await acting.reset_used(self, decision)
        # What the status shows is the pool after its terminations (runs from v0.1.0: before).
        plan = decision.plan
        if decision.terminate and workflow.patched(acting.TERMINATED_LEAVE_PATCH):
            plan = self.decision(self.observed(), act=False).plan
        if self._announced:
            self._announced = False
            if self.observe_problem is not None or not decision.plan.create:
                self.neighbours.tell_ledger(expecting=False)
        return plan

    # ------------------------------------------------------------------ publish / wait

    def publish(self, plan: Plan) -> None:
        publishing.publish(self, plan)

    async def wait(self, plan: Plan) -> None:
        await observe.until_due(self, plan)

    # ------------------------------------------------------------------ delete / hand over

    def stop(self) -> None:
        self.watch.drop()

    def quiet(self) -> bool:
        return self.neighbours.quiet()

    async def tear_down(self) -> None:
        """The finalizer: stop provisioning, remove every device; then the deleted status."""
        await workflow.wait_condition(self.neighbours.quiet)
        # Deleted before this run read the worker's settings (a run handed over, cancelled
        # at its first look): without them a node-served account's calls go to the main
        # workers, who refuse them. Runs from before read none here.
        if self.worker_settings is None and workflow.patched(SETTINGS_BEFORE_TEARDOWN_PATCH):
            await self.read_settings()
        swept = await finalizer.tear_down(
            self.s.slots,
            pool=self.name,
            route=self.route,
            settings=self.settings,
            rented_anything=self.s.slots.next_slot > 0 or bool(self.devices),
            blocked=self._blocked,
            hand_over=self.h.hand_over_if_due,
        )
        retired = swept.retired if swept is not None else 0
        if retired:
            self.h.happened(say.profiles_retired(retired))
        self.h.happened(say.Happened("Deleted", "no device of the pool is left"))
        self.s.deleted(workflow.now(), profiles_retired=retired)

    def _blocked(self, block: TeardownBlocked) -> None:
        reason, message = block.reason, block.message
        unknown = reason == condition_reason(ErrorType.UNKNOWN_ACCOUNT)
        for condition in st.teardown_blocked(reason, message, unknown_account=unknown):
            self.h.set_condition(condition)
        self.h.happened(say.Happened("TeardownBlocked", f"{reason}: {message}", True))
        self.h.show_details()

    def carried(self) -> PoolInput:
        """The whole state and the last listing (`PoolState.listing`) for the next run."""
        settings = self.worker_settings if self.settings_pinned else None
        self.s.listing = am.device_rows(self.devices, pool=self.name)
        return PoolInput(metadata=self.h.metadata, spec=self.spec, settings=settings, state=self.s)

    # ------------------------------------------------------------------ shown

    def search_attributes(self) -> dict[str, str | int]:
        return st.wanted(self.spec, self.s.status)

    def details(self) -> str:
        return st.details(self.name, self.spec, self.s.generation, self.s.status)

    # ------------------------------------------------------------------ messages

    def apply(self, request: ApplyRequest) -> Accepted:
        # The update that came with the pool's start (update-with-start) is handled
        # in the first activation, before the run stamps `created_at` (carried on).
        created = self.s.created_at is None
        if not created:  # an autoscaled pool keeps the autoscaler's size
            request = request.model_copy(update={"spec": self.h.autoscaled_spec(request.spec)})
        changed = request.spec != self.spec or request.metadata != self.h.metadata
        if request.spec != self.spec:
            self.respec(request.spec, said=not created)
            self.refs_problems = None
        self.h.metadata = request.metadata
        self._clear_rejection()
        if created:
            return self.h.accepted(ApplyResult.CREATED)
        return self.h.accepted(ApplyResult.CONFIGURED if changed else ApplyResult.UNCHANGED)

    def check_replicas(self, replicas: int) -> None:
        check_replicas(replicas)

    def rescale(self, replicas: int) -> None:
        if replicas != self.spec.replicas:
            self.respec(self.spec.model_copy(update={"replicas": replicas}), said=True)
        self._clear_rejection()

    def refuse_scale(self, message: str) -> None:
        self.h.reject(message)
        self.h.show_details()

    def respec(self, spec: DevicePoolSpec, *, said: bool) -> None:
        changed = body_changed(self.spec, spec)
        now = workflow.now() if said else None
        self.s.respec(self.spec, spec, body_changed=changed, now=now)
        self.h.spec = spec
        self.h.dirty = True

    def _clear_rejection(self) -> None:
        if self.h.clear_rejection():
            self.h.show_details()

    def batch_report(self, report: BatchReport, *, done: bool) -> None:
        """A batch report; one from an earlier pool of this name (terminated by hand, applied
        again) is not ours (its devices are adopted through the listing)."""
        if report.incarnation not in ("", children.incarnation()):
            workflow.logger.info(
                "pool %s: report of %s, a batch of an earlier pool of this name, ignored",
                self.name,
                report.workflow_id,
            )
            return
        inbox = self.s.slots.inbox
        (inbox.done if done else inbox.created).append(report)
        self.h.dirty = True

    def health_report(self, report: HealthReport) -> None:
        said = self.s.take_health(report, max_unhealthy=str(self.spec.health.max_unhealthy))
        self.h.happened(*said.events)
        for device_id, reason in sorted(report.terminated.items()):
            workflow.logger.info("pool %s: replacing %s (%s)", self.name, device_id, reason)
        # Their replacements are planned on the listing the pool has, less those devices
        # (also a listing already on its way), without a fresh one.
        self.reported_gone.update(report.terminated)
        # Not members any more, but billing until the provider has terminated them.
        self.reported_leaving = [
            *(d for d in self.reported_leaving if d.id not in report.terminated),
            *leaving_by_report(self.devices, report.terminated),
        ]
        self.devices = [d for d in self.devices if d.id not in self.reported_gone]
        self.h.replan = True

    # ------------------------------------------------------------------ leases

    def lease_candidates(self) -> list[Candidate]:
        if self.observe_problem is not None:
            return []  # never a device the pool cannot see
        expiry, drift = self.life().expiry(), self.life().drift()
        leaving = {*expiry.retire, *expiry.force, *self.terminating}
        return leasable.candidates(
            self.devices, spec=self.spec, state=self.s, leaving=leaving, drifted=drift
        )

    def lease_members(self) -> set[str] | None:
        return None if self.observe_problem is not None else leasable.members(self.devices)

    def lease_problem(self, selector: Mapping[str, str]) -> str | None:
        return leasable.problem(selector, spec=self.spec, devices=self.devices)

    def grows_for(self, selector: Mapping[str, str]) -> bool:
        if self.lease_problem(selector) is not None:
            return False
        return leasable.grows_for(selector, pool=self.name, spec=self.spec, devices=self.devices)

    def autoscale_members(self) -> set[str] | None:
        return self.lease_members()

    def scale_down_order(self) -> None:
        return None  # `decide` keeps what may not go from its pick

    def history_encrypted(self) -> bool:
        return self.settings.history_encrypted

    async def lease_connect(self, member: str) -> ConnectInfo:
        return await calls.lease_connect(self.route, self.name, member)

    def leases_ended(self, ended: Sequence[Ended], *, replace: bool) -> None:
        listed = leasable.members(self.devices)
        work = False  # something to do now for the devices of `ended`
        if replace:
            said = leasable.replace_used(self.s, ended, listed=listed, now=workflow.now())
            self.h.happened(*said)
            work = bool(said)
        elif (self.spec.leases or DEFAULT_LEASES).on_release == OnRelease.RESET:
            # Reset by the next pass's act.
            work = bool(leasable.reset_used(self.s, ended, listed=listed))
        if (self.spec.leases or DEFAULT_LEASES).on_release != OnRelease.KEEP:
            # Replaced by a person while leased: used all the same (`leasable.used`).
            leasable.replaced_while_leased(self.s, ended, listed=listed)
        # A pass (on what is known) only for what a freed device lets the pool do now, and
        # none while it cannot list: each pass would put off the listing's retry.
        if self.observe_problem is None and (work or self._waits_on(ended)):
            self.h.replan = True

    def _waits_on(self, ended: Sequence[Ended]) -> bool:
        """Whether the pool held something back that a device of `ended` may now allow: a
        scale-down, a rollout, an expiry, a replacement once idle."""
        freed = {e.device for e in ended}
        life = self.life()
        expiry = life.expiry(ignoring_leases=True)  # past maxAge, or past its grace too
        return bool(
            self.blocked_surplus
            or freed & set(self.s.control.retiring)
            or (self.spec.rollout is not None and freed & set(life.drift()))
            or freed & {*expiry.retire, *expiry.force}
        )

    # ------------------------------------------------------------------ neighbours

    def health_config(self) -> HealthConfig:
        health, reserve = self.spec.health, self.spec.reserve
        return HealthConfig(
            max_unhealthy=health.max_unhealthy,
            replicas=self.spec.replicas,
            offline_after_seconds=health.offline_after,
            startup_timeout_seconds=health.startup_timeout,
            paused=self.s.control.remediation_paused,
            reserve_keep=reserve.keep if reserve is not None else None,
        )

    def said(self, said: Said) -> None:
        if said.warning:
            workflow.logger.warning("pool %s: %s", self.name, said.warning)
        self.h.happened(*said.events)

    @property
    def check_every(self) -> timedelta:
        """How long a batch may stay quiet before the pool asks whether it still runs."""
        settings = self.settings
        return timedelta(
            seconds=2 * settings.startup_timeout_seconds + settings.batch_check_grace_seconds
        )

    @property
    def route(self) -> Route:
        return route(self.account, self.settings)

    @property
    def price(self) -> float:
        """What one of the pool's devices costs an hour (its account's `pricePerHour`)."""
        return self.settings.price_per_hour(self.account)

    @property
    def words(self) -> say.Words:
        """How the events name what the account's provider does (cloud phones: shut down)."""
        return say.words_of(self.settings, self.account)

    @property
    def settings(self) -> am.PoolSettings:
        """The worker's settings, with what the pool's spec sets itself (v1beta1 `health`, `scaleDown`)."""
        worker = self.worker_settings or am.PoolSettings()
        return worker.model_copy(update=self.spec.setting_overrides())
