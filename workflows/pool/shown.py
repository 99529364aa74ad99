"""What a DevicePool shows besides a pass's conditions: its search attributes (`wanted`), the
Web UI's details (`details`), a deleted pool's final status (`deleted`) and a teardown that
cannot finish (`teardown_blocked`). Pure; `status.py` names them too."""

from __future__ import annotations

from datetime import datetime

from devicepool.api.names import SA_ACCOUNT, SA_DESIRED, SA_PHASE, SA_PLATFORM, SA_READY, SA_REGION
from devicepool.api.v1beta1 import (
    ConditionStatus,
    ConditionType,
    DevicePoolSpec,
    DevicePoolStatus,
    Phase,
)
from devicepool.workflows.reconciler.conditions import (
    ConditionUpdate,
    condition_lines,
    drop_condition,
    figure_block,
    set_condition,
)

__all__ = ["deleted", "details", "teardown_blocked", "wanted"]

TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE


# What describes a running pool, and is no longer true of a deleted one.
_RUNNING_ONLY = (
    ConditionType.TEARDOWN_BLOCKED,
    ConditionType.SCALE_DOWN_BLOCKED,
    ConditionType.SPEND_CAP_REACHED,
    ConditionType.ROLLING_OUT,
    ConditionType.SPEC_REJECTED,
)


def deleted(
    status: DevicePoolStatus, now: datetime, *, profiles_retired: int = 0
) -> DevicePoolStatus:
    """A deleted pool's final status: no device is left, none is wanted (`desiredReplicas`
    0; the spec still says what the pool had), nothing bills; `Ready` (and `Progressing`
    if shown) False, reason `Deleted`."""
    for type_ in _RUNNING_ONLY:
        status = drop_condition(status, type_)
    for type_ in (ConditionType.READY, ConditionType.PROGRESSING):
        if type_ == ConditionType.READY or status.condition(type_) is not None:
            ended = ConditionUpdate(type_, FALSE, "Deleted", _GONE)
            status = set_condition(status, ended, now=now, generation=status.observed_generation)
    return status.model_copy(
        update={
            "phase": Phase.DELETED,
            "profiles_retired": profiles_retired,
            "desired_replicas": 0,
            "ready_devices": 0,
            "busy_devices": 0,
            "provisioning_devices": 0,
            "offline_devices": 0,
            "pending_devices": 0,
            "updated_devices": 0,
            "hourly_cost": 0.0,
            "device_ids": [],
            "protected_devices": [],
            "last_reconciled": now,
        }
    )


_GONE = "the pool is deleted: no device of it is left"


# ---------------------------------------------------------------- details


def wanted(spec: DevicePoolSpec, status: DevicePoolStatus) -> dict[str, str | int]:
    """A DevicePool's search attributes, by name (the keys every kind shares, and the
    upsert of what changed, are the shell's: `workflows/reconciler/search_attributes.py`)."""
    return {
        SA_PLATFORM: spec.platform.value,
        SA_REGION: spec.region,
        SA_ACCOUNT: spec.account,
        SA_PHASE: status.phase.value,
        SA_DESIRED: spec.replicas,
        SA_READY: status.ready_devices + status.busy_devices,
    }


def details(name: str, spec: DevicePoolSpec, generation: int, status: DevicePoolStatus) -> str:
    """The Markdown the Web UI shows on the workflow page (`set_current_details`): the
    figures, then the conditions."""
    s = status
    figures = [
        ("phase", s.phase.value),
        ("desired", s.desired_replicas),
        ("ready", s.ready_devices),
        ("busy", s.busy_devices),
        # Of the ready ones, those a lease holds (shown while there are any).
        *([("leased", s.leased_devices)] if s.leased_devices else []),
        ("provisioning", s.provisioning_devices),
        ("pending", s.pending_devices),
        ("offline", s.offline_devices),
    ]
    lines = [
        f"**{name}** · {spec.platform.value} · {spec.region} · "
        f"account `{spec.account}` · generation {generation}",
        "",
        *figure_block(figures),
    ]
    if s.conditions:
        lines += ["", "**Conditions**", "", *condition_lines(s.conditions)]
    return "\n".join(lines)


def teardown_blocked(reason: str, message: str, *, unknown_account: bool) -> list[ConditionUpdate]:
    """A deletion that cannot finish: `TeardownBlocked=True` naming the error, and `Ready`
    False, by the unknown account's own reason (as a pass shows it) or `TeardownBlocked`."""
    if unknown_account:
        ready = ConditionUpdate(ConditionType.READY, FALSE, reason, message)
    else:
        blocked = ConditionType.TEARDOWN_BLOCKED.value
        ready = ConditionUpdate(ConditionType.READY, FALSE, blocked, f"{reason}: {message}")
    return [ready, ConditionUpdate(ConditionType.TEARDOWN_BLOCKED, TRUE, reason, message)]
