"""The DevicePool workflow's message handlers: what users and children tell a pool, what it answers.

`PoolMessages` is the base of `DevicePoolWorkflow` (`workflows/pool/workflow.py`), which
owns the loop; the Temporal SDK registers handlers found on base classes. The
handlers only change state and set `_dirty`: the loop does the rest on its next
pass. Update validators reject before anything is written to history.

- update `apply` (`ApplyRequest` → `Accepted`, whose `result` says created,
  configured or unchanged), update `scale_update`
  (`ScaleRequest` → `Accepted`), signal `scale` (plain JSON `{"replicas": N}`:
  refused with `SpecRejected=True` when invalid, never applied; any accepted
  change — either update, or a valid signal — clears it);
- signals `batch_created` / `batch_done` (`BatchReport`), `health_report`,
  `account_paused`, `account_capped`, `wake` (look again now; `devicepool upgrade` sends it);
- queries `status`, `devices`, `spec`, `events` (`PoolEvents`: the pool's own
  recent events, `workflows/pool/event_log.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.models import DeviceInfo
    from devicepool.api import names
    from devicepool.api.v1beta1 import (
        DevicePoolSpec,
        ObjectMeta,
        check_replicas,
    )
    from devicepool.workflows.pool import event_log as ev
    from devicepool.workflows.pool import events as pool_events
    from devicepool.workflows.pool import spec_changes
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.pool.children import incarnation
    from devicepool.workflows.pool.messages import (
        Accepted,
        ApplyRequest,
        ApplyResult,
        BilledHour,
        DevicesView,
        PoolCost,
        ScaleRequest,
    )
    from devicepool.workflows.pool.search_attributes import search_attribute_updates
    from devicepool.workflows.pool.state import PoolState, leaving_by_report
    from devicepool.workflows.shared.protocol import (
        AccountCap,
        AccountPause,
        BatchReport,
        HealthReport,
    )

__all__ = ["PoolMessages"]


class PoolMessages:
    # Set by `DevicePoolWorkflow.__init__`.
    s: PoolState
    _metadata: ObjectMeta
    _spec: DevicePoolSpec
    _devices: list[DeviceInfo]
    _refs_problems: list[str] | None
    _details: str
    _dirty: bool
    _replan: bool
    _reported_gone: set[str]
    _reported_leaving: list[DeviceInfo]
    _deleting: bool

    @workflow.update(name=names.UPDATE_APPLY)
    def apply(self, request: ApplyRequest) -> Accepted:
        # The update that came with the pool's start (update-with-start) is handled
        # in the first activation, before the run stamps `created_at` (carried on).
        created = self.s.created_at is None
        changed = request.spec != self._spec or request.metadata != self._metadata
        if request.spec != self._spec:
            self._respec(request.spec, said=not created)
            self._refs_problems = None
        self._metadata = request.metadata
        self._clear_rejection()
        if created:
            return self._accepted(ApplyResult.CREATED)
        return self._accepted(ApplyResult.CONFIGURED if changed else ApplyResult.UNCHANGED)

    @apply.validator
    def _validate_apply(self, request: ApplyRequest) -> None:
        self._refuse_while_deleting()
        spec_changes.refuse_apply(self._name, self._spec, request)

    @workflow.update(name=names.UPDATE_SCALE)
    def scale_update(self, request: ScaleRequest) -> Accepted:
        self._scale(request.replicas)
        self._clear_rejection()
        return self._accepted()

    @scale_update.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self._refuse_while_deleting()
        check_replicas(request.replicas)

    @workflow.signal(name=names.SIGNAL_SCALE)
    def scale_signal(self, payload: Any = None) -> None:
        """Signal `scale` `{"replicas": N}`: plain JSON, checked here, never trusted."""
        try:
            if self._deleting:
                raise ValueError("the pool is being deleted")
            request = spec_changes.parse_scale_signal(payload)
        except ValueError as err:
            workflow.logger.warning("pool %s: refused scale signal: %s", self._name, err)
            message = f"signal scale {spec_changes.short_json(payload)} refused: {err}"
            self.s.reject_scale(message, workflow.now())
            self._show_details()
            return
        self._scale(request.replicas)
        self._clear_rejection()

    @workflow.signal(name=names.SIGNAL_BATCH_CREATED)
    def batch_created(self, report: BatchReport) -> None:
        if self._ours(report):
            self.s.slots.inbox.created.append(report)
            self._dirty = True

    @workflow.signal(name=names.SIGNAL_BATCH_DONE)
    def batch_done(self, report: BatchReport) -> None:
        if self._ours(report):
            self.s.slots.inbox.done.append(report)
            self._dirty = True

    def _ours(self, report: BatchReport) -> bool:
        """A batch of an earlier pool of this name (terminated by hand, applied again)
        reports to this one's workflow id: its slots, failures and devices are not ours
        (its devices are adopted through the listing)."""
        if report.incarnation in ("", incarnation()):
            return True
        workflow.logger.info(
            "pool %s: report of %s, a batch of an earlier pool of this name, ignored",
            self._name,
            report.workflow_id,
        )
        return False

    @workflow.signal(name=names.SIGNAL_HEALTH_REPORT)
    def health_report(self, report: HealthReport) -> None:
        said = self.s.take_health(report, max_unhealthy=str(self._spec.health.max_unhealthy))
        self._happened(*said.events)
        for device_id, reason in sorted(report.terminated.items()):
            workflow.logger.info("pool %s: replacing %s (%s)", self._name, device_id, reason)
        # The report says which devices went: their replacements are planned on
        # the listing the pool has (less those devices), without a fresh one. A
        # listing already on its way may still show them: it is read without.
        self._reported_gone.update(report.terminated)
        # Not members any more, but billing until the provider has terminated them.
        self._reported_leaving = [
            *(d for d in self._reported_leaving if d.id not in report.terminated),
            *leaving_by_report(self._devices, report.terminated),
        ]
        self._devices = [d for d in self._devices if d.id not in self._reported_gone]
        self._replan = True

    @workflow.signal(name=names.SIGNAL_WAKE)
    def wake(self, payload: Any = None) -> None:
        """Signal `wake`: a pass now, with a fresh listing (and an upgrade if one is due)."""
        self._dirty = True

    @workflow.signal(name=names.SIGNAL_ACCOUNT_CAPPED)
    def account_capped(self, cap: AccountCap) -> None:
        self.s.take_cap(cap, workflow.now())
        self._replan = True  # published without a fresh listing

    @workflow.signal(name=names.SIGNAL_ACCOUNT_PAUSED)
    def account_paused(self, pause: AccountPause) -> None:
        self.s.take_pause(pause, workflow.now())
        self._replan = True  # published without a fresh listing

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> dict[str, Any]:
        return self.s.status.to_json_dict()

    @workflow.query(name=names.QUERY_DEVICES)
    def devices(self) -> DevicesView:
        return DevicesView(devices=list(self._devices))

    @workflow.query(name=names.QUERY_EVENTS)
    def events(self) -> ev.PoolEvents:
        return ev.PoolEvents(events=list(self.s.events))

    @workflow.query(name=names.QUERY_COST)
    def cost(self) -> PoolCost:
        s, price = self.s, self._price
        return PoolCost(
            account=self._account,
            price_per_hour=price,
            hourly_cost=round(s.cost_rate, 4),
            cost_to_date=round(s.cost_to_date, 4),
            device_hours_to_date=round(s.device_hours_to_date, 4),
            hours=[
                BilledHour(start=hour, device_hours=round(hours, 4), cost=round(dollars, 4))
                for hour, (hours, dollars) in sorted(s.billed_hours.items())
            ],
            counted_until=s.cost_since,
            billing_devices=s.cost_devices,
        )

    @workflow.query(name=names.QUERY_SPEC)
    def spec(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "metadata": self._metadata.to_json_dict(),
            "spec": self._spec.to_json_dict(),
            "generation": self.s.generation,
        }
        # When the pool was created: its first run's, carried on (a run's own start
        # time restarts at every continue-as-new). Unset only before the first pass.
        if self.s.created_at is not None:
            answer["createdAt"] = self.s.created_at.isoformat()
        return answer

    # ------------------------------------------------------------------ shared with the loop

    def _scale(self, replicas: int) -> None:
        if replicas != self._spec.replicas:
            self._respec(self._spec.model_copy(update={"replicas": replicas}), said=True)

    def _respec(self, spec: DevicePoolSpec, *, said: bool) -> None:
        body_changed = spec_changes.body_changed(self._spec, spec)
        now = workflow.now() if said else None
        self.s.respec(self._spec, spec, body_changed=body_changed, now=now)
        self._spec = spec
        self._dirty = True

    def _clear_rejection(self) -> None:
        """An accepted spec change supersedes a refused `scale` signal: `SpecRejected` goes."""
        if self.s.drop_rejection():
            self._show_details()

    def _accepted(self, result: ApplyResult | None = None) -> Accepted:
        return Accepted(generation=self.s.generation, replicas=self._spec.replicas, result=result)

    def _set_condition(self, cond: st.ConditionUpdate) -> None:
        self.s.set_condition(cond, workflow.now())

    def _happened(self, *happened: pool_events.Happened) -> None:
        self.s.record(workflow.now(), *happened)

    def _refuse_while_deleting(self) -> None:
        if self._deleting:
            raise ValueError(f"pool {self._name!r} is being deleted")

    def _show(self) -> None:
        """Search attributes and UI details, each written only when it changed."""
        current = workflow.info().typed_search_attributes
        updates = search_attribute_updates(self._spec, self.s.status, current)
        if updates:
            workflow.upsert_search_attributes(updates)
        self._show_details()

    def _show_details(self) -> None:
        """The UI's live details (served by a built-in query: no history event)."""
        details = st.details(self._name, self._spec, self.s.generation, self.s.status)
        if details != self._details:
            self._details = details
            workflow.set_current_details(details)

    @property
    def _name(self) -> str:
        return self._metadata.name

    @property
    def _account(self) -> str:
        return self._spec.account

    if TYPE_CHECKING:  # `DevicePoolWorkflow` has it (its account's price of a device-hour)

        @property
        def _price(self) -> float: ...
