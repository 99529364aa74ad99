"""What leaves of the pool's own accord, and what may replace it (review of issue 37's fix).

Pure: `decide`, `plan_pool`, `Lifecycle`, `window_change` and the status called
directly. The sequences: a spend cap with no room beside an expired, replaced or
drifted device (it never went, and the pool listed every 30 s for ever);
`maxSurge` holding repairs and growth with no rollout running; devices the health
check terminated uncounted while they still bill; a scheduled budget's window
found by walking every firing; the `Expired` budget spent by a scale-down.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta

from devicepool.activities.models import BUSY, FAILED, PROVISIONING, TERMINATING
from devicepool.api.v1beta1 import (
    ConditionStatus,
    ConditionType,
    DevicePoolStatus,
    DisruptionBudget,
    Phase,
)
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.lifecycle import Lifecycle, when_idle_said, window_change
from devicepool.workflows.pool.state import PoolState, leaving_by_report
from tests.workflows.test_pool_in_flight import NOW, created, dev, one_pass, spec

# ------------------------------------------------------------------ 1: no room beside


def test_a_cap_with_no_room_beside_an_expired_device_lets_it_go_first() -> None:
    # replicas 3, spendCap 3 devices, d1 past maxAge and idle: no replacement can bill
    # beside it. Before, it was neither terminated nor replaced, for ever.
    devices = [dev("d1", age=7200), dev("d2"), dev("d3")]
    first = one_pass(devices, cap=3, retire=["d1"], reasons={"d1": "Expired"})
    assert (first.terminate, created(first)) == (["d1"], 0)
    assert first.first == {"d1"} and first.reasons == {"d1": "Expired"}
    # Nothing the pool needs to reach its size is held: it is not below it.
    assert first.plan.capped == 0 and first.plan.capped_beside == 1
    # Terminating, it still bills: its replacement waits until it is gone.
    leaving = [dev("d1", TERMINATING, age=7200), dev("d2"), dev("d3")]
    after = one_pass(leaving, cap=3, left=["d1"])
    assert created(after) == 0
    # Held until it is gone, not by a cap below the pool's size.
    assert (after.plan.capped, after.plan.capped_after) == (0, 1)
    assert created(one_pass(leaving[1:], cap=3)) == 1


def test_with_no_room_beside_retiring_devices_go_one_at_a_time() -> None:
    devices = [dev("e1", age=7300), dev("e2", age=7200), dev("c")]
    decision = one_pass(devices, cap=3, retire=["e1", "e2"])
    assert (decision.terminate, created(decision)) == (["e1"], 0)
    # e1 terminating: e2 waits (two below size would be more than one at a time).
    leaving = [dev("e1", TERMINATING, age=7300), dev("e2", age=7200), dev("c")]
    assert one_pass(leaving, cap=3, retire=["e2"], left=["e1"]).terminate == []


def test_a_busy_retiring_device_with_no_room_beside_waits_for_idle() -> None:
    devices = [dev("d1", BUSY, age=7200, session=True), dev("d2"), dev("d3")]
    decision = one_pass(devices, cap=3, retire=["d1"])
    assert (decision.terminate, created(decision)) == ([], 0)


def test_a_rollout_under_a_cap_with_no_room_rolls_a_device_first() -> None:
    # rollout {maxSurge: 1, maxUnavailable: 0} under spendCap 3: the surge can never bill.
    devices = [dev("d1"), dev("d2"), dev("d3")]
    decision = one_pass(devices, cap=3, rolling=["d1"], surge=1, unavailable=0)
    assert (decision.terminate, created(decision)) == (["d1"], 0)
    assert decision.reasons == {"d1": "Drifted"}


def test_room_that_comes_when_a_terminating_device_is_gone_is_waited_for() -> None:
    # cap 4, replicas 3: a scale-down victim still bills; once gone, the replacement of
    # the expired device fits beside it, so it does not go first.
    devices = [dev("d1", age=7200), dev("d2"), dev("d3"), dev("t", TERMINATING)]
    decision = one_pass(devices, cap=4, retire=["d1"])
    assert (decision.terminate, created(decision)) == ([], 0)
    assert created(one_pass(devices[:3], cap=4, retire=["d1"])) == 1


def test_a_pool_whose_replacements_cannot_come_first_is_not_degraded() -> None:
    # It serves all its replicas: Ready, and the condition says what the cap does.
    pool = spec(spendCap={"maxDevices": 3})
    devices = [dev("d1", age=7200), dev("d2"), dev("d3")]
    decision = one_pass(devices, cap=3, retire=["d1"])
    view = st.PoolView(
        spec=pool,
        generation=1,
        plan=decision.plan,
        creating=False,
        device_ids=["d1", "d2", "d3"],
        refs_problems=None,
        backoff=Backoff(),
        health=None,
        now=NOW,
    )
    status = st.published(DevicePoolStatus(), view)
    assert status.phase == Phase.READY
    reached = status.condition(ConditionType.SPEND_CAP_REACHED)
    assert reached is not None and (reached.status, reached.reason) == (
        ConditionStatus.TRUE,
        "NoRoomBeside",
    )
    assert "raise spendCap to grow" not in reached.message
    assert "goes first" in reached.message
    # Gone first, terminating: its replacement waits for that, not for a bigger cap.
    leaving = [dev("d1", TERMINATING, age=7200), dev("d2"), dev("d3")]
    after = one_pass(leaving, cap=3, left=["d1"])
    status = st.published(status, dataclasses.replace(view, plan=after.plan))
    assert status.phase != Phase.DEGRADED
    reached = status.condition(ConditionType.SPEND_CAP_REACHED)
    assert reached is not None and reached.reason == "NoRoomBeside"
    assert "once the provider has terminated it" in reached.message


def test_a_device_that_goes_first_is_said_so() -> None:
    state = PoolState()
    said = state.take_terminations(
        ["d1"],
        only_if_idle={"d1"},
        failed={},
        skipped={},
        devices=[dev("d1")],
        reasons={"d1": "Expired"},
        first={"d1"},
    )
    [event] = said.events
    assert event.reason == "Expired"
    assert "replacement first" not in event.message and "before its replacement" in event.message
    # `replace --when-idle` on a pool with a cap says it may go first.
    capped = when_idle_said("d1", spec(spendCap={"maxDevices": 3}))
    assert "if spendCap leaves no room beside it: it goes, then its replacement" in capped


# ------------------------------------------------------------------ 2: surge bounds rollouts only


def test_max_surge_does_not_hold_repairs_with_no_rollout_running() -> None:
    # rollout {maxSurge: 1} (the default), nothing drifted, three failed devices whose
    # terminations fail: before, one replacement (3/5 while terminations failed).
    devices = [dev("a"), dev("b"), dev("x", FAILED), dev("y", FAILED), dev("z", FAILED)]
    decision = one_pass(devices, replicas=5, doomed=["x", "y", "z"], surge=1, unavailable=0)
    assert created(decision) == 3


def test_max_surge_does_not_hold_a_scale_up() -> None:
    # 10 -> 3 -> 10 while the seven scaled down still terminate: before, one create.
    devices = [dev("a"), dev("b"), dev("c")] + [dev(f"t{i}", TERMINATING) for i in range(7)]
    assert created(one_pass(devices, replicas=10, surge=1, unavailable=0)) == 7


def test_max_surge_zero_does_not_make_a_repair_wait_for_the_failed_device() -> None:
    devices = [dev("a"), dev("b"), dev("x", FAILED)]
    assert created(one_pass(devices, doomed=["x"], surge=0, unavailable=1)) == 1


def test_a_repair_during_a_rollout_goes_ahead_and_the_rollout_waits() -> None:
    # replicas 3, maxSurge 1: "d1" rolls while "x" failed. The repair is made; the
    # rolled device's replacement waits until the failed one is gone (4 bill).
    devices = [dev("d1"), dev("b"), dev("x", FAILED)]
    decision = one_pass(devices, doomed=["x"], rolling=["d1"], surge=1, unavailable=0)
    assert created(decision) == 1
    gone = [dev("d1"), dev("b"), dev("n", PROVISIONING, age=5)]
    assert created(one_pass(gone, rolling=["d1"], surge=1, unavailable=0)) == 1


# ------------------------------------------------------------------ 4: health check's removals


def test_devices_the_health_check_terminated_count_against_the_cap_until_gone() -> None:
    # cap 3, "d" offline; the health check terminated it and reported so. The listing
    # after shows it terminating: it still bills, so its replacement waits.
    listing = [dev("a"), dev("b"), dev("d", TERMINATING)]
    gone = {"d"}
    seen = [d for d in listing if d.id not in gone]  # what the pool goes by
    away = leaving_by_report(listing, gone)
    assert [d.id for d in away] == ["d"]
    decision = one_pass([*seen, *away], cap=3)
    assert created(decision) == 0
    # A listing that started before the termination still shows it offline: it bills.
    assert [d.status for d in leaving_by_report([dev("d", "offline")], gone)] == [TERMINATING]
    # Gone from the listing: its replacement.
    assert leaving_by_report([dev("a"), dev("b")], gone) == []
    assert created(one_pass([dev("a"), dev("b")], cap=3)) == 1


# ------------------------------------------------------------------ 5: a budget's window at once


def test_a_scheduled_budget_window_is_found_in_one_lookup() -> None:
    # "* * * * *" for a year: every firing in the window was walked (about 1 s a wait,
    # inside the workflow task).
    budget = DisruptionBudget.model_validate(
        {"devices": 0, "schedule": "* * * * *", "duration": "8760h"}
    )
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    started = time.perf_counter()
    assert window_change(budget, now) == datetime(2026, 12, 1, 12, 0, tzinfo=UTC) + timedelta(
        hours=8760
    )
    assert time.perf_counter() - started < 0.1


def test_a_budget_window_change_is_its_end_inside_and_the_next_firing_outside() -> None:
    freeze = DisruptionBudget.model_validate(
        {"devices": 0, "schedule": "0 9 * * mon-fri", "duration": "8h"}
    )
    tue = datetime(2026, 12, 1, tzinfo=UTC)
    assert window_change(freeze, tue.replace(hour=12)) == tue.replace(hour=17)
    assert window_change(freeze, tue.replace(hour=9)) == tue.replace(hour=17)  # fires now
    assert window_change(freeze, tue.replace(hour=17)) == tue.replace(day=2, hour=9)
    assert window_change(freeze, tue.replace(hour=8, minute=59)) == tue.replace(hour=9)
    fri = datetime(2026, 12, 4, 18, tzinfo=UTC)
    assert window_change(freeze, fri) == datetime(2026, 12, 7, 9, tzinfo=UTC)
    # Windows longer than the schedule's period overlap: it ends at the last one's end.
    overlapping = DisruptionBudget.model_validate(
        {"devices": 0, "schedule": "0 * * * *", "duration": "90m"}
    )
    assert window_change(overlapping, tue.replace(hour=12, minute=10)) == tue.replace(
        hour=13, minute=30
    )


# ------------------------------------------------------------------ 6: what the Expired budget counts


def test_an_expired_device_scaled_down_does_not_spend_the_expired_budget() -> None:
    # Expired budget 1: "e0" past maxAge was taken by a scale-down and terminates. It is
    # no retirement: "e1" retires. Before, e0 spent the budget and e1 waited.
    pool = spec(
        replicas=2,
        lifetime={"maxAge": "1h"},
        disruption={"budgets": [{"devices": 1, "reasons": ["Expired"]}]},
    )
    devices = [dev("e0", TERMINATING, age=7300), dev("e1", age=7200), dev("c")]
    assert Lifecycle(pool, PoolState(), devices, NOW).retire() == ["e1"]
    # One that left as Expired does spend it, until it is gone.
    state = PoolState()
    state.fates.set(["e0"], Fate.LEFT_EXPIRED)
    assert Lifecycle(pool, state, devices, NOW).retire() == []


def test_a_retired_device_terminated_is_remembered_as_such_until_gone() -> None:
    state = PoolState()
    state.take_terminations(
        ["e1", "s1", "r1"],
        only_if_idle={"e1", "s1", "r1"},
        failed={},
        skipped={},
        devices=[dev("e1"), dev("s1"), dev("r1")],
        reasons={"e1": "Expired", "r1": "Drifted"},
    )
    assert state.fates.root == {"e1": Fate.LEFT_EXPIRED, "r1": Fate.LEFT_DRIFTED}
    state.take_listing([dev("e1", TERMINATING)], reported_gone=())
    assert state.fates.root == {"e1": Fate.LEFT_EXPIRED}


def test_a_scale_down_of_an_expired_device_is_said_as_a_scale_down() -> None:
    # replicas 2, three idle devices, "a" past maxAge but held by a budget (not retired):
    # the scale-down takes it. Before, it was said "Expired ... replacement first".
    devices = [dev("a", age=7200), dev("b"), dev("c")]
    decision = one_pass(devices, replicas=2, reasons={"a": "Expired"})
    assert decision.terminate == ["a"]
    assert decision.reasons == {}
    # Said as a scale-down, but retired: kept for a later create, it came back as new.
    assert decision.retiring == {"a"}
    # A failed device removed is said as removed, whatever its age.
    failed = [dev("x", FAILED, age=7200), dev("b"), dev("c")]
    assert one_pass(failed, doomed=["x"], reasons={"x": "Expired"}).reasons == {}
    # A device forced out past maxAge + gracePeriod is said as expired.
    forced = [dev("f", BUSY, age=9000), dev("b"), dev("c")]
    assert one_pass(forced, doomed=["f"], reasons={"f": "Expired"}).reasons == {"f": "Expired"}


def test_only_what_leaves_of_the_pools_own_accord_is_said_retiring() -> None:
    # An expired or replaced device goes as a scale-down does (only if idle), but is said
    # retiring: an adapter that keeps scaled-down devices for later creates deletes it.
    devices = [dev("d1", age=7200), dev("d2"), dev("d3"), dev("d4", age=60)]
    decision = one_pass(devices, cap=3, retire=["d1"], reasons={"d1": "Expired"})
    assert "d1" in decision.terminate and decision.retiring == {"d1"}
    scaled = one_pass(devices)  # 4 for 3: one scale-down, none retiring
    assert scaled.only_if_idle and scaled.retiring == set()


def test_expired_devices_a_budget_holds_and_a_scale_down_takes_are_retiring() -> None:
    # Three devices rented together expire together; an Expired budget of 1 retires one a
    # pass. The pool goes 3 -> 1 meanwhile: the scale-down takes the other expired ones.
    # Sent without `retiring`, they were parked and served again with their age reset.
    pool = spec(
        replicas=1,
        lifetime={"maxAge": "1h"},
        disruption={"budgets": [{"devices": 1, "reasons": ["Expired"]}]},
    )
    devices = [dev("a", age=7300), dev("b", age=7300), dev("c", age=7300)]
    life = Lifecycle(pool, PoolState(), devices, NOW)
    retire = life.retire()
    assert retire == ["a"]
    decision = one_pass(devices, replicas=1, retire=retire, reasons=life.reasons())
    scaled = [d for d in decision.terminate if d not in retire]
    assert scaled and set(scaled) <= decision.only_if_idle
    assert set(decision.terminate) <= decision.retiring
    assert "a" in decision.reasons and not set(scaled) & set(decision.reasons)
    # A device a person asked to replace when idle is never a scale-down's pick.
    state = PoolState()
    state.control.retiring = ["c"]
    life = Lifecycle(spec(replicas=1), state, devices, NOW)
    asked = one_pass(devices, replicas=1, retire=life.retire(), reasons=life.reasons())
    assert "c" not in asked.plan.terminate
