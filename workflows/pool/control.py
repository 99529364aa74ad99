"""What a person can do to one device of a pool, and to its remediation: pure reducers
that the DevicePool's updates call. Each answers a `Done`; a device the pool does not have
is refused (`check_member`) before anything is written to history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from devicepool.activities.models import TERMINATED, TERMINATING, DeviceInfo
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.events import Happened, ids
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.lifecycle import when_idle_said
from devicepool.workflows.pool.messages import DeviceRef, ProtectRequest, ReplaceRequest
from devicepool.workflows.pool.state import PoolState

__all__ = ["Done", "check_member", "pause", "protect", "replace", "resume", "unprotect"]


@dataclass(frozen=True)
class Done:
    """A control update's answer, and its event (None: nothing changed, no pass due)."""

    message: str
    event: Happened | None = None


def _changed(reason: str, message: str, *, warning: bool = False) -> Done:
    return Done(message, Happened(reason, message, warning=warning))


def check_member(s: PoolState, devices: Iterable[DeviceInfo], device: str) -> None:
    """Refuse a device the pool does not have (as its last listing shows it)."""
    members = sorted(
        d.id
        for d in devices
        if d.status not in (TERMINATING, TERMINATED) and not s.fates.has(d.id, Fate.DOOMED)
    )
    if device not in members:
        raise ValueError(
            f"device {device!r} is not in this pool "
            f"(its devices: {ids(members) if members else 'none'})"
        )


def replace(s: PoolState, request: ReplaceRequest, spec: DevicePoolSpec) -> Done:
    device = request.device
    if request.when_idle:
        if device not in s.control.retiring:
            s.control.retiring.append(device)
        message = when_idle_said(device, spec)
    else:
        s.fates.set([device], Fate.DOOMED)
        message = f"{device} is replaced now"
    return _changed("ReplaceRequested", message)


def protect(s: PoolState, request: ProtectRequest, now: datetime) -> Done:
    until = None
    if request.duration is not None:
        until = now + timedelta(seconds=request.duration)
    s.control.protected[request.device] = until
    s.control.retiring = [d for d in s.control.retiring if d != request.device]
    when = "until unprotected" if until is None else f"until {until.isoformat()}"
    return _changed("Protected", f"{request.device} is protected {when}")


def unprotect(s: PoolState, request: DeviceRef) -> Done:
    if s.control.protected.pop(request.device, "absent") == "absent":
        return Done(f"{request.device} was not protected")
    return _changed("Unprotected", f"{request.device} is no longer protected")


def pause(s: PoolState) -> Done:
    if s.control.remediation_paused:
        return Done("remediation was already paused")
    s.control.remediation_paused = True
    message = "remediation paused: unhealthy devices are shown, not replaced"
    return _changed("RemediationPausedByUser", message, warning=True)


def resume(s: PoolState) -> Done:
    if not s.control.remediation_paused:
        return Done("remediation was not paused")
    s.control.remediation_paused = False
    return _changed("RemediationResumed", "remediation resumed")
