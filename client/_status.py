"""Pure readings of a pool's status JSON (camelCase `DevicePoolStatus`): what `--wait` waits for,
and what makes it stop waiting."""

from __future__ import annotations

from typing import Any

from devicepool.api.v1beta1 import ConditionStatus, ConditionType

# `Ready=False` reasons that are configuration, not progress: the pool stops
# provisioning until the worker's config or the manifest changes
# (`workflows.status.ready_condition`).
CONFIGURATION_REASONS = frozenset(
    {
        "UnknownProxyPool",
        "UnknownAccount",
        "UnknownRegion",
        "UnsupportedPlatform",
        "ProxyIncomplete",
    }
)


def devices_left(status: dict[str, Any]) -> int:
    """Devices the pool still holds: its device ids, or the sum of its counts."""
    ids = status.get("deviceIds")
    if isinstance(ids, list):
        return len(ids)
    return sum(
        int(status.get(k) or 0)
        for k in (
            "readyDevices",
            "provisioningDevices",
            "pendingDevices",
            "busyDevices",
            "offlineDevices",
        )
    )


def is_converged(status: dict[str, Any], generation: int) -> bool:
    """Every desired device is up (ready or busy) and no surplus or stragglers remain."""
    desired = int(status.get("desiredReplicas") or 0)
    up = int(status.get("readyDevices") or 0) + int(status.get("busyDevices") or 0)
    # Creates still pending are not there yet (a status from before the field has none).
    total = up + sum(
        int(status.get(k) or 0) for k in ("provisioningDevices", "pendingDevices", "offlineDevices")
    )
    return int(status.get("observedGeneration") or 0) >= generation and up == desired == total


def condition(status: dict[str, Any], type_: ConditionType) -> dict[str, Any] | None:
    """The status's condition of this type (camelCase JSON), if it has one."""
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_.value:
            return cond
    return None


def configuration_problem(status: dict[str, Any], generation: int) -> dict[str, Any] | None:
    """`Ready=False` for a configuration error, as seen by a pass over `generation` or later.

    An older pass's verdict does not count: the change being waited for may
    be the fix.
    """
    if int(status.get("observedGeneration") or 0) < generation:
        return None
    ready = condition(status, ConditionType.READY)
    if (
        ready is not None
        and ready.get("status") == ConditionStatus.FALSE.value
        and ready.get("reason") in CONFIGURATION_REASONS
    ):
        return ready
    return None


def teardown_blocked(status: dict[str, Any]) -> dict[str, Any] | None:
    """`TeardownBlocked=True`: the finalizer meets an error it retries until someone fixes it."""
    blocked = condition(status, ConditionType.TEARDOWN_BLOCKED)
    if blocked is not None and blocked.get("status") == ConditionStatus.TRUE.value:
        return blocked
    return None
