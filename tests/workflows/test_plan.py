"""The pure planning step (workflows/pool/plan.py): examples first, then hypothesis properties.

Nothing here touches Temporal: none of the session fixtures in conftest.py
(`env`, `worker`, `emulator`, `control`) is requested, so no server starts.
The properties check the planner against an oracle written independently from
DESIGN.md ("How a pool converges"), not against the planner's own helpers.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.activities.models import (
    BUSY,
    DEVICE_STATUSES,
    FAILED,
    OFFLINE,
    PROVISIONING,
    READY,
    REBOOTING,
    TERMINATED,
    TERMINATING,
    DeviceInfo,
)
from devicepool.workflows.pool.plan import Plan, plan_pool

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
# What counts toward `replicas`, per DESIGN.md: alive and not being removed.
COUNTED = {PROVISIONING, READY, BUSY, OFFLINE, REBOOTING}


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def dev(
    id: str,
    status: str = READY,
    *,
    created: float = 3600,
    updated: float | None = None,
    activity: float | None = None,
    session: bool = False,
) -> DeviceInfo:
    """A device; times are seconds before NOW (None leaves the field unset)."""
    return DeviceInfo(
        id=id,
        status=status,
        created_at=ago(created),
        updated_at=None if updated is None else ago(updated),
        last_activity_at=None if activity is None else ago(activity),
        session_active=session,
    )


def plan(
    replicas: int,
    devices: list[DeviceInfo],
    *,
    in_flight: int = 0,
    idle_grace: timedelta = GRACE,
    allow_create: bool = True,
) -> Plan:
    return plan_pool(
        replicas=replicas,
        devices=devices,
        in_flight=in_flight,
        now=NOW,
        idle_grace=idle_grace,
        allow_create=allow_create,
    )


def ready(n: int, *, prefix: str = "r", created: float = 3600) -> list[DeviceInfo]:
    """n idle ready devices, r0 the oldest."""
    return [dev(f"{prefix}{i}", created=created - i) for i in range(n)]


# ---------------------------------------------------------------- examples: scaling


def test_empty_pool_scaled_from_zero_creates_all() -> None:
    p = plan(5, [])
    assert p.create == 5
    assert p.terminate == []
    assert p.remove_failed == []
    assert p.members == 0
    assert p.blocked_surplus == 0
    assert p.next_idle_at is None


def test_zero_replicas_and_no_devices_is_a_no_op() -> None:
    p = plan(0, [])
    assert (p.create, p.terminate, p.members, p.blocked_surplus) == (0, [], 0, 0)


def test_at_size_plans_nothing() -> None:
    p = plan(3, ready(3))
    assert p.create == 0
    assert p.terminate == []
    assert p.members == 3
    assert p.blocked_surplus == 0


def test_scale_up_creates_only_the_difference() -> None:
    p = plan(10, ready(4))
    assert p.create == 6
    assert p.terminate == []
    assert p.members == 4


def test_scale_down_terminates_oldest_idle_first() -> None:
    devices = [
        dev("young", created=100),
        dev("oldest", created=9000),
        dev("middle", created=5000),
        dev("older", created=7000),
    ]
    p = plan(2, devices)
    assert p.create == 0
    assert p.terminate == ["oldest", "older"]
    assert p.blocked_surplus == 0


def test_equal_creation_times_break_ties_by_id() -> None:
    devices = [dev(i, created=600) for i in ("c", "a", "b")]
    assert plan(1, devices).terminate == ["a", "b"]


def test_scale_to_zero_removes_every_idle_or_booting_device_but_no_busy_one() -> None:
    devices = [*ready(3), dev("b0", BUSY, session=True), dev("p0", PROVISIONING)]
    p = plan(0, devices)
    assert p.terminate == ["p0", "r0", "r1", "r2"]
    assert p.create == 0
    # the busy one remains above size, and the plan says so
    assert p.blocked_surplus == 1


# ---------------------------------------------------------------- examples: what goes first (issue 15)


def test_scale_down_removes_a_booting_device_before_a_ready_one() -> None:
    # 6 -> 5 with one device still provisioning: it goes, the five serving stay.
    p = plan(5, [*ready(5), dev("p", PROVISIONING, created=10)])
    assert p.terminate == ["p"]
    assert p.blocked_surplus == 0


def test_booting_devices_go_newest_first_then_idle_oldest_first() -> None:
    devices = [
        dev("p-old", PROVISIONING, created=50),
        dev("p-new", PROVISIONING, created=5),
        *ready(2),
        dev("b", BUSY, session=True),
    ]
    assert plan(2, devices).terminate == ["p-new", "p-old", "r0"]
    assert plan(4, devices).terminate == ["p-new"]


def test_a_booting_device_in_session_and_a_rebooting_one_are_never_removed() -> None:
    devices = [dev("p", PROVISIONING, session=True), dev("rb", REBOOTING)]
    p = plan(0, devices)
    assert p.terminate == []
    assert p.blocked_surplus == 2


def test_counts_say_what_exists_at_the_provider_and_pending_creates_apart() -> None:
    # 15 devices exist, 80 creates are planned or waiting for the window.
    devices = [dev(f"p{i}", PROVISIONING) for i in range(15)]
    p = plan(95, devices, in_flight=80)
    assert p.counts["provisioning"] == 15
    assert p.counts["pending"] == 80


# ---------------------------------------------------------------- examples: in-flight creates


def test_in_flight_creates_prevent_double_creation() -> None:
    p = plan(5, ready(2), in_flight=3)
    assert p.create == 0
    assert p.members == 5


def test_in_flight_creates_reduce_create_count() -> None:
    p = plan(10, ready(2), in_flight=3)
    assert p.create == 5
    assert p.members == 5


def test_in_flight_beyond_replicas_counts_as_surplus() -> None:
    # Scaled down from 5 to 3 while 2 creates were still running: the 2 extra
    # must come off the idle devices, or the pool settles at 5.
    p = plan(3, ready(3), in_flight=2)
    assert p.create == 0
    assert p.terminate == ["r0", "r1"]
    assert p.blocked_surplus == 0


def test_in_flight_surplus_with_nothing_idle_is_blocked_without_a_wake_up() -> None:
    p = plan(0, [], in_flight=4)
    assert p.create == 0
    assert p.terminate == []
    assert p.blocked_surplus == 4
    assert p.next_idle_at is None


# ---------------------------------------------------------------- examples: idle grace


def test_grace_period_blocks_then_next_idle_at_says_when() -> None:
    devices = [dev("recent", activity=20), dev("quiet", activity=45)]
    p = plan(0, devices)
    assert p.terminate == []
    assert p.blocked_surplus == 2
    # "quiet" went quiet 45 s ago; with a 60 s grace it is idle 15 s from now
    assert p.next_idle_at == NOW + timedelta(seconds=15)


def test_after_the_grace_period_the_same_device_is_terminated() -> None:
    devices = [dev("quiet", activity=45)]
    blocked = plan(0, devices)
    assert blocked.next_idle_at is not None
    later = plan_pool(
        replicas=0,
        devices=devices,
        in_flight=0,
        now=blocked.next_idle_at,
        idle_grace=GRACE,
    )
    assert later.terminate == ["quiet"]
    assert later.blocked_surplus == 0
    assert later.next_idle_at is None


def test_grace_boundary_is_inclusive() -> None:
    assert plan(0, [dev("edge", activity=60)]).terminate == ["edge"]
    assert plan(0, [dev("inside", activity=59.999)]).terminate == []


def test_zero_grace_makes_every_sessionless_ready_device_idle() -> None:
    p = plan(0, [dev("just-now", activity=0)], idle_grace=timedelta(0))
    assert p.terminate == ["just-now"]


def test_idle_clock_falls_back_to_updated_then_created() -> None:
    devices = [
        dev("by-updated", created=9000, updated=10),  # touched 10 s ago: not idle
        dev("by-created", created=30),  # created 30 s ago, never touched: not idle
        dev("old", created=9000, updated=600),
    ]
    p = plan(0, devices)
    assert p.terminate == ["old"]
    assert p.next_idle_at == NOW + timedelta(seconds=30)  # by-created: 30 s + 60 s grace


def test_last_activity_wins_over_a_later_update() -> None:
    # A status heartbeat (updated_at) does not restart the idle clock when the
    # provider reports when the last session activity was.
    p = plan(0, [dev("d", created=9000, updated=5, activity=900)])
    assert p.terminate == ["d"]


def test_blocked_surplus_waits_on_the_soonest_device_only_among_sessionless_ready() -> None:
    devices = [
        dev("busy", BUSY, session=True, activity=1),
        dev("in-session", READY, session=True, activity=59),
        dev("soon", activity=50),
        dev("later", activity=5),
    ]
    p = plan(0, devices)
    assert p.terminate == []
    assert p.next_idle_at == NOW + timedelta(seconds=10)


def test_next_idle_at_is_none_when_surplus_is_fully_removed() -> None:
    devices = [*ready(2), dev("recent", activity=1)]
    p = plan(1, devices)
    assert p.terminate == ["r0", "r1"]
    assert p.blocked_surplus == 0
    assert p.next_idle_at is None


def test_next_idle_at_is_none_when_nothing_can_become_idle() -> None:
    p = plan(0, [dev("b", BUSY, session=True), dev("o", OFFLINE)])
    assert p.blocked_surplus == 2
    assert p.next_idle_at is None


# ---------------------------------------------------------------- examples: statuses


def test_busy_and_session_active_devices_are_never_terminated() -> None:
    devices = [
        dev("busy-old", BUSY, created=99_999, activity=99_999, session=True),
        dev("ready-in-session", READY, created=99_999, activity=99_999, session=True),
        dev("busy-no-session", BUSY, created=99_999, activity=99_999),
    ]
    p = plan(0, devices)
    assert p.terminate == []
    assert p.blocked_surplus == 3


def test_offline_devices_count_but_are_never_terminated_for_scale_down() -> None:
    devices = [
        dev("off-old", OFFLINE, created=99_999, activity=99_999),
        dev("off-older", OFFLINE, created=199_999),
        *ready(1),
    ]
    p = plan(1, devices)
    assert p.members == 3
    assert p.create == 0
    assert p.terminate == ["r0"]
    assert p.blocked_surplus == 1


def test_offline_devices_count_toward_replicas_so_no_extra_create() -> None:
    p = plan(3, [dev("o1", OFFLINE), dev("o2", OFFLINE), *ready(1)])
    assert p.create == 0
    assert p.members == 3


def test_provisioning_and_rebooting_count_and_only_rebooting_is_never_terminated() -> None:
    devices = [dev("p", PROVISIONING, created=99_999), dev("rb", REBOOTING, created=99_999)]
    p = plan(0, devices)
    assert p.members == 2
    assert p.terminate == ["p"]
    assert p.blocked_surplus == 1
    assert plan(2, devices).create == 0


def test_failed_devices_are_removed_oldest_first_and_replaced() -> None:
    devices = [
        dev("f-new", FAILED, created=10),
        dev("f-old", FAILED, created=900),
        *ready(1),
    ]
    p = plan(3, devices)
    assert p.remove_failed == ["f-old", "f-new"]
    assert p.members == 1
    assert p.create == 2
    assert p.terminate == []


def test_failed_devices_are_removed_even_at_zero_replicas_and_not_terminated_twice() -> None:
    p = plan(0, [dev("f", FAILED, created=99_999, activity=99_999)])
    assert p.remove_failed == ["f"]
    assert p.terminate == []
    assert p.blocked_surplus == 0


def test_terminating_and_terminated_devices_are_not_counted() -> None:
    devices = [dev("t1", TERMINATING), dev("t2", TERMINATED), *ready(1)]
    p = plan(2, devices)
    assert p.members == 1
    assert p.create == 1
    assert p.terminate == []
    assert p.remove_failed == []


def test_allow_create_false_plans_no_creates_but_still_scales_down() -> None:
    assert plan(10, ready(2), allow_create=False).create == 0
    down = plan(1, ready(3), allow_create=False)
    assert down.create == 0
    assert down.terminate == ["r0", "r1"]


def test_counts() -> None:
    devices = [
        *ready(2),
        dev("b", BUSY, session=True),
        dev("p", PROVISIONING),
        dev("rb", REBOOTING),
        dev("o1", OFFLINE),
        dev("o2", OFFLINE),
        dev("f", FAILED),
        dev("t", TERMINATING),
        dev("x", TERMINATED),
    ]
    p = plan(8, devices, in_flight=3)
    assert p.counts == {
        "ready": 2,
        "busy": 1,
        "provisioning": 1 + 1,  # provisioning + rebooting at the provider
        "pending": 3,  # in flight, not seen yet
        "offline": 2,
        "failed": 1,
    }
    assert p.members == 2 + 1 + 1 + 1 + 2 + 3
    assert p.create == 0


def test_counts_of_an_empty_pool_are_all_zero() -> None:
    p = plan(0, [])
    assert p.counts == {
        "ready": 0,
        "busy": 0,
        "provisioning": 0,
        "pending": 0,
        "offline": 0,
        "failed": 0,
    }


@pytest.mark.parametrize(
    ("replicas", "in_flight"), [(-1, 0), (0, -1), (-5, -5)], ids=["replicas", "in_flight", "both"]
)
def test_negative_inputs_are_refused(replicas: int, in_flight: int) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        plan(replicas, [], in_flight=in_flight)


def test_plan_does_not_mutate_its_input() -> None:
    devices = [*ready(3), dev("f", FAILED)]
    before = [d.model_copy(deep=True) for d in devices]
    plan(0, devices, in_flight=2)
    assert devices == before


# ---------------------------------------------------------------- hypothesis strategies

# Timestamps cluster on a few exact values so ties (created_at) and grace
# boundaries (now - activity == grace) actually occur; a few seconds in the
# future model provider clock skew.
_SECONDS_AGO = st.one_of(
    st.sampled_from([0, 30, 59, 60, 61, 300, 3600]),
    st.integers(min_value=-5, max_value=7 * 24 * 3600),
)
GRACES = st.sampled_from([0, 1, 30, 60, 300]).map(lambda s: timedelta(seconds=s))


def _device(
    id: str, status: str, session: bool, created: int, updated: int | None, activity: int | None
) -> DeviceInfo:
    # Sessions are mostly on ready/busy devices, but the planner must not trust
    # that, so any status may carry one. Nothing happens before creation.
    return dev(
        id,
        status,
        created=created,
        updated=None if updated is None else min(updated, created),
        activity=None if activity is None else min(activity, created),
        session=session,
    )


def devices_st(max_size: int = 20) -> st.SearchStrategy[list[DeviceInfo]]:
    # Ids follow list position, which is unrelated to the drawn creation times,
    # so id order and age order disagree as often as they agree.
    row = st.tuples(
        st.sampled_from(DEVICE_STATUSES),
        st.booleans(),
        _SECONDS_AGO,
        st.none() | _SECONDS_AGO,
        st.none() | _SECONDS_AGO,
    )
    return st.lists(row, max_size=max_size).map(
        lambda rows: [_device(f"dev-{i:02d}", *r) for i, r in enumerate(rows)]
    )


REPLICAS = st.one_of(
    st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=500)
)
IN_FLIGHT = st.integers(min_value=0, max_value=50)
PROPERTY = settings(max_examples=200, deadline=None)


# The oracle, from DESIGN.md, independent of workflows/pool/plan.py's helpers.


def last_active(d: DeviceInfo) -> datetime:
    if d.last_activity_at is not None:
        return d.last_activity_at
    if d.updated_at is not None:
        return d.updated_at
    return d.created_at


def oracle_idle(d: DeviceInfo, grace: timedelta) -> bool:
    return d.status == READY and not d.session_active and NOW - last_active(d) >= grace


def idle_oldest_first(devices: list[DeviceInfo], grace: timedelta) -> list[str]:
    idle = [d for d in devices if oracle_idle(d, grace)]
    return [d.id for d in sorted(idle, key=lambda d: (d.created_at, d.id))]


def oracle_booting(d: DeviceInfo) -> bool:
    return d.status == PROVISIONING and not d.session_active


def removal_order(devices: list[DeviceInfo], grace: timedelta) -> list[str]:
    """What a surplus removes, in order: booting newest first, then idle oldest first."""
    booting = sorted(
        (d for d in devices if oracle_booting(d)), key=lambda d: (d.created_at, d.id), reverse=True
    )
    return [d.id for d in booting] + idle_oldest_first(devices, grace)


def counted(devices: list[DeviceInfo]) -> int:
    return sum(d.status in COUNTED for d in devices)


# ---------------------------------------------------------------- hypothesis properties
#
# Hypothesis spends its time drawing device lists, not planning, so each test
# below draws one case and checks a group of related properties on it (one
# `check_*` function per property, so a failure still names the rule broken).


@dataclass(frozen=True)
class Case:
    devices: list[DeviceInfo]
    replicas: int
    in_flight: int
    grace: timedelta

    def plan(self, **overrides: Any) -> Plan:
        args: dict[str, Any] = {
            "replicas": self.replicas,
            "devices": self.devices,
            "in_flight": self.in_flight,
            "now": NOW,
            "idle_grace": self.grace,
        }
        return plan_pool(**{**args, **overrides})

    @property
    def members(self) -> int:
        return counted(self.devices) + self.in_flight

    @property
    def surplus(self) -> int:
        return max(0, self.members - self.replicas)


CASES = st.builds(Case, devices=devices_st(), replicas=REPLICAS, in_flight=IN_FLIGHT, grace=GRACES)


def check_never_terminates_a_device_that_is_not_idle(c: Case, p: Plan) -> None:
    by_id = {d.id: d for d in c.devices}
    assert len(set(p.terminate)) == len(p.terminate), "duplicate termination"
    for id in p.terminate:
        d = by_id[id]
        assert d.status in (READY, PROVISIONING), f"terminates a serving or broken device {d}"
        assert not d.session_active, f"terminates a device in session {d}"
        if d.status == READY:
            assert NOW - last_active(d) >= c.grace, f"terminates inside the grace period {d}"


def check_terminations_are_booting_then_the_oldest_idle_devices(c: Case, p: Plan) -> None:
    order = removal_order(c.devices, c.grace)
    assert p.terminate == order[: len(p.terminate)], "not booting newest-first, then idle oldest"
    # ...and as many of them as the surplus allows, not fewer
    assert len(p.terminate) == min(c.surplus, len(order)), "leaves removable surplus"


def check_terminate_is_bounded_by_surplus_and_the_rest_is_blocked(c: Case, p: Plan) -> None:
    assert len(p.terminate) <= c.surplus
    assert p.blocked_surplus == c.surplus - len(p.terminate)
    assert p.blocked_surplus >= 0


def check_never_plans_more_than_replicas_counting_in_flight(c: Case, p: Plan) -> None:
    assert p.members == c.members
    assert p.create >= 0
    assert c.members + p.create <= max(c.replicas, c.members)
    if p.create:
        assert c.members + p.create == c.replicas
        assert p.terminate == []
        assert p.blocked_surplus == 0
    else:
        assert c.members >= c.replicas


def check_failed_are_removed_oldest_first(c: Case, p: Plan) -> None:
    failed = [d for d in c.devices if d.status == FAILED]
    assert p.remove_failed == [d.id for d in sorted(failed, key=lambda d: (d.created_at, d.id))]
    assert not set(p.remove_failed) & set(p.terminate)


def check_failed_and_terminating_are_never_counted(c: Case, p: Plan) -> None:
    # Dropping failed / terminating / terminated devices changes nothing but remove_failed.
    kept = [d for d in c.devices if d.status not in (FAILED, TERMINATING, TERMINATED)]
    q = c.plan(devices=kept)
    assert (p.members, p.create, p.terminate, p.blocked_surplus, p.next_idle_at) == (
        q.members,
        q.create,
        q.terminate,
        q.blocked_surplus,
        q.next_idle_at,
    )


def check_counts_add_up(c: Case, p: Plan) -> None:
    assert p.counts["failed"] == len(p.remove_failed)
    served = p.counts["ready"] + p.counts["busy"] + p.counts["offline"]
    # provisioning (and rebooting) exist at the provider; pending are in flight
    assert p.counts["pending"] == c.in_flight
    assert served + p.counts["provisioning"] + p.counts["pending"] == p.members


def check_next_idle_at_is_when_the_first_waiting_device_turns_idle(c: Case, p: Plan) -> None:
    if not p.blocked_surplus:
        assert p.next_idle_at is None
        return
    waiting = [
        last_active(d) + c.grace
        for d in c.devices
        if d.status == READY and not d.session_active and not oracle_idle(d, c.grace)
    ]
    assert p.next_idle_at == (min(waiting) if waiting else None)
    if p.next_idle_at is not None:
        assert p.next_idle_at > NOW
        # Re-planning at that moment frees at least one more device.
        assert len(c.plan(now=p.next_idle_at).terminate) > len(p.terminate)


def check_applying_the_plan_converges(c: Case, p: Plan) -> None:
    """Once the plan is carried out, a re-plan asks for nothing more (bar blocked surplus)."""
    gone = set(p.terminate) | set(p.remove_failed)
    after = [d for d in c.devices if d.id not in gone]
    q = c.plan(devices=after, in_flight=c.in_flight + p.create)
    assert (q.create, q.terminate, q.remove_failed) == (0, [], [])
    assert q.blocked_surplus == p.blocked_surplus


@PROPERTY
@given(case=CASES)
def test_terminations_are_safe_oldest_first_and_bounded(case: Case) -> None:
    p = case.plan()
    check_never_terminates_a_device_that_is_not_idle(case, p)
    check_terminations_are_booting_then_the_oldest_idle_devices(case, p)
    check_terminate_is_bounded_by_surplus_and_the_rest_is_blocked(case, p)
    check_next_idle_at_is_when_the_first_waiting_device_turns_idle(case, p)


@PROPERTY
@given(case=CASES)
def test_pool_size_and_statuses(case: Case) -> None:
    p = case.plan()
    check_never_plans_more_than_replicas_counting_in_flight(case, p)
    check_failed_are_removed_oldest_first(case, p)
    check_failed_and_terminating_are_never_counted(case, p)
    check_counts_add_up(case, p)
    check_applying_the_plan_converges(case, p)


@PROPERTY
@given(case=CASES)
def test_zero_replicas_removes_every_idle_or_booting_device(case: Case) -> None:
    p = case.plan(replicas=0)
    assert p.create == 0
    assert p.terminate == removal_order(case.devices, case.grace)
    assert p.blocked_surplus == case.members - len(p.terminate)


@PROPERTY
@given(case=CASES, seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_allow_create_false_and_listing_order_change_nothing_else(case: Case, seed: int) -> None:
    p = case.plan()
    no_create = case.plan(allow_create=False)
    assert no_create.create == 0
    assert no_create == dataclasses.replace(p, create=0)
    shuffled = list(case.devices)
    random.Random(seed).shuffle(shuffled)
    assert case.plan(devices=shuffled) == p


def test_devices_created_but_not_listed_count_but_are_never_picked() -> None:
    # 5 listed and ready, 1 created but not listed yet (a lagging listing), replicas 5:
    # nothing to create, and the surplus waits for the listing instead of taking a
    # serving device (once listed, booting, it goes first).
    p = plan_pool(replicas=5, devices=ready(5), in_flight=0, now=NOW, idle_grace=GRACE, unseen=1)
    assert (p.create, p.terminate, p.blocked_surplus) == (0, [], 0)
    assert p.members == 6 and p.counts["pending"] == 1
    # They still keep the pool from renting them again.
    grown = plan_pool(
        replicas=7, devices=ready(5), in_flight=0, now=NOW, idle_grace=GRACE, unseen=1
    )
    assert grown.create == 1


# ---------------------------------------------------------------- the spend cap


@PROPERTY
@given(case=CASES, cap=st.integers(min_value=0, max_value=40))
def test_a_spend_cap_only_holds_creates_back(case: Case, cap: int) -> None:
    uncapped, capped = case.plan(), case.plan(cap=cap)
    billing = case.members + sum(d.status == FAILED for d in case.devices)
    # No create takes the devices that bill past the cap...
    assert capped.create == min(uncapped.create, max(0, cap - billing))
    assert billing + capped.create <= max(cap, billing)
    # ...the rest is said as held back, and nothing else changes: a cap never terminates.
    assert capped.capped == uncapped.create - capped.create
    assert capped == dataclasses.replace(uncapped, create=capped.create, capped=capped.capped)


def test_a_cap_below_what_runs_keeps_every_device_and_creates_none() -> None:
    p = plan(10, ready(6))
    capped = plan_pool(replicas=10, devices=ready(6), in_flight=0, now=NOW, idle_grace=GRACE, cap=4)
    assert (p.create, capped.create, capped.capped, capped.terminate) == (4, 0, 4, [])
    # A failed device bills until it is gone: its replacement waits for the room.
    failed = [*ready(3), dev("f", FAILED)]
    held = plan_pool(replicas=4, devices=failed, in_flight=0, now=NOW, idle_grace=GRACE, cap=4)
    assert (held.create, held.capped, held.remove_failed) == (0, 1, ["f"])
