"""What a DevicePool tells its lease book (`reconciler/leasing.py`): which devices may be
leased now, which a selector can never match, and what a lease's end does to a device.

Pure. A device's selector labels are its provider labels and `region`, `platform`, `device`
(its id): `devicepool lease POOL --selector device=ID` asks for one device."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from devicepool.activities import models as am
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_SLOT, LABEL_TEMPLATE_HASH
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.events import Happened, ids
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler.leases import Candidate, Ended, EndReason

__all__ = ["candidates", "labels_of", "leased_busy", "members", "problem", "replace_used"]

# Keys every device of a pool carries, whatever the provider adds.
_OWN_KEYS = {
    "region",
    "platform",
    "device",
    LABEL_POOL,
    LABEL_MANAGED_BY,
    LABEL_SLOT,
    LABEL_TEMPLATE_HASH,
}
# Ends whose device is not there to replace (gone already, or going with the pool), or
# was never used (an offer its ticket never claimed).
_NOT_REPLACED = {
    EndReason.DEVICE_LOST,
    EndReason.POOL_DELETED,
    EndReason.REPLACED,
    EndReason.UNCLAIMED,
}


def labels_of(device: am.DeviceInfo, spec: DevicePoolSpec) -> dict[str, str]:
    return {
        **device.labels,
        "region": device.region or spec.region,
        "platform": spec.platform.value,
        "device": device.id,
    }


def candidates(
    devices: Sequence[am.DeviceInfo],
    *,
    spec: DevicePoolSpec,
    state: PoolState,
    leaving: Collection[str],
    drifted: Collection[str],
) -> list[Candidate]:
    """Ready devices with no session that stay (not doomed, retiring, rolling or expired:
    `leaving`); from the current template first, then the oldest (they have served)."""
    gone = {*state.doomed, *state.control.retiring, *state.rollout.rolling, *leaving}
    ready = [
        d for d in devices if d.status == am.READY and not d.session_active and d.id not in gone
    ]
    ready.sort(key=lambda d: (d.id in drifted, d.created_at, d.id))
    return [Candidate(d.id, labels_of(d, spec)) for d in ready]


def members(devices: Sequence[am.DeviceInfo]) -> set[str]:
    return {d.id for d in devices if d.status not in (am.TERMINATING, am.TERMINATED)}


def problem(
    selector: Mapping[str, str], *, spec: DevicePoolSpec, devices: Sequence[am.DeviceInfo]
) -> str | None:
    """Why no device of this pool can ever match `selector` (None: one can, now or later)."""
    fixed = {"region": spec.region, "platform": spec.platform.value}
    for key, value in selector.items():
        if key in fixed and value != fixed[key]:
            return (
                f"selector {key}={value} can never match: the pool's devices are {key} {fixed[key]}"
            )
    device = selector.get("device")
    present = members(devices)
    if device is not None and device not in present:
        listed = ids(sorted(present)) if present else "none"
        return f"selector device={device} can never match: not a device of the pool (its devices: {listed})"
    known = set(_OWN_KEYS)
    for d in devices:
        known.update(d.labels)
    unknown = sorted(k for k in selector if k not in known)
    # A label no listed device carries; with none listed yet, nothing is known to refuse.
    if unknown and devices:
        return (
            f"selector key {unknown[0]} can never match: the pool's devices carry no such label"
            f" (they carry {', '.join(sorted(known))})"
        )
    return None


def leased_busy(devices: Sequence[am.DeviceInfo], leased: Collection[str]) -> list[am.DeviceInfo]:
    """`devices` with the leased ones in use (a session): idle to nothing that takes devices."""
    if not leased:
        return list(devices)
    return [d.model_copy(update={"session_active": True}) if d.id in leased else d for d in devices]


def replace_used(
    state: PoolState, ended: Sequence[Ended], *, listed: Collection[str], now: datetime
) -> list[Happened]:
    """Doom the devices of `ended` leases (`onRelease: replace`, `release --replace`)."""
    used = sorted({e.device for e in ended if e.reason not in _NOT_REPLACED and e.device in listed})
    used = [d for d in used if d not in state.doomed]
    if not used:
        return []
    state.fates.set(used, Fate.DOOMED)
    return [Happened("ReplaceRequested", f"{ids(used)} replaced after use (lease released)")]
