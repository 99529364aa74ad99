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
from devicepool.api.v1beta1 import LifetimeSpec

__all__ = ["Expiry", "expiries", "protected_now"]


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
