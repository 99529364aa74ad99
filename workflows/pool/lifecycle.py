"""Voluntary replacement of single devices, pure: by age (`spec.lifetime`), by request and by
drift, within the disruption budgets. The rules: docs/pools.md, 'One device by hand, and
lifetime'.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from devicepool.activities import models as am
from devicepool.api.names import LABEL_TEMPLATE_HASH
from devicepool.api.v1beta1 import (
    DevicePoolSpec,
    DisruptionBudget,
    DisruptionReason,
    DisruptionSpec,
    LifetimeSpec,
)
from devicepool.workflows.pool import events as say
from devicepool.workflows.pool.fates import LEFT, Fate
from devicepool.workflows.pool.plan import COUNTED_STATUSES
from devicepool.workflows.pool.state import PoolState

__all__ = [
    "BUSY_ROLLING_GIVES_WAY_PATCH",
    "Budgets",
    "Expiry",
    "Lifecycle",
    "drifted",
    "expiries",
    "protected_now",
    "roll",
    "when_idle_said",
    "window_change",
]


# A drifted device picked to roll that is busy when it should go (its pass listed it idle,
# or its session started since) gives way to an idle drifted one (`roll`); runs before it
# kept it rolling until its session ended, and nothing else rolled meanwhile.
BUSY_ROLLING_GIVES_WAY_PATCH = "rollout-busy-gives-way"


def every_patch(patch_id: str) -> bool:
    """`patched` of a pure caller: every gated change taken."""
    return True


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
    devices: Collection[am.DeviceInfo],
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
        if device.status in (am.TERMINATING, am.TERMINATED) or device.id in protected:
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
    devices: Collection[am.DeviceInfo], *, current: str, unlabelled: str, leaving: Collection[str]
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
    limit: int | None = None,
    give_way: bool = True,
) -> list[str]:
    """The drifted devices to replace now, at most `surge + unavailable` (and `limit`) at
    once: those already rolling, then idle ones oldest first, busy ones last. Protected
    ones wait. `give_way`: a rolling device busy now (picked idle, its session started
    since) gives its place to an idle drifted one while there is one (its replacement,
    beside it, serves for that one): it would otherwise hold the rollout for its whole
    session. The device taking a busy one's place is a new disruption: it counts against
    `limit`, so none gives way while the rolling ones fill a budget (a window that blocks
    drift, or one another reason spent). Runs before `BUSY_ROLLING_GIVES_WAY_PATCH` kept
    it."""
    still = [d for d in drift if d in rolling]
    waiting = [d for d in drift if d not in rolling and d not in protected]
    others = [d for d in waiting if d not in busy] + [d for d in waiting if d in busy]
    room = max(0, surge + unavailable - len(still))
    if limit is not None:  # a disruption budget: never more rolling at once
        room = min(room, max(0, limit - len(still)))
    if not give_way:
        return still + others[:room]
    if limit is not None and len(still) + room > limit:
        return still + others[:room]  # over the budget already: nothing new disrupted
    idle = [d for d in still if d not in busy] + [d for d in others if d not in busy]
    in_use = [d for d in still if d in busy] + [d for d in others if d in busy]
    return (idle + in_use)[: len(still) + room]


def window_change(budget: DisruptionBudget, now: datetime) -> datetime | None:
    """When a scheduled budget next starts or stops applying after `now` (None: it has no
    schedule, or its cron never fires again)."""
    if budget.schedule is None or budget.duration is None:
        return None
    from cronsim import CronSim

    duration = timedelta(seconds=budget.duration)
    # One lookup each way, not a walk through every firing in the window (a "* * * * *"
    # schedule for a year is half a million): the last firing at or before `now` (a
    # reverse walk from a moment with microseconds takes that moment's own second),
    # and the next one after it.
    last = next(CronSim(budget.schedule, now + timedelta(microseconds=1), reverse=True), None)
    if last is not None and last + duration > now:
        # In a window: it ends at the last firing's end (a firing before then extends
        # it, and is looked at then).
        return last + duration
    return next(CronSim(budget.schedule, now), None)  # outside: it opens at the next one


def when_idle_said(device: str, spec: DevicePoolSpec) -> str:
    """What `replace DEVICE --when-idle` answers: in which order it and its replacement
    go (a rollout's `maxSurge` of 0 allows no device beside it, nor a full spendCap)."""
    rollout = spec.rollout
    if rollout is not None and rollout.limits(spec.replicas)[0] == 0:
        return f"{device} is replaced once idle (rollout maxSurge 0: it goes, then its replacement)"
    said = f"{device} is replaced once idle, once its replacement (created first) serves"
    if spec.spend_cap is not None:
        said += " (if spendCap leaves no room beside it: it goes, then its replacement)"
    return said


class Budgets:
    """What the active disruption budgets still allow this pass, reason by reason (the rule:
    docs/pools.md, 'One device by hand, and lifetime')."""

    def __init__(self, spec: DisruptionSpec | None, *, replicas: int, now: datetime) -> None:
        budgets = spec.budgets if spec is not None else []
        self._left: list[tuple[DisruptionBudget, int]] = [
            (b, b.allowed(replicas)) for b in budgets if b.active(now)
        ]

    def left(self, reason: DisruptionReason) -> int | None:
        counts = [left for b, left in self._left if b.covers(reason)]
        return max(0, min(counts)) if counts else None

    def spend(self, reason: DisruptionReason, count: int) -> None:
        self._left = [(b, left - count if b.covers(reason) else left) for b, left in self._left]

    def take(self, reason: DisruptionReason, wanted: list[str]) -> list[str]:
        """The first of `wanted` the budgets allow now (and count them as taken)."""
        left = self.left(reason)
        taken = wanted if left is None else wanted[:left]
        self.spend(reason, len(taken))
        return taken


@dataclass(frozen=True)
class Lifecycle:
    """The pool's voluntary replacements at `now`: what the pass hands `decide`, and the
    state it keeps (`advance`)."""

    spec: DevicePoolSpec
    state: PoolState
    devices: list[am.DeviceInfo]
    now: datetime
    # `workflow.patched` in the workflow (a change of the commands a pass issues is
    # gated by it); pure callers take every change.
    patched: Callable[[str], bool] = every_patch

    def protected(self) -> set[str]:
        """Protected by a person, or leased: never scaled down, expired or rolled."""
        return protected_now(self.state.control.protected, self.now) | self.state.leases.devices()

    def next_protection_end(self) -> datetime | None:
        """When the next protection runs out (to look again then). One run out already is
        no deadline: it is forgotten on the next fresh listing, and a past deadline would
        wake the pool every second while its listings fail."""
        ends = [u for u in self.state.control.protected.values() if u is not None and u > self.now]
        return min(ends, default=None)

    def expiry(self, *, ignoring_leases: bool = False) -> Expiry:
        """`ignoring_leases`: as if no device were leased (what a release would allow)."""
        protected = self.protected()
        if ignoring_leases:
            protected -= self.state.leases.devices() - set(self.state.control.protected)
        return expiries(
            self.devices, lifetime=self.spec.lifetime, protected=protected, now=self.now
        )

    def limits(self) -> tuple[int, int]:
        """(surge, unavailable) of `spec.rollout` for the pool's size; (0, 0) without one."""
        rollout = self.spec.rollout
        return rollout.limits(self.spec.replicas) if rollout is not None else (0, 0)

    def surge(self) -> int | None:
        """`rollout.maxSurge`: how many devices above `replicas` may bill while devices are
        replaced beside their replacements; None without a rollout (no limit)."""
        return self.limits()[0] if self.spec.rollout is not None else None

    def reasons(self) -> dict[str, str]:
        """Why each device leaving of the pool's own accord goes: `Replaced` (a person asked)
        or `Expired` (past `maxAge`); a scale-down of an expired device is a scale-down."""
        expiry = self.expiry()
        why = dict.fromkeys([*expiry.retire, *expiry.force], "Expired")
        why.update(dict.fromkeys(self.state.control.retiring, "Replaced"))
        return why

    def drift(self) -> list[str]:
        """The members made from another template than the spec's, oldest first."""
        current = am.template_hash(am.device_template(self.spec))
        leaving = {*self.state.doomed, *self.state.control.retiring}
        unlabelled = self.state.rollout.unlabelled_hash or current
        return drifted(self.devices, current=current, unlabelled=unlabelled, leaving=leaving)

    def budgets(self) -> Budgets:
        return Budgets(self.spec.disruption, replicas=self.spec.replicas, now=self.now)

    def _expired_now(self, budgets: Budgets) -> list[str]:
        """The expired devices retired now, oldest first, within `budgets` (spent on them,
        after the retirements still terminating: a budget counts what is away at once)."""
        budgets.spend(DisruptionReason.EXPIRED, len(self._terminating(Fate.LEFT_EXPIRED)))
        return budgets.take(DisruptionReason.EXPIRED, self.expiry().retire)

    def _terminating(self, fate: Fate) -> list[str]:
        """The devices that left of the pool's own accord with `fate` and terminate."""
        left = set(self.state.fates.of(fate))
        return [d.id for d in self.devices if d.status == am.TERMINATING and d.id in left]

    def left(self) -> list[str]:
        """Devices that left of the pool's own accord before their replacement and still
        terminate (`Rollout.left_first`)."""
        first = set(self.state.rollout.left_first)
        return sorted({d for fate in LEFT.values() for d in self._terminating(fate) if d in first})

    def allocation(self) -> tuple[list[str], Budgets]:
        """The expired devices to retire now (oldest first, within the budgets), and the
        budgets left for drift and scale-down after them and the rolling in progress."""
        budgets = self.budgets()
        expired = self._expired_now(budgets)
        rolling = [d for d in self.state.rollout.rolling if d in set(self.drift())]
        budgets.spend(DisruptionReason.DRIFTED, len(rolling) + len(self._drifted_leaving()))
        return expired, budgets

    def _drifted_leaving(self) -> list[str]:
        """Drifted devices terminating (rolled, not gone yet): a rollout step under way."""
        return self._terminating(Fate.LEFT_DRIFTED) if self.spec.rollout is not None else []

    def retire(self) -> list[str]:
        """Devices to replace once idle: asked for by a person, or past `maxAge`."""
        return sorted({*self.state.control.retiring, *self.allocation()[0]})

    def next_window_check(self, *, pending: bool) -> datetime | None:
        """With scheduled budgets and voluntary work waiting (`pending`), the next moment a
        window opens or closes (what may go changes then); nothing in between."""
        spec = self.spec.disruption
        if not pending or spec is None:
            return None
        changes = [window_change(b, self.now) for b in spec.budgets]
        return min((c for c in changes if c is not None), default=None)

    def scale_down_limit(self) -> int | None:
        """How many devices a scale-down may take this pass (None: no budget limits it)."""
        return self.allocation()[1].left(DisruptionReason.SCALE_DOWN)

    def advance(self) -> list[say.Happened]:
        """One pass on a fresh listing: force out what is past `maxAge + gracePeriod`,
        forget entries of devices gone, pick the drifted devices to roll. What to say."""
        state, said = self.state, []
        forced = [d for d in self.expiry().force if d not in state.doomed]
        if forced:
            state.fates.set(forced, Fate.DOOMED)
            said.append(say.expired_forced(forced, self.spec.lifetime))
        listed = {d.id for d in self.devices if d.status not in (am.TERMINATING, am.TERMINATED)}
        state.control.retiring = [d for d in state.control.retiring if d in listed]
        if state.rollout.unlabelled_hash is None:  # devices rented before the label: this template
            state.rollout.unlabelled_hash = am.template_hash(am.device_template(self.spec))
        surge, unavailable = self.limits()
        drift = self.drift() if self.spec.rollout is not None else []
        budgets = self.budgets()
        self._expired_now(budgets)
        budgets.spend(DisruptionReason.DRIFTED, len(self._drifted_leaving()))
        rolling = functools.partial(
            roll,
            state.rollout.rolling,
            drift,
            surge=surge,
            unavailable=unavailable,
            protected=self.protected(),
            busy={d.id for d in self.devices if d.status == am.BUSY or d.session_active},
            limit=budgets.left(DisruptionReason.DRIFTED),
        )
        state.rollout.rolling = kept = rolling(give_way=False)
        # Asked only when a busy rolling device gives way (the marker, once a run).
        rolled = rolling()
        if set(rolled) != set(kept) and self.patched(BUSY_ROLLING_GIVES_WAY_PATCH):
            state.rollout.rolling = rolled
        state.control.protected = {
            d: until
            for d, until in state.control.protected.items()
            if d in listed and (until is None or until > self.now)
        }
        return said
