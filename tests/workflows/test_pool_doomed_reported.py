"""A doomed device the health check reports removed stays doomed (issue 37).

v0.1.0 kept one id list per fact: `doomed` (terminated every pass until a DELETE
goes through) and `replacing` (its replacement credited). A device could be in
both. Its failed device whose DELETE failed stayed doomed when the health check
then removed it and said so: the next pass issued `terminate_device` for it
again, and the wait had a resync timeout. The fates are one map now, so the
report must not overwrite `doomed` with `replaced`; the credit is remembered
beside it (`PoolState.doomed_replaced`), and the device is `replaced` once its
termination went through, so no later listing credits it again. Pure reducers.
"""

from __future__ import annotations

from datetime import UTC, datetime

from devicepool.activities.models import PoolSettings
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.shared.protocol import BatchReport, HealthReport

NOW = datetime(2026, 12, 5, 4, 0, tzinfo=UTC)


def removed(*device_ids: str) -> HealthReport:
    return HealthReport(
        checked_at=NOW,
        devices=3,
        unhealthy=len(device_ids),
        max_unhealthy=1,
        paused=False,
        terminated={d: "StartupTimeout: still failed 400s after creation" for d in device_ids},
    )


def doomed_after_a_failed_delete() -> PoolState:
    """Its batch said `dev-a` failed; the pool's DELETE of it failed: doomed."""
    state = PoolState()
    state.take_report(
        BatchReport(workflow_id="b", slots=[0], failed_devices={"dev-a": "failed"}),
        region="us-west",
        settings=PoolSettings(),
        now=NOW,
    )
    state.take_terminations(
        ["dev-a"], only_if_idle=(), failed={"dev-a": "HTTP 500"}, skipped={}, devices=[]
    )
    assert state.doomed == ["dev-a"]
    return state


def test_a_health_report_naming_a_doomed_device_keeps_it_doomed() -> None:
    state = doomed_after_a_failed_delete()
    state.take_health(removed("dev-a"), max_unhealthy="1")
    assert state.doomed == ["dev-a"]  # terminated again next pass, as v0.1.0 did
    assert state.replacements_owed == 1  # and its replacement credited, once
    state.take_health(removed("dev-a"), max_unhealthy="1")  # the same word again: no credit
    assert state.doomed == ["dev-a"]


def test_a_reported_doomed_device_terminated_is_never_credited_again() -> None:
    state = doomed_after_a_failed_delete()
    state.offline_seen = ["dev-a"]  # the listing before showed it offline
    state.take_health(removed("dev-a"), max_unhealthy="1")
    state.take_terminations(["dev-a"], only_if_idle=(), failed={}, skipped={}, devices=[])
    assert state.doomed == [] and state.fates.has("dev-a", Fate.REPLACED)
    # A new run (no reported-gone memory): the listing shows it gone while it was offline.
    state.take_listing([], reported_gone=())
    assert state.replacements_owed == 1


def test_a_credited_device_its_batch_then_says_failed_is_credited_once() -> None:
    state = PoolState()
    state.take_health(removed("dev-a"), max_unhealthy="1")  # credited first
    state.take_report(
        BatchReport(workflow_id="b", slots=[0], failed_devices={"dev-a": "failed"}),
        region="us-west",
        settings=PoolSettings(),
        now=NOW,
    )
    assert state.doomed == ["dev-a"]
    state.take_terminations(["dev-a"], only_if_idle=(), failed={}, skipped={}, devices=[])
    state.take_health(removed("dev-a"), max_unhealthy="1")  # v0.1.0: still `replacing`
    assert state.replacements_owed == 1


def test_state_handed_over_by_v0_1_0_keeps_a_device_both_doomed_and_credited() -> None:
    carried = {"doomed": ["dev-a"], "replacing": ["dev-a", "dev-b"], "replacementsOwed": 2}
    state = PoolState.model_validate(carried)
    assert state.doomed == ["dev-a"] and state.fates.has("dev-b", Fate.REPLACED)
    state.take_terminations(["dev-a"], only_if_idle=(), failed={}, skipped={}, devices=[])
    state.take_health(removed("dev-a"), max_unhealthy="1")  # v0.1.0: in `replacing`, no credit
    assert state.replacements_owed == 2
    assert PoolState.model_validate(state.to_json_dict()) == state
