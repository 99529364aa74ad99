"""Demand scaling's decisions, pure: the size from leases and tickets (never below what is
leased, never above `maxReplicas`, monotone in demand, held on unknown demand), the
stabilization record, the schedule's windows in their own time zone, and which devices a
scale-down may take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.api.autoscale import AutoscaleSpec, ScheduleWindow
from devicepool.workflows.reconciler.demand import (
    KEPT,
    Clamp,
    ScheduleNow,
    Stabilization,
    active_window,
    desired_from_demand,
    may_go,
    next_may_go,
    schedule_floor,
    warm_start,
)

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
PROPERTY = settings(max_examples=300, deadline=None)


def autoscale(**fields: Any) -> AutoscaleSpec:
    return AutoscaleSpec.model_validate({"maxReplicas": 50, **fields})


specs = st.builds(
    lambda most, least, buffer: autoscale(
        maxReplicas=most, minReplicas=min(least, most), idleBuffer=buffer
    ),
    st.integers(1, 80),
    st.integers(0, 80),
    st.integers(0, 20),
)
counts = st.integers(0, 120)


# ---------------------------------------------------------------- the size, and why


def test_the_size_is_leased_plus_queued_plus_the_buffer() -> None:
    sizing = desired_from_demand(3, 2, autoscale(idleBuffer=2), current=4)
    assert (sizing.desired, sizing.clamp) == (7, None)
    assert sizing.describe() == "3 leased + 2 queued + buffer 2 = 7"


@pytest.mark.parametrize(
    ("leased", "queued", "fields", "floor", "desired", "clamp", "line"),
    [
        (
            0,
            0,
            {"minReplicas": 5},
            0,
            5,
            Clamp.FLOOR,
            "0 leased + 0 queued + buffer 0 = 0, raised to minReplicas 5",
        ),
        (
            1,
            2,
            {"minReplicas": 5},
            60,
            50,
            Clamp.MAX,
            "1 leased + 2 queued + buffer 0 = 3, raised to the schedule's floor 60,"
            " held to maxReplicas 50",
        ),
        (
            1,
            2,
            {"minReplicas": 5},
            20,
            20,
            Clamp.FLOOR,
            "1 leased + 2 queued + buffer 0 = 3, raised to the schedule's floor 20",
        ),
        (
            40,
            30,
            {"idleBuffer": 2},
            0,
            50,
            Clamp.MAX,
            "40 leased + 30 queued + buffer 2 = 72, held to maxReplicas 50",
        ),
        (
            55,
            0,
            {"idleBuffer": 2},
            0,
            55,
            Clamp.LEASED,
            "55 leased + 0 queued + buffer 2 = 57, held to maxReplicas 50 but not below"
            " the 55 leased (a leased device is never taken)",
        ),
    ],
)
def test_the_describe_line_names_the_clamp_that_applied(
    leased: int,
    queued: int,
    fields: dict[str, Any],
    floor: int,
    desired: int,
    clamp: Clamp,
    line: str,
) -> None:
    sizing = desired_from_demand(leased, queued, autoscale(**fields), floor, current=0)
    assert (sizing.desired, sizing.clamp, sizing.describe()) == (desired, clamp, line)


def test_a_pool_goes_to_zero_and_a_ticket_at_zero_brings_it_back() -> None:
    idle = desired_from_demand(0, 0, autoscale(), current=3)
    assert idle.desired == 0
    assert idle.describe() == "0 leased + 0 queued + buffer 0 = 0"
    assert desired_from_demand(0, 1, autoscale(), current=0).desired == 1
    assert desired_from_demand(0, 1, autoscale(maxReplicas=1), current=0).desired == 1


@pytest.mark.parametrize(("leased", "queued"), [(None, 2), (3, None), (None, None)])
def test_unknown_demand_holds_the_current_size(leased: int | None, queued: int | None) -> None:
    sizing = desired_from_demand(leased, queued, autoscale(idleBuffer=2), current=7)
    assert (sizing.desired, sizing.clamp) == (7, Clamp.HELD)
    assert (
        sizing.describe()
        == "demand unknown (its members not known: no listing yet, or it failed): the current 7 held"
    )
    # A window in force still raises it (the floor needs no lease book), within maxReplicas.
    assert desired_from_demand(None, None, autoscale(), 20, current=7).desired == 20
    assert desired_from_demand(None, None, autoscale(), 90, current=7).desired == 50


@PROPERTY
@given(spec=specs, leased=counts, queued=counts, floor=counts, current=counts)
def test_the_size_is_within_its_bounds(
    spec: AutoscaleSpec, leased: int, queued: int, floor: int, current: int
) -> None:
    desired = desired_from_demand(leased, queued, spec, floor, current=current).desired
    assert desired >= leased  # the autoscaler never takes a leased device
    if leased <= spec.max_replicas:
        assert desired <= spec.max_replicas
        assert desired >= min(max(spec.min_replicas, floor), spec.max_replicas)
        assert desired >= min(leased + queued + spec.idle_buffer, spec.max_replicas)
    else:
        assert desired == leased  # over maxReplicas only by what is leased
    if queued and spec.max_replicas:
        assert desired >= 1  # a ticket at zero makes the pool grow


@PROPERTY
@given(
    spec=specs,
    leased=counts,
    queued=counts,
    floor=counts,
    more_leased=st.integers(0, 30),
    more_queued=st.integers(0, 30),
    more_floor=st.integers(0, 30),
)
def test_more_demand_never_gives_fewer(
    spec: AutoscaleSpec,
    leased: int,
    queued: int,
    floor: int,
    more_leased: int,
    more_queued: int,
    more_floor: int,
) -> None:
    before = desired_from_demand(leased, queued, spec, floor, current=0).desired
    after = desired_from_demand(
        leased + more_leased, queued + more_queued, spec, floor + more_floor, current=0
    ).desired
    assert after >= before


@PROPERTY
@given(
    spec=specs,
    known=st.tuples(counts, counts),
    unknown=st.sampled_from([(True, False), (False, True), (True, True)]),
    floor=counts,
    current=counts,
)
def test_unknown_demand_never_shrinks(
    spec: AutoscaleSpec,
    known: tuple[int, int],
    unknown: tuple[bool, bool],
    floor: int,
    current: int,
) -> None:
    leased = None if unknown[0] else known[0]
    queued = None if unknown[1] else known[1]
    sizing = desired_from_demand(leased, queued, spec, floor, current=current)
    assert sizing.desired >= current
    assert sizing.desired <= max(current, spec.max_replicas)


# ---------------------------------------------------------------- stabilization


def test_stabilization_holds_the_highest_recent_size() -> None:
    record = Stabilization()
    spec = autoscale(stabilization="5m")
    high = desired_from_demand(8, 0, spec, current=0)
    assert record.apply(high, now=T0, window=spec.stabilization).desired == 8
    low = desired_from_demand(1, 0, spec, current=8)
    held = record.apply(low, now=T0 + timedelta(minutes=4), window=spec.stabilization)
    assert (held.desired, held.clamp, held.from_demand) == (8, Clamp.STABILIZED, 1)
    assert held.describe() == (
        "1 leased + 0 queued + buffer 0 = 1, kept at 8: the highest within stabilization 5m"
    )
    later = record.apply(low, now=T0 + timedelta(minutes=5), window=spec.stabilization)
    assert (later.desired, later.clamp) == (1, None)
    # The record is JSON, and reads back as it was (it lives in the pool's state).
    assert Stabilization.model_validate_json(record.model_dump_json()) == record
    assert Stabilization.model_validate({}) == Stabilization()


def test_a_lowered_max_replicas_bounds_what_stabilization_keeps() -> None:
    record = Stabilization()
    record.apply(desired_from_demand(40, 0, autoscale(), current=0), now=T0, window=300)
    lowered = autoscale(maxReplicas=20)
    later = T0 + timedelta(minutes=1)
    size = record.apply(desired_from_demand(2, 0, lowered, current=40), now=later, window=300)
    assert (size.desired, size.clamp) == (20, Clamp.STABILIZED)
    assert size.describe() == (
        "2 leased + 0 queued + buffer 0 = 2, kept at 20: the highest within stabilization 5m"
    )


def test_unknown_demand_is_not_recorded_but_keeps_a_recent_higher_size() -> None:
    record = Stabilization()
    record.apply(desired_from_demand(12, 0, autoscale(), current=0), now=T0, window=300)
    later = T0 + timedelta(minutes=1)
    held = record.apply(desired_from_demand(None, 0, autoscale(), current=9), now=later, window=300)
    assert (held.desired, held.from_demand) == (12, 9)
    assert held.describe() == (
        "demand unknown (its members not known: no listing yet, or it failed): the current 9 held,"
        " kept at 12: the highest within stabilization 5m"
    )
    assert [(s.at, s.desired) for s in record.seen] == [(T0, 12)]
    # Raised by the record, it is still unknown demand: applied again, nothing is recorded.
    record.apply(held, now=later + timedelta(seconds=10), window=300)
    assert [(s.at, s.desired) for s in record.seen] == [(T0, 12)]


def test_unknown_demand_is_not_recorded() -> None:
    record = Stabilization()
    held = desired_from_demand(None, 0, autoscale(), current=9)
    assert record.apply(held, now=T0, window=300).desired == 9
    assert record.seen == []


@PROPERTY
@given(
    window=st.sampled_from([0, 30, 300, 3600]),
    steps=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 80)), min_size=1, max_size=80),
)
def test_stabilization_never_drops_below_a_size_wanted_within_it(
    window: int, steps: list[tuple[int, int]]
) -> None:
    record = Stabilization()
    seen: list[tuple[datetime, int]] = []
    now = T0
    spec = autoscale(maxReplicas=80)
    for gap, leased in steps:
        now += timedelta(seconds=gap)
        seen.append((now, leased))
        size = record.apply(desired_from_demand(leased, 0, spec, current=0), now=now, window=window)
        recent = [d for at, d in seen if (now - at).total_seconds() < window] + [leased]
        assert size.desired >= max(recent)
        assert size.desired <= max(d for _, d in seen)  # never a size nobody wanted
        assert len(record.seen) <= KEPT
    # Once a whole window has passed on one size, that size is the answer.
    last = steps[-1][1]
    for later in (now + timedelta(seconds=1), now + timedelta(seconds=window + 1)):
        size = record.apply(desired_from_demand(last, 0, spec, current=0), now=later, window=window)
    assert size.desired == last


# ---------------------------------------------------------------- the schedule

FRIDAY_BERLIN = ScheduleWindow.model_validate(
    {"cron": "0 18 * * fri", "duration": "6h", "minReplicas": 60, "timeZone": "Europe/Berlin"}
)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_friday_window_in_berlin_opens_at_18_local_on_both_sides_of_the_clock_change() -> None:
    # 2026-10-25: Berlin goes from CEST (UTC+2) back to CET (UTC+1).
    before = active_window([FRIDAY_BERLIN], z("2026-10-23T15:59:00"))
    assert before.active is None and before.floor == 0
    assert before.next is not None and before.next.start == z("2026-10-23T16:00:00")
    opened = active_window([FRIDAY_BERLIN], z("2026-10-23T16:00:00"))
    assert opened.active is not None and opened.floor == 60
    assert (opened.active.start, opened.active.end) == (
        z("2026-10-23T16:00"),
        z("2026-10-23T22:00"),
    )
    assert opened.next is not None and opened.next.start == z("2026-10-30T17:00:00")
    # A week later 16:30 UTC is 17:30 in Berlin: not yet (UTC+2 would have said open).
    not_yet = active_window([FRIDAY_BERLIN], z("2026-10-30T16:30:00"))
    assert not_yet.active is None
    assert not_yet.next is not None and not_yet.next.start == z("2026-10-30T17:00:00")
    assert active_window([FRIDAY_BERLIN], z("2026-10-30T17:00:00")).floor == 60
    assert active_window([FRIDAY_BERLIN], z("2026-10-30T22:59:59")).floor == 60
    assert active_window([FRIDAY_BERLIN], z("2026-10-30T23:00:00")).floor == 0


def test_a_window_across_the_change_lasts_its_duration_in_elapsed_time() -> None:
    weekend = FRIDAY_BERLIN.model_copy(update={"duration": 54 * 3600.0})
    # Friday 18:00 CEST + 54h is Sunday 23:00 CET (the clocks went back an hour on the way).
    assert active_window([weekend], z("2026-10-25T21:59:00")).floor == 60
    assert active_window([weekend], z("2026-10-25T22:00:00")).floor == 0
    # Spring: 2026-03-29 Berlin goes to CEST; Friday 18:00 CET is 17:00 UTC.
    assert active_window([weekend], z("2026-03-27T16:59:00")).floor == 0
    assert active_window([weekend], z("2026-03-27T17:00:00")).floor == 60
    assert active_window([weekend], z("2026-03-29T22:59:00")).floor == 60
    assert active_window([weekend], z("2026-03-29T23:00:00")).floor == 0


def test_a_time_the_clocks_skip_fires_after_the_gap_and_one_they_repeat_fires_once() -> None:
    nightly = ScheduleWindow.model_validate(
        {"cron": "30 2 * * *", "duration": "10m", "minReplicas": 3, "timeZone": "Europe/Berlin"}
    )
    # 2026-03-29: 02:00 to 03:00 does not happen in Berlin; the window opens at 03:00 CEST.
    spring = active_window([nightly], z("2026-03-29T01:05:00")).active
    assert spring is not None and spring.start == z("2026-03-29T01:00:00")
    # 2026-10-25: 02:00 to 03:00 happens twice; the window opens on the first only.
    autumn = active_window([nightly], z("2026-10-25T00:35:00")).active
    assert autumn is not None and autumn.start == z("2026-10-25T00:30:00")
    assert active_window([nightly], z("2026-10-25T01:35:00")).active is None


def test_the_highest_floor_in_force_wins_and_the_next_start_is_the_soonest() -> None:
    daily = ScheduleWindow.model_validate({"cron": "0 * * * *", "duration": "3h", "minReplicas": 4})
    now = z("2026-10-23T16:30:00")
    found = active_window([daily, FRIDAY_BERLIN], now)
    assert found.active is not None
    assert (found.active.index, found.floor) == (1, 60)
    assert found.next is not None and (found.next.index, found.next.start) == (
        0,
        z("2026-10-23T17:00"),
    )
    # Overlapping starts of one window: the latest start is the one in force.
    alone = active_window([daily], now)
    assert alone.active is not None
    assert (alone.active.start, alone.active.end) == (z("2026-10-23T16:00"), z("2026-10-23T19:00"))
    assert active_window([], now) == ScheduleNow()


def test_warm_start_is_one_minute_per_window_of_creates_plus_a_boot() -> None:
    start = z("2026-10-23T16:00:00")
    assert warm_start(start, 60, 20, 45) == start - timedelta(minutes=3, seconds=45)
    assert warm_start(start, 61, 20, 45) == start - timedelta(minutes=4, seconds=45)
    assert warm_start(start, 0, 20, 45) == start
    assert warm_start(start, -3, 20, 45) == start
    with pytest.raises(ValueError, match="creates_per_minute"):
        warm_start(start, 5, 0, 45)
    with pytest.raises(ValueError, match="boot_seconds"):
        warm_start(start, 5, 20, -1)


def test_the_schedule_floor_applies_from_the_warm_start_before_a_window() -> None:
    pace = {"creates_per_minute": 20, "boot_seconds": 45}
    warm = z("2026-10-23T15:56:15")
    assert schedule_floor([FRIDAY_BERLIN], warm - timedelta(seconds=1), **pace) == 0
    assert schedule_floor([FRIDAY_BERLIN], warm, **pace) == 60
    assert schedule_floor([FRIDAY_BERLIN], z("2026-10-23T21:59:00"), **pace) == 60
    assert schedule_floor([FRIDAY_BERLIN], z("2026-10-23T22:00:00"), **pace) == 0
    assert schedule_floor([], warm, **pace) == 0


# ---------------------------------------------------------------- who may go


def test_only_unleased_devices_idle_long_enough_may_go_oldest_idle_first() -> None:
    idle_since = {
        "a": T0 - timedelta(minutes=9),
        "b": T0 - timedelta(minutes=20),
        "c": T0 - timedelta(minutes=30),  # leased: never
        "d": T0 - timedelta(minutes=4),  # not idle long enough yet
        "e": T0 - timedelta(minutes=9),
    }
    devices = ["a", "b", "c", "d", "e", "f"]  # f: never seen idle, so not known to be
    assert may_go(devices, {"c"}, idle_since, 300, T0) == ["b", "a", "e"]
    assert next_may_go(devices, {"c"}, idle_since, 300, T0) == T0 + timedelta(minutes=1)
    assert next_may_go(["a"], set(), idle_since, 300, T0) is None


@PROPERTY
@given(
    idle=st.dictionaries(
        st.sampled_from("abcdefghij"),
        st.integers(-3600, 600).map(lambda s: T0 + timedelta(seconds=s)),
    ),
    leased=st.sets(st.sampled_from("abcdefghij")),
    after=st.sampled_from([0, 60, 300, 1800]),
)
def test_may_go_never_takes_a_leased_device_nor_one_idle_too_briefly(
    idle: dict[str, datetime], leased: set[str], after: int
) -> None:
    devices = list("abcdefghij")
    going = may_go(devices, leased, idle, after, T0)
    assert not set(going) & leased
    assert all((T0 - idle[d]).total_seconds() >= after for d in going)
    eligible = {
        d for d, at in idle.items() if d not in leased and (T0 - at).total_seconds() >= after
    }
    assert set(going) == eligible
    assert [idle[d] for d in going] == sorted(idle[d] for d in going)
    due = next_may_go(devices, leased, idle, after, T0)
    waiting = [at + timedelta(seconds=after) for d, at in idle.items() if d not in leased]
    assert due == min((w for w in waiting if w > T0), default=None)


def test_a_long_fall_is_kept_within_bounds_and_never_below_the_window_s_highest() -> None:
    record = Stabilization()
    spec = autoscale(maxReplicas=80)
    for step, leased in enumerate(range(60, 0, -1)):
        now = T0 + timedelta(seconds=step)
        size = record.apply(desired_from_demand(leased, 0, spec, current=0), now=now, window=300)
        assert size.desired == 60  # every size of the fall is within the window
        assert len(record.seen) <= KEPT
    # A merged size is held a little longer than wanted, never shorter, and then lets go.
    later = T0 + timedelta(seconds=59 + 300)
    size = record.apply(desired_from_demand(1, 0, spec, current=0), now=later, window=300)
    assert size.desired == 1
