"""Pure readings of a pool's status JSON (camelCase `DevicePoolStatus`): what `--wait` waits for."""

from __future__ import annotations

from typing import Any


def devices_left(status: dict[str, Any]) -> int:
    """Devices the pool still holds: its device ids, or the sum of its counts."""
    ids = status.get("deviceIds")
    if isinstance(ids, list):
        return len(ids)
    return sum(
        int(status.get(k) or 0)
        for k in ("readyDevices", "provisioningDevices", "busyDevices", "offlineDevices")
    )


def is_converged(status: dict[str, Any], generation: int) -> bool:
    """Every desired device is up (ready or busy) and no surplus or stragglers remain."""
    desired = int(status.get("desiredReplicas") or 0)
    up = int(status.get("readyDevices") or 0) + int(status.get("busyDevices") or 0)
    total = (
        up + int(status.get("provisioningDevices") or 0) + int(status.get("offlineDevices") or 0)
    )
    return int(status.get("observedGeneration") or 0) >= generation and up == desired == total
