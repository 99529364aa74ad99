"""Voluntary replacement of single devices, pure: by age (`spec.lifetime`) and by request.

A device past `lifetime.maxAge` is *retired*: its replacement is created and it
is terminated as soon as it is idle (a busy device carries a live session).
Past `maxAge + gracePeriod` it is *forced*: terminated even if busy, and a
Warning event says so. A protected device (`devicepool protect`) is never
retired, forced or chosen for scale-down while its protection lasts; the
health check still replaces it if it dies. No Temporal, no clock: `now` comes in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from devicepool.activities.models import TERMINATED, TERMINATING, DeviceInfo
from devicepool.api.names import LABEL_TEMPLATE_HASH
from devicepool.api.v1beta1 import LifetimeSpec
from devicepool.workflows.pool.plan import COUNTED_STATUSES

__all__ = ["Expiry", "drifted", "expiries", "protected_now", "roll"]


@dataclass(frozen=True)
class Expiry:
    # past maxAge: replaced once idle
    retire: list[str] = field(default_factory=list)
    # past maxAge + gracePeriod: replaced now, busy or not
    force: list[str] = field(default_factory=list)
    # the next moment a device crosses maxAge or maxAge + grace (to wake then)
    next_at: datetime | None = None


def protected_now(protected: Mapping[str, datetime | None], now: datetime) -> set[str]:
    """The devices whose protection still holds (None: until unprotected)."""
    return {d for d, until in protected.items() if until is None or until > now}


def expiries(
    devices: Collection[DeviceInfo],
    *,
    lifetime: LifetimeSpec | None,
    protected: Collection[str],
    now: datetime,
) -> Expiry:
    """Which devices `lifetime` retires or forces now, and when to look again."""
    if lifetime is None:
        return Expiry()
    max_age = timedelta(seconds=lifetime.max_age)
    grace = None if lifetime.grace_period is None else timedelta(seconds=lifetime.grace_period)
    retire, force, upcoming = [], [], []
    for device in sorted(devices, key=lambda d: (d.created_at, d.id)):
        if device.status in (TERMINATING, TERMINATED) or device.id in protected:
            continue
        expires = device.created_at + max_age
        forced = expires + grace if grace is not None else None
        if forced is not None and now >= forced:
            force.append(device.id)
            continue
        if now >= expires:
            retire.append(device.id)
            if forced is not None:
                upcoming.append(forced)
        else:
            upcoming.append(expires)
    return Expiry(retire=retire, force=force, next_at=min(upcoming) if upcoming else None)


def drifted(
    devices: Collection[DeviceInfo], *, current: str, unlabelled: str, leaving: Collection[str]
) -> list[str]:
    """Devices made from another template than `current`, oldest first (a device without
    the `template-hash` label was made from `unlabelled`); not those already leaving."""
    found = [
        d
        for d in devices
        if d.status in COUNTED_STATUSES
        and d.id not in leaving
        and d.labels.get(LABEL_TEMPLATE_HASH, unlabelled) != current
    ]
    return [d.id for d in sorted(found, key=lambda d: (d.created_at, d.id))]


def roll(
    rolling: Collection[str],
    drift: list[str],
    *,
    surge: int,
    unavailable: int,
    protected: Collection[str],
    busy: Collection[str],
) -> list[str]:
    """The drifted devices to replace now, at most `surge + unavailable` at once: those
    already rolling that still drifted, then idle ones oldest first, busy ones last (a
    busy device carries a live session: it is replaced when nothing idle is left to
    roll). Protected ones wait."""
    still = [d for d in drift if d in rolling]
    waiting = [d for d in drift if d not in rolling and d not in protected]
    others = [d for d in waiting if d not in busy] + [d for d in waiting if d in busy]
    room = max(0, surge + unavailable - len(still))
    return still + others[:room]
