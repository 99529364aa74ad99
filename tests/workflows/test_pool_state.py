"""The pool's carried state, its device fates and reducers, and its pure decision (no server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.workflows.pool.decide import wake_after
from devicepool.workflows.pool.fates import LIMITS, Fate, Fates
from devicepool.workflows.pool.plan import plan_pool
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.shared.protocol import BatchReport, HealthReport
from tests.helpers.decisions import decide_pass

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SETTINGS = PoolSettings(provision_batch_size=3, idle_grace_seconds=60)


def dev(device_id: str, status: str = "ready", **kw: object) -> DeviceInfo:
    return DeviceInfo(id=device_id, status=status, created_at=NOW - timedelta(hours=1), **kw)


# ---------------------------------------------------------------- fates


def test_a_fate_replaces_the_last_one_and_each_keeps_its_newest() -> None:
    fates = Fates()
    fates.set(["a"], Fate.REPLACED)
    fates.set(["a"], Fate.DOOMED)
    assert fates.of(Fate.REPLACED) == [] and fates.of(Fate.DOOMED) == ["a"]
    fates.clear(["a"], Fate.REPLACED)  # not its fate: kept
    assert fates.has("a", Fate.DOOMED)
    limit = LIMITS[Fate.SCALED_DOWN]
    assert limit is not None
    fates.set([f"x{i}" for i in range(limit + 5)], Fate.SCALED_DOWN)
    assert fates.of(Fate.SCALED_DOWN) == [f"x{i}" for i in range(5, limit + 5)]
    fates.set(["x5"], Fate.SCALED_DOWN)  # set again: the newest now
    assert fates.of(Fate.SCALED_DOWN)[-1] == "x5"
    assert fates.of(Fate.DOOMED) == ["a"]  # doomed devices are never dropped


def test_state_handed_over_by_v0_1_0_keeps_its_four_id_lists_as_fates() -> None:
    carried = {
        "generation": 2,
        "doomed": ["d1"],
        "replacing": ["r1", "r2"],
        "scaledDownBooting": ["s1"],
        "removedFailed": ["f1"],
        "replacementsOwed": 1,
    }
    state = PoolState.model_validate(carried)
    assert state.fates.root == {
        "r1": Fate.REPLACED,
        "r2": Fate.REPLACED,
        "s1": Fate.SCALED_DOWN,
        "f1": Fate.REMOVED_FAILED,
        "d1": Fate.DOOMED,
    }
    assert state.doomed == ["d1"] and state.replacements_owed == 1
    assert PoolState.model_validate(state.to_json_dict()) == state


# ---------------------------------------------------------------- reducers


def test_an_offline_device_gone_from_the_listing_is_owed_once() -> None:
    state = PoolState()
    state.take_listing([dev("a", "offline"), dev("b")], reported_gone=())
    assert state.offline_seen == ["a"]
    state.take_listing([dev("b")], reported_gone=())
    assert state.replacements_owed == 1 and state.fates.has("a", Fate.REPLACED)
    # The health check's report of the same device, arriving late, credits nothing.
    state.take_health(
        HealthReport(
            checked_at=NOW,
            devices=1,
            unhealthy=0,
            max_unhealthy=1,
            paused=False,
            terminated={"a": "offline"},
        ),
        max_unhealthy="1",
    )
    assert state.replacements_owed == 1 and state.replaced_total == 1


def test_a_device_removed_as_failed_is_still_a_failed_boot_when_its_batch_ends() -> None:
    state = PoolState()
    state.fates.set(["f1"], Fate.REMOVED_FAILED)
    report = BatchReport(workflow_id="b", slots=[0], vanished_devices={"f1": "status terminating"})
    said = state.take_report(report, region="r", settings=SETTINGS, now=NOW)
    assert report.failed_devices == {"f1": "failed (removed by the pool)"}
    assert state.doomed == ["f1"] and not state.fates.has("f1", Fate.REMOVED_FAILED)
    assert [e.reason for e in said.events] == ["BootFailed"]


def test_terminations_doom_what_must_go_and_forget_what_went() -> None:
    state = PoolState()
    state.fates.set(["d1", "d2"], Fate.DOOMED)
    devices = [dev("p1", "provisioning"), dev("r1"), dev("d1", "failed"), dev("d2", "failed")]
    said = state.take_terminations(
        ["p1", "r1", "d1", "d2"],
        only_if_idle={"p1", "r1"},
        failed={"r1": "409", "d2": "500"},
        skipped={},
        devices=devices,
    )
    assert state.doomed == ["d2"]  # d1 went; r1 (surplus) is a member again, not doomed
    assert state.fates.of(Fate.SCALED_DOWN) == ["p1"]  # booting, removed by a scale-down
    assert "TerminateFailed" in [e.reason for e in said.events]


def test_a_booting_device_a_scale_down_took_is_said_scaled_down_not_vanished() -> None:
    # Was test_pool_status_truth::test_scale_down_removes_a_booting_device_before_a_ready_one
    # on the dev server: 5 ready and 1 booting scaled to 5. Which one goes is the plan's
    # (test_plan::test_scale_down_removes_a_booting_device_before_a_ready_one); what is
    # said of it is this sequence: the termination, then its batch's report of it gone.
    state = PoolState()
    devices = [*(dev(f"r{i}") for i in range(5)), dev("p", "provisioning")]
    plan = plan_pool(replicas=5, devices=devices, in_flight=0, now=NOW, idle_grace=timedelta(0))
    assert plan.terminate == ["p"]
    went = state.take_terminations(
        plan.terminate, only_if_idle={"p"}, failed={}, skipped={}, devices=devices
    )
    assert [(e.reason, e.message) for e in went.events] == [
        ("ScaledDown", "terminated 1 device(s): p")
    ]
    report = BatchReport(workflow_id="b", slots=[5], vanished_devices={"p": "not found"})
    said = state.take_report(report, region="us-west", settings=SETTINGS, now=NOW)
    assert "Vanished" not in [e.reason for e in said.events]
    assert said.warning is None  # no evidence against the region


# ---------------------------------------------------------------- decide


def test_decide_withdraws_creates_not_landed_before_touching_a_device() -> None:
    book = SlotBook()
    _, taken = book.take(3, generation=1, observed_slots=set())
    book.open_batch("b0", 1, taken, NOW)
    decision = decide_pass(
        [dev("r1"), dev("r2")], replicas=2, slots=book, settings=SETTINGS, now=NOW
    )
    assert decision.withdraw == {"b0": [2, 1, 0]}
    assert decision.terminate == [] and decision.batches == []
    assert book.in_flight[0].withdrawing == []  # the given book is not changed
    assert decision.slots.in_flight[0].withdrawing == [2, 1, 0]


def test_decide_serves_replacements_first_in_batches_of_their_own() -> None:
    decision = decide_pass(
        [dev("f1", "failed")],
        replicas=5,
        generation=4,
        doomed=["x"],
        replacements_owed=2,
        settings=SETTINGS,
        now=NOW,
    )
    assert decision.terminate == ["f1", "x"] and decision.only_if_idle == set()
    assert [(b.slots, b.replacement) for b in decision.batches] == [
        ([0, 1], True),
        ([2, 3, 4], False),
    ]
    assert decision.batches[0].child_id == "devicepool/p/provision/4-0"
    assert decision.replacements_owed == 0
    assert [b.workflow_id for b in decision.slots.in_flight] == [
        b.child_id for b in decision.batches
    ]


def test_a_blind_pool_decides_nothing_but_its_plan() -> None:
    decision = decide_pass([], doomed=["x"], act=False, settings=SETTINGS, now=NOW)
    assert decision.plan.create == 3
    assert (decision.batches, decision.terminate, decision.withdraw) == ([], [], {})


def test_an_idle_converged_pool_sets_no_timer() -> None:
    plan = plan_pool(
        replicas=1, devices=[dev("r1")], in_flight=0, now=NOW, idle_grace=timedelta(60)
    )
    kw = {"now": NOW, "plan": plan, "settings": SETTINGS, "next_batch_check": None}
    assert wake_after(deadlines=(None, None), resync=False, **kw) is None  # type: ignore[arg-type]
    resync = wake_after(deadlines=(None,), resync=True, **kw)  # type: ignore[arg-type]
    assert resync == timedelta(seconds=SETTINGS.resync_seconds)
    soon = wake_after(deadlines=(NOW,), resync=True, **kw)  # type: ignore[arg-type]
    assert soon == timedelta(seconds=1)  # never less than a second
