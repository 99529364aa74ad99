"""What a pass may take away or add counts what is in flight (issue 37, items 6-9 and 13).

Pure: `decide`, `plan_pool`, `wake_after` and `Lifecycle` called directly. Each
sequence is one the issue gives: a rollout above `maxSurge` while a rolled device
is busy, a spend cap crossed by a replacement while a doomed or terminating
device still bills, an `Expired` budget spent per pass instead of at once, a
budget-held scale-down that wakes every second, and expired devices terminated
in the pass that orders their replacements.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from devicepool.activities.models import (
    BUSY,
    PROVISIONING,
    READY,
    TERMINATING,
    DeviceInfo,
    PoolSettings,
    device_template,
    template_hash,
)
from devicepool.api.names import LABEL_TEMPLATE_HASH
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool import events as say
from devicepool.workflows.pool.decide import Decision, wake_after
from devicepool.workflows.pool.fates import Fate, Fates
from devicepool.workflows.pool.lifecycle import Lifecycle
from devicepool.workflows.pool.plan import plan_pool
from devicepool.workflows.pool.state import Control, PoolState, Rollout
from tests.helpers.decisions import decide_pass

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # a Tuesday, noon
SETTINGS = PoolSettings(idle_grace_seconds=0, provision_batch_size=10)


def spec(**changes: object) -> DevicePoolSpec:
    base = {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": 3}
    return DevicePoolSpec.model_validate({**base, **changes})


def dev(
    id: str, status: str = READY, *, age: float = 3600, session: bool = False, hash: str = ""
) -> DeviceInfo:
    """A device created `age` seconds before NOW, idle since then."""
    return DeviceInfo(
        id=id,
        status=status,
        created_at=NOW - timedelta(seconds=age),
        session_active=session,
        labels={LABEL_TEMPLATE_HASH: hash} if hash else {},
    )


def one_pass(
    devices: list[DeviceInfo], *, replicas: int = 3, doomed: Collection[str] = (), **kw: Any
) -> Decision:
    return decide_pass(devices, replicas=replicas, doomed=doomed, settings=SETTINGS, now=NOW, **kw)


def created(decision: Decision) -> int:
    return sum(len(b.slots) for b in decision.batches)


def billed(devices: list[DeviceInfo], decision: Decision) -> int:
    """What bills once the pass is carried out: every device not terminated, plus creates."""
    return len(devices) + created(decision)


# ------------------------------------------------------------------ 6: rollout surge


def test_a_busy_rolled_device_gets_no_replacement_above_max_surge_zero() -> None:
    # replicas 3, rollout {maxSurge: 0, maxUnavailable: 1}: the last drifted device is
    # busy. Its replacement may only come once it is gone; before, it billed 4 for 3
    # for the whole session.
    devices = [dev("old", BUSY, session=True), dev("b", age=60), dev("c", age=60)]
    decision = one_pass(devices, rolling=["old"], surge=0, unavailable=1)
    assert created(decision) == 0
    assert billed(devices, decision) <= 3


def test_an_idle_rolled_device_goes_first_under_max_surge_zero_and_is_replaced_once_gone() -> None:
    devices = [dev("old"), dev("b", age=60), dev("c", age=60)]
    first = one_pass(devices, rolling=["old"], surge=0, unavailable=1)
    assert (first.terminate, created(first)) == (["old"], 0)  # 2 serving: 3 - maxUnavailable
    # Terminating, it still bills: no replacement yet (the pool remembers it was rolled).
    leaving = [dev("old", TERMINATING), dev("b", age=60), dev("c", age=60)]
    assert created(one_pass(leaving, surge=0, unavailable=1, left=["old"])) == 0
    # Gone: its replacement.
    assert created(one_pass(leaving[1:], surge=0, unavailable=1)) == 1


def test_a_terminating_drifted_device_counts_against_max_surge() -> None:
    # maxSurge 1: "d1" was rolled (terminating, still billing), its replacement "n1" serves,
    # "d2" rolls next: its replacement waits until d1 is gone (3 + 1 bill already).
    devices = [dev("d1", TERMINATING), dev("d2"), dev("c"), dev("n1", age=10)]
    decision = one_pass(devices, rolling=["d2"], surge=1, unavailable=0)
    assert created(decision) == 0
    assert billed(devices, decision) <= 4


def test_a_rollout_never_takes_serving_below_replicas_minus_max_unavailable() -> None:
    # maxUnavailable 0: a rolled device goes only when its replacement serves.
    booting = [dev("d1"), dev("d2"), dev("c"), dev("n1", PROVISIONING, age=10)]
    assert one_pass(booting, rolling=["d1"], surge=1, unavailable=0).terminate == []
    serving = [dev("d1"), dev("d2"), dev("c"), dev("n1", age=10)]
    assert one_pass(serving, rolling=["d1"], surge=1, unavailable=0).terminate == ["d1"]


# ------------------------------------------------------------------ 13: replacement first


def test_expired_devices_leave_only_once_their_replacements_serve() -> None:
    # A pool of 2, both past maxAge and idle: their replacements are ordered, and
    # neither goes in the same pass (the pool sat at 0/2 ready for ~46 s).
    e1, e2 = dev("e1", age=7200), dev("e2", age=7100)
    first = one_pass([e1, e2], replicas=2, retire=["e1", "e2"])
    assert created(first) == 2
    assert first.terminate == []
    # One replacement serves: the oldest expired one goes, named by its reason.
    some = [e1, e2, dev("r1", age=5), dev("r2", PROVISIONING, age=5)]
    second = one_pass(some, replicas=2, retire=["e1", "e2"], reasons={"e1": "Expired"})
    assert (second.terminate, created(second)) == (["e1"], 0)
    assert second.reasons == {"e1": "Expired"}


def test_a_device_replaced_when_idle_waits_for_its_replacement() -> None:
    devices = [dev("a"), dev("b"), dev("c")]
    decision = one_pass(devices, retire=["a"], reasons={"a": "Replaced"})
    assert (decision.terminate, created(decision)) == ([], 1)


def test_a_retired_device_terminated_is_said_by_its_reason_not_as_a_scale_down() -> None:
    state = PoolState()
    said = state.take_terminations(
        ["e1", "s1"],
        only_if_idle={"e1", "s1"},
        failed={},
        skipped={},
        devices=[dev("e1"), dev("s1")],
        reasons={"e1": "Expired"},
    )
    reasons = {e.reason: e.message for e in said.events}
    assert "e1" in reasons["Expired"] and "e1" not in reasons["ScaledDown"]
    assert "s1" in reasons["ScaledDown"]
    only = say.terminations(surplus=["r"], doomed=[], skipped={}, reasons={"r": "Replaced"})
    assert [e.reason for e in only] == ["Replaced"]


# ------------------------------------------------------------------ 7: spend cap


def test_a_spend_cap_counts_doomed_and_terminating_devices_that_still_bill() -> None:
    # cap 3: "d" is doomed (to be terminated), "t" terminating; both bill. A create
    # would make 5 bill.
    devices = [dev("a"), dev("b"), dev("d"), dev("t", TERMINATING)]
    decision = one_pass(devices, doomed=["d"], cap=3)
    assert created(decision) == 0
    assert decision.plan.capped == 1
    # The plan alone says the same.
    p = plan_pool(
        replicas=3,
        devices=[dev("a"), dev("b")],
        in_flight=0,
        now=NOW,
        idle_grace=timedelta(0),
        cap=3,
        departing=2,
    )
    assert (p.create, p.capped) == (0, 1)


# ------------------------------------------------------------------ 8: expired budget at once


def test_an_expired_budget_counts_retirements_under_way() -> None:
    # Ten devices past maxAge together, a budget of 1 for Expired: while the first
    # retired one is still terminating, no second one is taken.
    pool = spec(
        replicas=10,
        lifetime={"maxAge": "1h"},
        disruption={"budgets": [{"devices": 1, "reasons": ["Expired"]}]},
    )
    devices = [dev(f"e{i}", age=7200 - i) for i in range(10)]
    life = Lifecycle(pool, PoolState(), devices, NOW)
    assert life.retire() == ["e0"]
    # The next pass: e0 still listed (its replacement boots): still the only one.
    assert Lifecycle(pool, PoolState(), devices, NOW + timedelta(seconds=30)).retire() == ["e0"]
    # e0 terminating once its replacement serves: none other until it is gone.
    leaving = [dev("e0", TERMINATING, age=7200), *devices[1:], dev("r0", age=5)]
    retired = PoolState(fates=Fates({"e0": Fate.LEFT_EXPIRED}))
    assert Lifecycle(pool, retired, leaving, NOW + timedelta(seconds=60)).retire() == []
    gone = [*devices[1:], dev("r0", age=5)]
    assert Lifecycle(pool, PoolState(), gone, NOW + timedelta(seconds=90)).retire() == ["e1"]


def test_a_drifted_budget_counts_a_rolled_device_still_terminating() -> None:
    # The same for drift: a budget of 1, "d1" rolled and terminating: no second one
    # rolls until it is gone.
    pool = spec(
        osVersion="15",
        rollout={"maxSurge": 1},
        disruption={"budgets": [{"devices": 1, "reasons": ["Drifted"]}]},
    )
    old = "0" * 12  # another template's hash
    devices = [
        dev("d1", TERMINATING, hash=old),
        dev("d2", hash=old),
        dev("d3", hash=old),
        dev("n1", age=5, hash=template_hash(device_template(pool))),
    ]
    state = PoolState(rollout=Rollout(unlabelled_hash=old), fates=Fates({"d1": Fate.LEFT_DRIFTED}))
    Lifecycle(pool, state, devices, NOW).advance()
    assert state.rollout.rolling == []
    Lifecycle(pool, state, devices[1:], NOW + timedelta(seconds=30)).advance()
    assert state.rollout.rolling == ["d2"]


# ------------------------------------------------------------------ 9: held scale-down wake


def _scaled_to_one_under_a_freeze(devices: list[Any]) -> Any:
    """The plan of a pool scaled to 1 with a 60-s idle grace and no terminate allowed."""
    return plan_pool(
        replicas=1,
        devices=devices,
        in_flight=0,
        now=NOW,
        idle_grace=timedelta(seconds=60),
        max_terminate=0,
    )


def test_a_budget_held_idle_device_sets_no_wake() -> None:
    # Scaled 3 -> 1 under a freeze (a ScaleDown budget of 0): the idle devices held are
    # no deadline; before, their past idle time woke the pool every second.
    devices = [dev("a"), dev("b"), dev("c")]
    p = _scaled_to_one_under_a_freeze(devices)
    assert p.budget_held == 2
    assert p.next_idle_at is None
    wake = wake_after(
        now=NOW, plan=p, settings=SETTINGS, deadlines=(), resync=False, next_batch_check=None
    )
    assert wake is None


def test_a_business_hours_freeze_wakes_the_pool_when_its_window_ends() -> None:
    freeze = {
        "budgets": [
            {
                "devices": 0,
                "reasons": ["ScaleDown"],
                "schedule": "0 9 * * mon-fri",
                "duration": "8h",
            }
        ]
    }
    pool = spec(replicas=1, disruption=freeze)
    life = Lifecycle(pool, PoolState(), [dev("a"), dev("b")], NOW)
    assert life.next_window_check(pending=True) == NOW.replace(hour=17)
    # Outside the window: when it opens next (Wednesday 09:00).
    evening = Lifecycle(pool, PoolState(), [], NOW.replace(hour=18))
    assert evening.next_window_check(pending=True) == NOW.replace(day=2, hour=9)
    assert life.next_window_check(pending=False) is None


def test_a_held_scale_down_with_a_device_still_in_grace_wakes_at_its_grace_end() -> None:
    devices = [dev("a"), dev("b"), dev("c", age=20)]
    p = _scaled_to_one_under_a_freeze(devices)
    assert p.next_idle_at == NOW + timedelta(seconds=40)


def test_only_a_protection_still_running_is_a_deadline() -> None:
    # A protection that ran out is forgotten on the next fresh listing; while listings
    # fail it stayed the pool's next deadline, in the past: a wake every second.
    state = PoolState(control=Control(protected={"a": NOW - timedelta(seconds=5), "b": None}))
    assert Lifecycle(spec(), state, [], NOW).next_protection_end() is None
    state.control.protected["c"] = NOW + timedelta(minutes=5)
    assert Lifecycle(spec(), state, [], NOW).next_protection_end() == NOW + timedelta(minutes=5)


def test_replace_when_idle_says_in_which_order_the_device_and_its_replacement_go() -> None:
    from devicepool.workflows.pool.lifecycle import when_idle_said

    # It said "its replacement is created first" and then took the device at once.
    assert when_idle_said("a", spec()) == (
        "a is replaced once idle, once its replacement (created first) serves"
    )
    under = spec(rollout={"maxSurge": 0, "maxUnavailable": 1})
    assert "it goes, then its replacement" in when_idle_said("a", under)
