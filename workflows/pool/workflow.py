"""`DevicePool`: one long-running workflow per pool, id `devicepool/<name>`, on the reconciler
shell (`workflows/reconciler/shell.py`: the loop, scale, wake, the `status` / `spec` /
`events` queries). A pass is `DevicePoolKind`'s (`kind.py`); deletion is `finalizer.py`.

Continue-as-new: the shell's, handing `PoolState` on whole once handlers finished and child
starts resolved; children are abandoned at the hand-over and report to the next run.

Messages of its own (update validators reject before anything is written to history):

- update `apply` (`ApplyRequest` → `Accepted`: created, configured or unchanged);
- signals `batch_created` / `batch_done` (`BatchReport`), `health_report`,
  `account_paused`, `account_capped`;
- updates `replace_device`, `protect_device`, `unprotect_device`,
  `pause_remediation`, `resume_remediation` (`control.py`; refused for a device the
  pool does not have, or while it is being deleted);
- queries `devices`, `cost`.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    # Scheduled disruption budgets read their cron with it, lazily: loaded with the
    # workflow, or the sandbox refuses it as an import after the initial load.
    import cronsim  # noqa: F401

    from devicepool.api import names
    from devicepool.api.v1beta1 import DevicePoolSpec, DevicePoolStatus
    from devicepool.workflows.pool import control
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool.kind import DevicePoolKind
    from devicepool.workflows.pool.messages import (
        Accepted,
        ApplyRequest,
        ControlAnswer,
        DeviceRef,
        DevicesView,
        PoolCost,
        PoolInput,
        ProtectRequest,
        ReplaceRequest,
        cost_of,
        refuse_apply,
    )
    from devicepool.workflows.pool.state import PoolState
    from devicepool.workflows.reconciler.lease_records import EndReason
    from devicepool.workflows.reconciler.shell import Reconciler
    from devicepool.workflows.shared.protocol import (
        AccountCap,
        AccountPause,
        BatchReport,
        HealthReport,
    )


@workflow.defn(name=names.WORKFLOW_DEVICE_POOL)
class DevicePoolWorkflow(Reconciler[DevicePoolSpec, PoolState]):
    """A DevicePool on the reconciler shell; its pass is `DevicePoolKind`'s."""

    @workflow.init
    def __init__(self, input: PoolInput) -> None:
        state = input.state or PoolState(
            status=DevicePoolStatus(desired_replicas=input.spec.replicas), announce=True
        )
        Reconciler.__init__(self, metadata=input.metadata, spec=input.spec, state=state)
        self.kind = self.pool = DevicePoolKind(self, input)

    @workflow.run
    async def run(self, input: PoolInput) -> dict[str, Any]:
        if self.s.created_at is None:
            self.happened(say.created(self.spec.replicas))
            # The start, not this first task's time (a loaded worker takes it seconds later).
            self.s.created_at = workflow.info().workflow_start_time
        if self.s.deleting and self.pool.worker_settings is None:
            await self.pool.read_settings()  # continued as new while deleting
        await self.reconcile()
        return self.s.status.to_json_dict()

    @workflow.update(name=names.UPDATE_APPLY)
    def apply(self, request: ApplyRequest) -> Accepted:
        return self.pool.apply(request)

    @apply.validator
    def _validate_apply(self, request: ApplyRequest) -> None:
        self.refuse_while_deleting()
        refuse_apply(self.name, self.spec, request)

    @workflow.signal(name=names.SIGNAL_BATCH_CREATED)
    def batch_created(self, report: BatchReport) -> None:
        self.pool.batch_report(report, done=False)

    @workflow.signal(name=names.SIGNAL_BATCH_DONE)
    def batch_done(self, report: BatchReport) -> None:
        self.pool.batch_report(report, done=True)

    @workflow.signal(name=names.SIGNAL_HEALTH_REPORT)
    def health_report(self, report: HealthReport) -> None:
        self.pool.health_report(report)

    @workflow.signal(name=names.SIGNAL_ACCOUNT_CAPPED)
    def account_capped(self, cap: AccountCap) -> None:
        self.s.take_cap(cap, workflow.now())
        self.replan = True  # published without a fresh listing

    @workflow.signal(name=names.SIGNAL_ACCOUNT_PAUSED)
    def account_paused(self, pause: AccountPause) -> None:
        self.s.take_pause(pause, workflow.now())
        self.replan = True  # published without a fresh listing

    @workflow.query(name=names.QUERY_DEVICES)
    def devices(self) -> DevicesView:
        return DevicesView(devices=list(self.pool.devices))

    @workflow.query(name=names.QUERY_COST)
    def cost(self) -> PoolCost:
        return cost_of(self.s, account=self.spec.account, price_per_hour=self.pool.price)

    # ------------------------------------------------------------------ device control

    @workflow.update(name=names.UPDATE_REPLACE_DEVICE)
    def replace_device(self, request: ReplaceRequest) -> ControlAnswer:
        if not request.when_idle:  # now, busy or not: its lease ends (`--when-idle` waits)
            self.leasing.end_device(request.device, EndReason.REPLACED)
        return self._controlled(control.replace(self.s, request, self.spec))

    @replace_device.validator
    def _validate_replace(self, request: ReplaceRequest) -> None:
        self._check_member(request.device)

    @workflow.update(name=names.UPDATE_PROTECT_DEVICE)
    def protect_device(self, request: ProtectRequest) -> ControlAnswer:
        return self._controlled(control.protect(self.s, request, workflow.now()))

    @protect_device.validator
    def _validate_protect(self, request: ProtectRequest) -> None:
        self._check_member(request.device)

    @workflow.update(name=names.UPDATE_UNPROTECT_DEVICE)
    def unprotect_device(self, request: DeviceRef) -> ControlAnswer:
        return self._controlled(control.unprotect(self.s, request))

    @unprotect_device.validator
    def _validate_unprotect(self, request: DeviceRef) -> None:
        self.refuse_while_deleting()

    @workflow.update(name=names.UPDATE_PAUSE_REMEDIATION)
    def pause_remediation(self) -> ControlAnswer:
        return self._controlled(control.pause(self.s))

    @workflow.update(name=names.UPDATE_RESUME_REMEDIATION)
    def resume_remediation(self) -> ControlAnswer:
        return self._controlled(control.resume(self.s))

    @pause_remediation.validator
    @resume_remediation.validator
    def _validate_remediation(self) -> None:
        self.refuse_while_deleting()

    def _check_member(self, device: str) -> None:
        self.refuse_while_deleting()
        control.check_member(self.s, self.pool.devices, device)

    def _controlled(self, done: control.Done) -> ControlAnswer:
        if done.event is not None:  # something changed: said, and a pass is due
            self.happened(done.event)
            self.dirty = True
        return ControlAnswer(message=done.message)
