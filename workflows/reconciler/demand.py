"""Demand scaling's decisions: the size a pool's demand asks for, the size a scale-down may
go to, the schedule's windows, and which devices may go.

Pure (no Temporal, no clock: `now` is given); the pass reaches it through
`autoscaling.py`. The rules (docs/leases.md, 'Sizing a pool from its demand'):

- the size is `leased + queued + idleBuffer`, raised to the floor (`minReplicas`, or the
  floor of a schedule window in force or warming up), held to `maxReplicas`, and never below
  what is leased: the autoscaler never takes a leased device, so a pool leased past
  `maxReplicas` stays at what is leased until leases end;
- demand unknown (the pool's members not known: no listing yet, or the last one failed;
  `None`) holds the current size: missing data never shrinks a pool;
- a scale-down goes no lower than the highest size wanted within `stabilization`
  (`Stabilization`, carried in the pool's state), and takes only devices unleased for
  `scaleDownAfter` (`may_go`; which of them goes is the kind's plan's to say);
- a window's floor holds from its start for its duration (elapsed time), its cron read in its
  own time zone; the pool starts growing `warm_start` before it, so that the floor is ready
  when the window opens.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from zoneinfo import ZoneInfo

from pydantic import Field

from devicepool.api.autoscale import AutoscaleSpec, ScheduleWindow
from devicepool.api.base import CamelModel
from devicepool.api.durations import format_duration

__all__ = [
    "KEPT",
    "Clamp",
    "ScheduleNow",
    "Seen",
    "Sizing",
    "Stabilization",
    "WindowTimes",
    "active_window",
    "desired_from_demand",
    "may_go",
    "next_may_go",
    "schedule_floor",
    "schedule_wakes",
    "warm_start",
]

# The most sizes `Stabilization` keeps (see `Stabilization.apply` for how it stays within).
KEPT = 16


class Clamp(StrEnum):
    """What made the size differ from `leased + queued + idleBuffer` (None: nothing did)."""

    FLOOR = "Floor"  # raised to minReplicas, or to a schedule window's floor
    MAX = "MaxReplicas"  # held to maxReplicas
    LEASED = "Leased"  # over maxReplicas by what is leased: a leased device is never taken
    HELD = "Held"  # demand unknown: the current size held
    STABILIZED = "Stabilized"  # a higher size wanted within `stabilization` still holds


class Sizing(CamelModel):
    """The size demand asks for, and the parts that explain it (`describe`)."""

    leased: int | None  # None: the members not known (no listing yet, or it failed)
    queued: int | None
    idle_buffer: int
    min_replicas: int
    # The schedule's floor (0: no window in force or warming).
    floor: int
    max_replicas: int
    current: int
    # The size from demand and bounds alone, before stabilization.
    from_demand: int
    desired: int
    clamp: Clamp | None = None
    # Seconds, set when `clamp` is `STABILIZED`: the window whose highest size holds.
    stabilization: float | None = None

    def describe(self) -> str:
        """One line for `describe` and the events: "3 leased + 2 queued + buffer 2 = 7"."""
        steps = _steps(
            self.leased,
            self.queued,
            self.idle_buffer,
            self.min_replicas,
            self.floor,
            self.max_replicas,
            self.current,
        )
        if self.leased is None or self.queued is None:
            line = (
                "demand unknown (its members not known: no listing yet, or it failed):"
                f" the current {self.current} held"
            )
        else:
            line = f"{self.leased} leased + {self.queued} queued + buffer {self.idle_buffer}"
            line += f" = {steps.base}"
        if steps.raised:
            line += (
                f", raised to minReplicas {self.min_replicas}"
                if self.min_replicas >= self.floor
                else f", raised to the schedule's floor {self.floor}"
            )
        if steps.capped:
            line += f", held to maxReplicas {self.max_replicas}"
        if steps.leased_over:
            line += f" but not below the {self.leased} leased (a leased device is never taken)"
        if self.clamp is Clamp.STABILIZED and self.stabilization is not None:
            line += (
                f", kept at {self.desired}: the highest within stabilization"
                f" {format_duration(self.stabilization)}"
            )
        return line


@dataclass(frozen=True)
class _Steps:
    base: int  # leased + queued + idleBuffer, or the current size when demand is unknown
    raised: bool
    capped: bool
    leased_over: bool
    result: int


def _steps(
    leased: int | None,
    queued: int | None,
    idle_buffer: int,
    min_replicas: int,
    floor: int,
    max_replicas: int,
    current: int,
) -> _Steps:
    # One computation for the number and for its words, so they cannot disagree.
    lowest = max(min_replicas, floor)
    if leased is None or queued is None:
        # Never below the current size; a floor still raises it (it needs no lease book),
        # within maxReplicas. A current size above maxReplicas is not cut on missing data.
        target = min(lowest, max_replicas)
        raised = target > current
        return _Steps(
            current, raised, raised and lowest > max_replicas, False, max(current, target)
        )
    base = leased + queued + idle_buffer
    size = max(base, lowest)
    capped = size > max_replicas
    size = min(size, max_replicas)
    leased_over = leased > size
    return _Steps(base, lowest > base, capped, leased_over, max(size, leased))


def desired_from_demand(
    leased: int | None,
    queued: int | None,
    spec: AutoscaleSpec,
    floor: int = 0,
    *,
    current: int,
) -> Sizing:
    """The size for `leased` members held and `queued` tickets waiting (None: not known).

    `floor`: the schedule's (`schedule_floor`; 0 without a window); the higher of it and
    `minReplicas` applies. `current`: the pool's size now, held when demand is unknown. A
    ticket counts as demand, so a pool at zero grows for the first lease asked of it.
    """
    steps = _steps(
        leased, queued, spec.idle_buffer, spec.min_replicas, floor, spec.max_replicas, current
    )
    if leased is None or queued is None:
        clamp: Clamp | None = Clamp.HELD
    elif steps.leased_over:
        clamp = Clamp.LEASED
    elif steps.capped:
        clamp = Clamp.MAX
    elif steps.raised:
        clamp = Clamp.FLOOR
    else:
        clamp = None
    return Sizing(
        leased=leased,
        queued=queued,
        idle_buffer=spec.idle_buffer,
        min_replicas=spec.min_replicas,
        floor=floor,
        max_replicas=spec.max_replicas,
        current=current,
        from_demand=steps.result,
        desired=steps.result,
        clamp=clamp,
    )


# ---------------------------------------------------------------- stabilization


class Seen(CamelModel):
    at: datetime
    desired: int


class Stabilization(CamelModel):
    """The sizes wanted lately, for scale-down's stabilization (an HPA's window).

    Kept as a falling staircase: each size is higher than every one after it, so the first is
    the highest. A size no higher than a later one can never be the answer again (the later one
    stays in the window longer), so it is dropped when that one comes; sizes older than the
    window are dropped too. Past `KEPT` sizes, the two oldest become one: the older's size at the
    younger's time, so a size is held a little longer than wanted, never shorter.
    """

    seen: list[Seen] = Field(default_factory=list)

    def apply(self, sizing: Sizing, *, now: datetime, window: float) -> Sizing:
        """`sizing` raised to the highest size wanted within `window` seconds of `now`.

        A known demand's size is recorded first; a held one (demand unknown) is not, but is
        raised too: a size wanted within the window came from real demand.
        """
        age = timedelta(seconds=window)
        self.seen = [s for s in self.seen if now - s.at < age]
        if sizing.leased is not None and sizing.queued is not None:
            while self.seen and self.seen[-1].desired <= sizing.desired:
                self.seen.pop()
            self.seen.append(Seen(at=now, desired=sizing.desired))
            while len(self.seen) > KEPT:
                older, younger = self.seen[0], self.seen[1]
                self.seen[:2] = [Seen(at=max(older.at, younger.at), desired=older.desired)]
        # Never above maxReplicas, though a size recorded under a higher one may be in the
        # window: lowering the bound takes effect at once.
        highest = min(self.seen[0].desired if self.seen else 0, sizing.max_replicas)
        if highest <= sizing.desired:
            return sizing
        return sizing.model_copy(
            update={"desired": highest, "clamp": Clamp.STABILIZED, "stabilization": window}
        )


# ---------------------------------------------------------------- the schedule


class WindowTimes(CamelModel):
    """One start of a schedule window: `spec.schedule[index]` from `start` until `end` (UTC)."""

    index: int
    min_replicas: int
    start: datetime
    end: datetime


class ScheduleNow(CamelModel):
    """The window in force (the highest floor, if several) and the next to start."""

    active: WindowTimes | None = None
    next: WindowTimes | None = None

    @property
    def floor(self) -> int:
        return self.active.min_replicas if self.active is not None else 0


def _zone(name: str) -> tzinfo:
    # UTC needs no tz database: a host without one still reads the default zone.
    return UTC if name == "UTC" else ZoneInfo(name)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _times(index: int, window: ScheduleWindow, start: datetime) -> WindowTimes:
    start = _utc(start)
    return WindowTimes(
        index=index,
        min_replicas=window.min_replicas,
        start=start,
        end=start + timedelta(seconds=window.duration),
    )


def _last_start(index: int, window: ScheduleWindow, now: datetime) -> WindowTimes | None:
    from cronsim import CronSim

    local = now.astimezone(_zone(window.time_zone))
    # Reverse iteration yields times before its start only: a microsecond on, `now` counts.
    fired = next(CronSim(window.cron, local + timedelta(microseconds=1), reverse=True), None)
    return None if fired is None else _times(index, window, fired)


def _next_start(index: int, window: ScheduleWindow, now: datetime) -> WindowTimes | None:
    from cronsim import CronSim

    fired = next(CronSim(window.cron, now.astimezone(_zone(window.time_zone))), None)
    return None if fired is None else _times(index, window, fired)


def active_window(schedule: Sequence[ScheduleWindow], now: datetime) -> ScheduleNow:
    """The window in force at `now` (its cron fired within `duration` before), and the next
    start of any window after `now`. Of several in force, the highest floor (then the latest
    end); of several next starts, the soonest (then the highest floor). Each window's cron is
    read in its own `timeZone`; a start that overlaps the previous one's window replaces it.
    """
    now = _utc(now)
    in_force = [
        times
        for index, window in enumerate(schedule)
        if (times := _last_start(index, window, now)) is not None and now < times.end
    ]
    upcoming = [
        times
        for index, window in enumerate(schedule)
        if (times := _next_start(index, window, now)) is not None
    ]
    return ScheduleNow(
        active=max(in_force, key=lambda t: (t.min_replicas, t.end, -t.index), default=None),
        next=min(upcoming, key=lambda t: (t.start, -t.min_replicas, t.index), default=None),
    )


def warm_start(
    window_start: datetime, devices_needed: int, creates_per_minute: int, boot_seconds: float
) -> datetime:
    """When a pool must start growing to have `devices_needed` more ready at `window_start`.

    One minute per `creates_per_minute` devices (the account's creation window), counting the
    first minute in full (other pools share the window), then one boot: 60 devices at 20 a
    minute booting in 45 s start 3m45s early. Nothing needed: the window's start.
    """
    if creates_per_minute < 1:
        raise ValueError(f"creates_per_minute must be >= 1, got {creates_per_minute}")
    if not (boot_seconds >= 0 and math.isfinite(boot_seconds)):
        raise ValueError(f"boot_seconds must be a finite number >= 0, got {boot_seconds}")
    if devices_needed <= 0:
        return window_start
    minutes = -(-devices_needed // creates_per_minute)
    return window_start - timedelta(minutes=minutes, seconds=boot_seconds)


def schedule_floor(
    schedule: Sequence[ScheduleWindow],
    now: datetime,
    *,
    creates_per_minute: int,
    boot_seconds: float,
) -> int:
    """The schedule's floor at `now`: the highest of the windows in force and of those whose
    next start is near enough that growing to their floor must begin now (`warm_start`).

    The lead time is counted for a window's whole floor, not for what the pool lacks: it then
    does not move as the pool grows, and a pool half warmed does not fall back under it.
    """
    now = _utc(now)
    floors = [0]
    for index, window in enumerate(schedule):
        last = _last_start(index, window, now)
        if last is not None and now < last.end:
            floors.append(window.min_replicas)
            continue
        upcoming = _next_start(index, window, now)
        if upcoming is not None and now >= warm_start(
            upcoming.start, window.min_replicas, creates_per_minute, boot_seconds
        ):
            floors.append(window.min_replicas)
    return max(floors)


def schedule_wakes(
    schedule: Sequence[ScheduleWindow],
    now: datetime,
    *,
    creates_per_minute: int,
    boot_seconds: float,
) -> list[datetime]:
    """The moments the schedule's floor may move after `now`, every window's: the end of
    one in force; the warm-up start (`warm_start`), the start and the end of its next. Not
    only the soonest window's: a later, larger one warms earlier; a pool grown before its
    window opens may go quiet, and must still be woken at the window's end."""
    now = _utc(now)
    wakes: list[datetime] = []
    for index, window in enumerate(schedule):
        last = _last_start(index, window, now)
        if last is not None and now < last.end:
            wakes.append(last.end)
        upcoming = _next_start(index, window, now)
        if upcoming is not None:
            warm = warm_start(upcoming.start, window.min_replicas, creates_per_minute, boot_seconds)
            wakes.extend((warm, upcoming.start, upcoming.end))
    return [w for w in wakes if w > now]


# ---------------------------------------------------------------- who may go


def may_go(
    devices: Iterable[str],
    leases: Collection[str],
    idle_since: Mapping[str, datetime],
    scale_down_after: float,
    now: datetime,
) -> list[str]:
    """The devices a scale-down may take, in the order to take them.

    Only those unleased for `scale_down_after` seconds: never one in `leases`, nor one without
    an `idle_since` (not known to be idle is not idle). The longest idle first, then by id: the
    device demand has gone without longest goes before one just given back (whose holder may
    ask again), and the order is the same on every pass and every replay.
    """
    after = timedelta(seconds=scale_down_after)
    eligible = [
        device
        for device in dict.fromkeys(devices)
        if device not in leases
        and (since := idle_since.get(device)) is not None
        and now - since >= after
    ]
    return sorted(eligible, key=lambda device: (idle_since[device], device))


def next_may_go(
    devices: Iterable[str],
    leases: Collection[str],
    idle_since: Mapping[str, datetime],
    scale_down_after: float,
    now: datetime,
) -> datetime | None:
    """When the next unleased device becomes one `may_go` takes (None: none will on its own):
    the pool's wake for a scale-down waiting on idleness. Never a time already past."""
    after = timedelta(seconds=scale_down_after)
    due = [
        since + after
        for device in devices
        if device not in leases
        and (since := idle_since.get(device)) is not None
        and since + after > now
    ]
    return min(due, default=None)
