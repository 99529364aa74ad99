"""Demand scaling in the pass: what the shell asks of `demand.py` each pass of a pool whose
spec sets `autoscale`, for both kinds.

Pure (no Temporal; `now` is given). The shell (`Reconciler.autoscale`) calls `resize` between
the lease book's settle and the kind's decision, and writes the size it answers into the
spec's `replicas` (as an HPA writes a Deployment's): the kind's own plan then grows or
shrinks the pool, through the same paced creates, spend cap and scale-down as any size.
docs/leases.md, 'Sizing a pool from its demand', says what a user sees.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from devicepool.api.autoscale import AutoscaleSpec, ScheduleWindow
from devicepool.api.durations import format_duration
from devicepool.workflows.reconciler.demand import (
    ScheduleNow,
    Sizing,
    Stabilization,
    active_window,
    desired_from_demand,
    may_go,
    next_may_go,
    schedule_floor,
    schedule_wakes,
)
from devicepool.workflows.reconciler.lease_records import Ticket

__all__ = [
    "MEMBER_KEYS",
    "WARM_BOOT_SECONDS",
    "WARM_CREATES_PER_MINUTE",
    "Resize",
    "idle_for",
    "keep_size",
    "kept_from_scale_down",
    "queued_demand",
    "resize",
    "scale_refusal",
    "schedule_shown",
    "track_idle",
    "with_replicas",
]

SpecT = TypeVar("SpecT", bound=Any)

# Selector keys that name one member: a ticket waiting for one is no demand a new member meets.
MEMBER_KEYS = frozenset({"device", "profile"})
# The pace a schedule's warm-up is counted at (`demand.warm_start`): slower than most
# accounts' creation windows and boots, so a window's floor is ready early rather than late.
WARM_CREATES_PER_MINUTE = 10
WARM_BOOT_SECONDS = 120.0


def scale_refusal(autoscale: AutoscaleSpec | None) -> str | None:
    """Why `scale` is refused (None: it is not): the autoscaler owns an autoscaled pool's size."""
    if autoscale is None:
        return None
    bounds = f"{autoscale.min_replicas}..{autoscale.max_replicas}"
    return (
        f"it sizes itself from its leases (autoscale {bounds}), scale is refused: change"
        " autoscale.minReplicas/maxReplicas in its manifest and `devicepool apply` it"
    )


def idle_for(autoscale: AutoscaleSpec) -> str:
    return format_duration(autoscale.scale_down_after)


def with_replicas(spec: SpecT, replicas: int) -> SpecT:
    """`spec` (a kind's model) with `replicas`."""
    copy: SpecT = spec.model_copy(update={"replicas": replicas})
    return copy


def keep_size(old_replicas: int, new: SpecT) -> SpecT:
    """An applied spec with `autoscale`: its `replicas` is the autoscaler's size now, whatever
    the manifest says (as an HPA's target ignores a Deployment's `replicas`)."""
    if getattr(new, "autoscale", None) is None or getattr(new, "replicas", None) == old_replicas:
        return new
    return with_replicas(new, old_replicas)


def queued_demand(tickets: Iterable[Ticket], can_serve: Callable[[Mapping[str, str]], bool]) -> int:
    """The tickets a new member could serve: not one waiting for a named member (`device=`,
    `profile=`), nor one whose selector no member of the pool can ever match. `can_serve` is
    asked once per distinct selector: a long queue asks the same few."""
    answers: dict[tuple[tuple[str, str], ...], bool] = {}
    count = 0
    for ticket in tickets:
        if MEMBER_KEYS & set(ticket.selector):
            continue
        key = tuple(sorted(ticket.selector.items()))
        if key not in answers:
            answers[key] = can_serve(ticket.selector)
        count += answers[key]
    return count


def kept_from_scale_down(
    autoscale: AutoscaleSpec | None,
    *,
    members: Iterable[str],
    leases: Collection[str],
    idle_since: Mapping[str, datetime],
    now: datetime,
) -> set[str]:
    """The members a scale-down of an autoscaled pool must not pick: all but those `may_go`
    takes (leased ones the kind keeps anyway). None without `autoscale`."""
    if autoscale is None:
        return set()
    members = list(members)
    going = set(may_go(members, leases, idle_since, autoscale.scale_down_after, now))
    return {m for m in members if m not in going}


def track_idle(
    idle_since: Mapping[str, datetime],
    *,
    members: Collection[str] | None,
    free: Collection[str],
    leased: Collection[str],
    now: datetime,
) -> dict[str, datetime]:
    """Since when each member has been unleased: a free member not yet known to be idle is
    from `now`; a leased one, or one no longer a member, is dropped. `members` None (not
    known): as it was, less the leased."""
    kept = {d: t for d, t in idle_since.items() if d not in leased}
    if members is None:
        return kept
    present = set(members)
    kept = {d: t for d, t in kept.items() if d in present}
    for device in free:
        if device in present and device not in leased:
            kept.setdefault(device, now)
    return kept


@dataclass(frozen=True)
class Resize:
    """One pass's size: `target` is the spec's `replicas` from now on."""

    sizing: Sizing
    target: int
    schedule: ScheduleNow
    # Members kept only because they were not idle for `scaleDownAfter` yet.
    held_for_idle: int
    # When a pass is due for the autoscaler alone (None: no timer).
    wake: datetime | None


def resize(
    *,
    autoscale: AutoscaleSpec,
    schedule: Sequence[ScheduleWindow],
    leased: int | None,
    queued: int | None,
    members: Collection[str] | None,
    leases: Collection[str],
    idle_since: Mapping[str, datetime],
    stabilization: Stabilization,
    current: int,
    now: datetime,
    order: Sequence[str] | None = None,
) -> Resize:
    """The size for this pass, and when to look again.

    Up: at once, to the size demand (and the schedule) asks for. Down: no lower than
    `stabilization` holds, and by no more members than `may_go` (unleased for
    `scaleDownAfter`); creates not yet landed are given up first. `order`: the members in the
    order the kind's scale-down takes them (None: it takes those `may_go` names); then only
    as many as lead it and may go. `stabilization` is updated (it is carried)."""
    floor = schedule_floor(
        schedule,
        now,
        creates_per_minute=WARM_CREATES_PER_MINUTE,
        boot_seconds=WARM_BOOT_SECONDS,
    )
    sizing = desired_from_demand(leased, queued, autoscale, floor, current=current)
    sizing = stabilization.apply(sizing, now=now, window=autoscale.stabilization)
    target, held, wakes = sizing.desired, 0, []
    if target < current:
        if members is None:
            target = current  # which members may go is not known: none does
        else:
            going = may_go(members, leases, idle_since, autoscale.scale_down_after, now)
            if order is not None:
                going = _leading(order, set(going))
            staying = len(set(members)) - len(going)
            held = max(0, min(current, staying) - target)
            target = max(target, min(current, staying))
            if held:
                wakes.append(
                    next_may_go(members, leases, idle_since, autoscale.scale_down_after, now)
                )
    if sizing.stabilization is not None and stabilization.seen:
        # When the size that holds leaves the window.
        wakes.append(stabilization.seen[0].at + timedelta(seconds=sizing.stabilization))
    window = active_window(schedule, now) if schedule else ScheduleNow()
    wakes.extend(
        schedule_wakes(
            schedule,
            now,
            creates_per_minute=WARM_CREATES_PER_MINUTE,
            boot_seconds=WARM_BOOT_SECONDS,
        )
    )
    due = [w for w in wakes if w is not None and w > now]
    return Resize(
        sizing=sizing,
        target=target,
        schedule=window,
        held_for_idle=held,
        wake=min(due, default=None),
    )


def _leading(order: Sequence[str], going: Collection[str]) -> list[str]:
    """The members at the head of `order` that may go, up to the first that may not."""
    leading: list[str] = []
    for member in dict.fromkeys(order):
        if member not in going:
            break
        leading.append(member)
    return leading


def schedule_shown(window: ScheduleNow) -> str | None:
    """`status.activeSchedule`: the window in force (None: none)."""
    active = window.active
    if active is None:
        return None
    until = active.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"schedule[{active.index}]: at least {active.min_replicas} until {until}"
