"""The autoscaler's step in the pass (`reconciler/autoscaling.py`), pure: the size it writes,
who may go, what counts as demand, and when it wakes the pool."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from devicepool.api.autoscale import AutoscaleSpec, ScheduleWindow
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.reconciler.autoscaling import (
    WARM_BOOT_SECONDS,
    WARM_CREATES_PER_MINUTE,
    keep_size,
    kept_from_scale_down,
    queued_demand,
    resize,
    scale_refusal,
    schedule_shown,
    track_idle,
)
from devicepool.workflows.reconciler.demand import Stabilization
from devicepool.workflows.reconciler.lease_records import Ticket

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # a Friday
SPEC = AutoscaleSpec.model_validate(
    {"maxReplicas": 10, "scaleDownAfter": "5m", "stabilization": "0s"}
)


def sized(**given: Any) -> Any:
    args: dict[str, Any] = {
        "autoscale": SPEC,
        "schedule": (),
        "leased": 0,
        "queued": 0,
        "members": [],
        "leases": (),
        "idle_since": {},
        "stabilization": Stabilization(),
        "current": 0,
        "now": T0,
    }
    return resize(**{**args, **given})


def test_tickets_at_zero_grow_the_pool_at_once() -> None:
    assert sized(queued=20).target == 10  # held to maxReplicas
    assert sized(queued=3, autoscale=SPEC.model_copy(update={"idle_buffer": 2})).target == 5


def test_only_devices_idle_for_scale_down_after_go() -> None:
    members = ["a", "b", "c"]
    idle = {"a": T0 - timedelta(minutes=10), "b": T0 - timedelta(minutes=1)}
    # c is leased; b idle 1 min; only a may go: 3 -> 2, and the pool wakes when b may go.
    got = sized(leased=1, members=members, leases={"c"}, idle_since=idle, current=3)
    assert got.sizing.desired == 1
    assert (got.target, got.held_for_idle) == (2, 1)
    assert got.wake == T0 + timedelta(minutes=4)
    # Creates not landed yet go first: 5 wanted before, 3 members, none idle long enough.
    got = sized(members=members, leases=(), idle_since={}, current=5)
    assert got.target == 3


def test_unknown_members_or_demand_never_shrink_the_pool() -> None:
    """A worker's restart, a listing not read: the size is held."""
    got = sized(leased=None, queued=None, members=None, current=4)
    assert got.target == 4
    got = sized(leased=0, queued=0, members=None, current=4)
    assert got.target == 4


def test_a_schedule_warms_the_pool_before_its_window() -> None:
    window = ScheduleWindow.model_validate(
        {"cron": "0 18 * * fri", "duration": "1h", "minReplicas": 8}
    )
    lead = timedelta(minutes=1, seconds=WARM_BOOT_SECONDS)  # 8 at 10 a minute
    assert WARM_CREATES_PER_MINUTE >= 8
    opens = T0.replace(hour=18)
    before = sized(schedule=[window], now=opens - lead - timedelta(seconds=1))
    assert before.target == 0
    assert before.wake == opens - lead
    warming = sized(schedule=[window], now=opens - lead)
    assert warming.target == 8
    inside = sized(schedule=[window], now=opens + timedelta(minutes=5), current=8)
    assert inside.target == 8
    assert schedule_shown(inside.schedule) == "schedule[0]: at least 8 until 2026-12-04T19:00:00Z"
    assert inside.wake == opens + timedelta(hours=1)


def test_each_window_of_a_schedule_wakes_the_pool_for_its_own_warm_up() -> None:
    """A later, larger window must start growing before a sooner, smaller one's warm-up: the
    wake is the soonest of every window's."""
    spec = SPEC.model_copy(update={"max_replicas": 500})
    small = ScheduleWindow.model_validate(
        {"cron": "0 18 * * fri", "duration": "1h", "minReplicas": 1}
    )
    large = ScheduleWindow.model_validate(
        {"cron": "5 18 * * fri", "duration": "1h", "minReplicas": 300}
    )
    # 300 at 10 a minute, then a boot: 32 minutes before 18:05.
    warms = T0.replace(hour=17, minute=33)
    early = sized(autoscale=spec, schedule=[small, large], now=T0.replace(hour=17))
    assert early.target == 0
    assert early.wake == warms
    assert sized(autoscale=spec, schedule=[small, large], now=warms).target == 300


def test_a_pass_while_a_window_warms_times_its_opening_and_its_end() -> None:
    """Grown to the floor before the window opens, the pool may go quiet: the window's start
    and end are still timed, and an open window's end always is."""
    window = ScheduleWindow.model_validate(
        {"cron": "0 18 * * fri", "duration": "1h", "minReplicas": 8}
    )
    opens = T0.replace(hour=18)
    warming = sized(schedule=[window], now=opens - timedelta(minutes=1), current=8)
    assert warming.target == 8
    assert warming.wake == opens
    opened = sized(schedule=[window], now=opens, current=8)
    assert opened.wake == opens + timedelta(hours=1)
    # Two windows in force: each one's end is timed, not only the highest floor's.
    short = ScheduleWindow.model_validate(
        {"cron": "30 18 * * fri", "duration": "10m", "minReplicas": 2}
    )
    both = sized(schedule=[window, short], now=opens + timedelta(minutes=35), current=8)
    assert both.wake == opens + timedelta(minutes=40)


def test_stabilization_holds_a_scale_down() -> None:
    spec = SPEC.model_copy(update={"stabilization": 600.0})
    book = Stabilization()
    sized(autoscale=spec, queued=6, stabilization=book, current=0)
    members = [f"d{i}" for i in range(6)]
    idle = dict.fromkeys(members, T0 - timedelta(hours=1))
    later = T0 + timedelta(minutes=5)
    got = sized(
        autoscale=spec, stabilization=book, members=members, idle_since=idle, current=6, now=later
    )
    assert got.target == 6
    assert got.wake == T0 + timedelta(minutes=10)


def test_tickets_for_a_named_member_or_never_matching_are_no_demand() -> None:
    def ticket(**selector: str) -> Ticket:
        return Ticket(
            id="t", holder="h", selector=selector, duration=60, created_at=T0, deadline=T0
        )

    tickets = [ticket(), ticket(device="d1"), ticket(profile="p"), ticket(region="mars")]
    assert queued_demand(tickets, lambda sel: sel.get("region") != "mars") == 1


def test_idle_since_is_kept_per_member() -> None:
    old = T0 - timedelta(hours=1)
    got = track_idle(
        {"a": old, "b": old, "gone": old},
        members=["a", "b", "c"],
        free=["a", "c"],
        leased={"b"},
        now=T0,
    )
    assert got == {"a": old, "c": T0}
    assert track_idle({"a": old}, members=None, free=[], leased=set(), now=T0) == {"a": old}


def test_scale_is_refused_and_apply_keeps_the_size() -> None:
    assert scale_refusal(None) is None
    refusal = scale_refusal(SPEC)
    assert refusal is not None and "autoscale.minReplicas/maxReplicas" in refusal
    assert "devicepool apply" in refusal
    base = {"platform": "android", "region": "us-west"}
    applied = DevicePoolSpec.model_validate(
        {**base, "replicas": 50, "autoscale": {"maxReplicas": 9}}
    )
    assert keep_size(3, applied).replicas == 3
    plain = DevicePoolSpec.model_validate({**base, "replicas": 50})
    assert keep_size(3, plain).replicas == 50


def test_a_scale_down_may_pick_only_devices_idle_long_enough() -> None:
    idle = {"a": T0 - timedelta(minutes=10), "b": T0 - timedelta(minutes=1)}
    kept = kept_from_scale_down(
        SPEC, members=["a", "b", "c", "booting"], leases={"c"}, idle_since=idle, now=T0
    )
    assert kept == {"b", "c", "booting"}
    assert kept_from_scale_down(None, members=["a", "b"], leases=(), idle_since={}, now=T0) == set()


def test_each_distinct_selector_is_asked_once() -> None:
    asked: list[dict[str, str]] = []

    def can_serve(selector: Any) -> bool:
        asked.append(dict(selector))
        return True

    tickets = [
        Ticket(
            id=str(i), holder="h", selector={"os": "14"}, duration=60, created_at=T0, deadline=T0
        )
        for i in range(500)
    ]
    assert queued_demand(tickets, can_serve) == 500
    assert asked == [{"os": "14"}]


def test_a_kind_that_drops_its_highest_slots_shrinks_only_while_they_may_go() -> None:
    """A BrowserPool's plan drops the profiles past `replicas`: the pool shrinks by those at
    the head of its order that are idle long enough, and stops at the first that is not."""
    long_ago = T0 - timedelta(hours=1)
    members = ["s0", "s1", "s2", "s3"]
    idle = {"s0": long_ago, "s1": long_ago, "s2": T0 - timedelta(minutes=1), "s3": long_ago}
    order = ["s3", "s2", "s1", "s0"]
    got = sized(members=members, idle_since=idle, current=4, order=order)
    assert got.target == 3  # s3 goes; s2 (idle 1 min) holds s1 and s0
    assert got.wake == T0 + timedelta(minutes=4)
    leased_top = sized(
        members=members, leases={"s3"}, leased=1, idle_since=idle, current=4, order=order
    )
    assert leased_top.target == 4
