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

from devicepool.activities.models import (
    BUSY,
    TERMINATED,
    TERMINATING,
    DeviceInfo,
    device_template,
    template_hash,
)
from devicepool.api.names import LABEL_TEMPLATE_HASH
from devicepool.api.v1beta1 import DevicePoolSpec, LifetimeSpec
from devicepool.workflows.pool import events as say
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.plan import COUNTED_STATUSES
from devicepool.workflows.pool.state import PoolState

__all__ = ["Expiry", "Lifecycle", "drifted", "expiries", "protected_now", "roll"]


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


@dataclass(frozen=True)
class Lifecycle:
    """The pool's voluntary replacements at `now`: what the pass hands `decide`, and the
    state it keeps (expired devices forced out, control entries of gone devices dropped,
    the drifted devices rolling)."""

    spec: DevicePoolSpec
    state: PoolState
    devices: list[DeviceInfo]
    now: datetime

    def protected(self) -> set[str]:
        return protected_now(self.state.protected, self.now)

    def expiry(self) -> Expiry:
        return expiries(
            self.devices, lifetime=self.spec.lifetime, protected=self.protected(), now=self.now
        )

    def limits(self) -> tuple[int, int]:
        """(surge, unavailable) of `spec.rollout` for the pool's size; (0, 0) without one."""
        rollout = self.spec.rollout
        return rollout.limits(self.spec.replicas) if rollout is not None else (0, 0)

    def drift(self) -> list[str]:
        """The members made from another template than the spec's, oldest first."""
        current = template_hash(device_template(self.spec))
        leaving = {*self.state.doomed, *self.state.retiring}
        unlabelled = self.state.unlabelled_hash or current
        return drifted(self.devices, current=current, unlabelled=unlabelled, leaving=leaving)

    def retire(self) -> list[str]:
        """Devices to replace once idle: asked for by a person, or past `maxAge`."""
        return sorted({*self.state.retiring, *self.expiry().retire})

    def advance(self) -> list[say.Happened]:
        """One pass on a fresh listing: force out what is past `maxAge + gracePeriod`,
        forget entries of devices gone, pick the drifted devices to roll. What to say."""
        state, said = self.state, []
        forced = [d for d in self.expiry().force if d not in state.doomed]
        if forced:
            state.fates.set(forced, Fate.DOOMED)
            said.append(say.expired_forced(forced, self.spec.lifetime))
        listed = {d.id for d in self.devices if d.status not in (TERMINATING, TERMINATED)}
        state.retiring = [d for d in state.retiring if d in listed]
        if state.unlabelled_hash is None:  # devices rented before the label: this template
            state.unlabelled_hash = template_hash(device_template(self.spec))
        surge, unavailable = self.limits()
        state.rolling = roll(
            state.rolling,
            self.drift() if self.spec.rollout is not None else [],
            surge=surge,
            unavailable=unavailable,
            protected=self.protected(),
            busy={d.id for d in self.devices if d.status == BUSY or d.session_active},
        )
        state.protected = {
            d: until
            for d, until in state.protected.items()
            if d in listed and (until is None or until > self.now)
        }
        return said
