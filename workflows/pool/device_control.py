"""What a person can do to one device of a pool, and to its remediation: validated updates.

`DeviceControl` is a base of `DevicePoolWorkflow` (beside `PoolMessages`):

- `replace_device` (`ReplaceRequest`): replace the device now, busy or not, or
  with `whenIdle` once it is idle (its replacement is created beside it first);
- `protect_device` (`ProtectRequest`) / `unprotect_device` (`DeviceRef`): never
  pick it for scale-down or expiry (for `duration`, or until unprotected); the
  health check still replaces it if it dies;
- `pause_remediation` / `resume_remediation`: the health check stops (and
  starts again) replacing unhealthy devices; it still finds and shows them.

Each answers a `ControlAnswer`, records an event and is refused (before
anything is written to history) for a device the pool does not have, or while
the pool is being deleted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.models import TERMINATED, TERMINATING, DeviceInfo
    from devicepool.api import names
    from devicepool.api.v1beta1 import DevicePoolSpec
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool.events import ids
    from devicepool.workflows.pool.fates import Fate
    from devicepool.workflows.pool.lifecycle import when_idle_said
    from devicepool.workflows.pool.messages import (
        ControlAnswer,
        DeviceRef,
        ProtectRequest,
        ReplaceRequest,
    )
    from devicepool.workflows.pool.state import PoolState

__all__ = ["DeviceControl"]


class DeviceControl:
    # Set by `DevicePoolWorkflow.__init__` (and `PoolMessages`).
    s: PoolState
    _spec: DevicePoolSpec
    _devices: list[DeviceInfo]
    _dirty: bool
    _deleting: bool

    @workflow.update(name=names.UPDATE_REPLACE_DEVICE)
    def replace_device(self, request: ReplaceRequest) -> ControlAnswer:
        device = request.device
        if request.when_idle:
            if device not in self.s.retiring:
                self.s.retiring.append(device)
            message = when_idle_said(device, self._spec)
        else:
            self.s.fates.set([device], Fate.DOOMED)
            message = f"{device} is replaced now"
        self._control_event("ReplaceRequested", message)
        return ControlAnswer(message=message)

    @replace_device.validator
    def _validate_replace(self, request: ReplaceRequest) -> None:
        self._check_device(request.device)

    @workflow.update(name=names.UPDATE_PROTECT_DEVICE)
    def protect_device(self, request: ProtectRequest) -> ControlAnswer:
        until = None
        if request.duration is not None:
            until = workflow.now() + timedelta(seconds=request.duration)
        self.s.protected[request.device] = until
        self.s.retiring = [d for d in self.s.retiring if d != request.device]
        when = "until unprotected" if until is None else f"until {until.isoformat()}"
        message = f"{request.device} is protected {when}"
        self._control_event("Protected", message)
        return ControlAnswer(message=message)

    @protect_device.validator
    def _validate_protect(self, request: ProtectRequest) -> None:
        self._check_device(request.device)

    @workflow.update(name=names.UPDATE_UNPROTECT_DEVICE)
    def unprotect_device(self, request: DeviceRef) -> ControlAnswer:
        was = self.s.protected.pop(request.device, "absent")
        message = f"{request.device} is no longer protected"
        if was == "absent":
            message = f"{request.device} was not protected"
        else:
            self._control_event("Unprotected", message)
        return ControlAnswer(message=message)

    @unprotect_device.validator
    def _validate_unprotect(self, request: DeviceRef) -> None:
        self._refuse_while_deleting()

    @workflow.update(name=names.UPDATE_PAUSE_REMEDIATION)
    def pause_remediation(self) -> ControlAnswer:
        if self.s.remediation_paused:
            return ControlAnswer(message="remediation was already paused")
        self.s.remediation_paused = True
        message = "remediation paused: unhealthy devices are shown, not replaced"
        self._control_event("RemediationPausedByUser", message, warning=True)
        return ControlAnswer(message=message)

    @pause_remediation.validator
    def _validate_pause(self) -> None:
        self._refuse_while_deleting()

    @workflow.update(name=names.UPDATE_RESUME_REMEDIATION)
    def resume_remediation(self) -> ControlAnswer:
        if not self.s.remediation_paused:
            return ControlAnswer(message="remediation was not paused")
        self.s.remediation_paused = False
        message = "remediation resumed"
        self._control_event("RemediationResumed", message)
        return ControlAnswer(message=message)

    @resume_remediation.validator
    def _validate_resume(self) -> None:
        self._refuse_while_deleting()

    # ------------------------------------------------------------------ shared

    def _check_device(self, device: str) -> None:
        """Refuse a device the pool does not have (as its last listing shows it)."""
        self._refuse_while_deleting()
        members = sorted(
            d.id
            for d in self._devices
            if d.status not in (TERMINATING, TERMINATED) and not self.s.fates.has(d.id, Fate.DOOMED)
        )
        if device not in members:
            raise ValueError(
                f"device {device!r} is not in this pool "
                f"(its devices: {ids(members) if members else 'none'})"
            )

    def _control_event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.s.record(workflow.now(), say.Happened(reason, message, warning=warning))
        self._dirty = True

    if TYPE_CHECKING:  # `PoolMessages`, the other base of the pool workflow, has it

        def _refuse_while_deleting(self) -> None: ...
