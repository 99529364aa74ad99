"""`onRelease: reset` on a DevicePool, pure (`leasable`): a used device waits in the pool's
reset list, leased by no one until its reset is asked; what each answer does (reset,
no reset here, quota used, failures); and the list carried across runs. A BrowserPool's
reset is a fresh profile."""

from __future__ import annotations

from datetime import timedelta

from devicepool.activities import models as am
from devicepool.api.v1beta1 import LeaseSpec, OnRelease
from devicepool.workflows.browserpool import leasable as browser_leasable
from devicepool.workflows.pool import leasable
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.pool.state import PendingReset, PoolState
from devicepool.workflows.reconciler.events import record
from devicepool.workflows.reconciler.lease_records import EndReason
from tests.helpers.leases import POOL_SPEC, T0, ended

SPEC = POOL_SPEC


def device(i: str, status: str = am.READY) -> am.DeviceInfo:
    return am.DeviceInfo(id=i, status=status, region="us-west", created_at=T0 - timedelta(hours=1))


def answer(i: str, outcome: am.ResetOutcome, message: str = "") -> am.ResetDeviceResult:
    return am.ResetDeviceResult(device_id=i, outcome=outcome, message=message)


def test_reset_is_a_lease_policy_of_its_own() -> None:
    assert LeaseSpec.model_validate({"onRelease": "reset"}).on_release == OnRelease.RESET


def test_a_used_device_waits_for_its_reset_and_is_leased_by_no_one() -> None:
    state = PoolState()
    added = leasable.reset_used(
        state,
        [
            ended("a", EndReason.RELEASED),
            ended("b", EndReason.IDLE),
            ended("f", EndReason.EXPIRED),
            # Never used (an offer nobody claimed), gone, replaced, or not listed: none.
            ended("c", EndReason.UNCLAIMED),
            ended("d", EndReason.DEVICE_LOST),
            ended("e", EndReason.REPLACED),
            ended("z", EndReason.RELEASED),
        ],
        listed={"a", "b", "c", "d", "e", "f"},
    )
    assert added == ["a", "b", "f"] and [r.device for r in state.resets] == ["a", "b", "f"]
    # Twice the same end adds nothing.
    assert leasable.reset_used(state, [ended("a", EndReason.RELEASED)], listed={"a"}) == []
    devices = [device(i) for i in "abcdef"]
    found = leasable.candidates(devices, spec=SPEC, state=state, leaving=(), drifted=())
    assert [c.id for c in found] == ["c", "d", "e"]
    assert not state.doomed  # nothing is replaced for a reset


def test_due_resets_forget_devices_gone_or_doomed_and_wait_for_those_leaving() -> None:
    state = PoolState(resets=[PendingReset(device=i) for i in "abcd"])
    state.fates.set(["b"], Fate.DOOMED)
    due = leasable.resets_due(state, members={"a", "b", "d"}, leaving={"d"})
    assert due == ["a"]
    assert [r.device for r in state.resets] == ["a", "d"]  # c gone, b goes anyway


def test_each_answer_of_a_reset() -> None:
    state = PoolState(resets=[PendingReset(device=i) for i in "abcde"])
    said = leasable.take_resets(
        state,
        {
            "a": answer("a", am.ResetOutcome.RESET),
            "b": answer("b", am.ResetOutcome.GONE),
            "c": answer("c", am.ResetOutcome.QUOTA_USED, "本月一键新机次数已用完，下月重置"),
            "d": answer("d", am.ResetOutcome.UNSUPPORTED),
            "e": "provider unavailable",
        },
    )
    assert [r.device for r in state.resets] == ["e"] and state.resets[0].failures == 1
    assert sorted(state.doomed) == ["c", "d"]  # replaced instead
    by_reason = {h.reason: h for h in said}
    assert set(by_reason) == {"Reset", "ResetQuotaUsed", "ResetIsReplace", "ResetFailed"}
    assert (
        by_reason["ResetQuotaUsed"].warning and "次数已用完" in by_reason["ResetQuotaUsed"].message
    )
    assert "no reset" in by_reason["ResetIsReplace"].message
    assert "attempt 1 of 3" in by_reason["ResetFailed"].message


def test_a_reset_failing_again_and_again_is_a_replacement() -> None:
    state = PoolState(resets=[PendingReset(device="a")])
    for attempt in range(1, leasable.RESET_ATTEMPTS):
        leasable.take_resets(state, {"a": "timed out"})
        assert state.resets[0].failures == attempt and not state.doomed
    said = leasable.take_resets(state, {"a": "timed out"})
    assert not state.resets and state.doomed == ["a"]
    assert said[0].warning and "replaced after 3 failed resets" in said[0].message


def test_no_reset_here_is_said_once_while_it_is_among_the_recent_events() -> None:
    state = PoolState(resets=[PendingReset(device="a")])
    (first,) = leasable.take_resets(state, {"a": answer("a", am.ResetOutcome.UNSUPPORTED)})
    assert first.reason == leasable.RESET_IS_REPLACE
    state.events = record(state.events, now=T0, reason=first.reason, message=first.message)
    state.resets = [PendingReset(device="b")]
    (then,) = leasable.take_resets(state, {"b": answer("b", am.ResetOutcome.UNSUPPORTED)})
    assert then.reason == "ReplaceRequested" and state.doomed == ["a", "b"]


def test_the_reset_list_is_carried_and_an_older_state_has_none() -> None:
    state = PoolState(resets=[PendingReset(device="a", failures=2)])
    carried = PoolInput.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": SPEC.model_dump(mode="json", by_alias=True),
            "state": state.model_dump(mode="json", by_alias=True),
        }
    )
    assert carried.state is not None and carried.state.resets == state.resets
    older = state.model_dump(mode="json", by_alias=True)
    del older["resets"]
    assert PoolState.model_validate(older).resets == []


def test_a_browser_profiles_reset_is_a_fresh_profile_said_once() -> None:
    # BrowserPool: `leases_ended` asks `after_leases` to replace under `reset`.
    added, due = browser_leasable.after_leases(
        [ended("p1", EndReason.RELEASED), ended("p2", EndReason.UNCLAIMED)],
        replace=True,
        kept={},
        used=[],
    )
    assert (added, due) == (["p1"], True)
    first = browser_leasable.replaced_after_use(added, reset=True, events=[])
    assert first.reason == browser_leasable.RESET_IS_REPLACE and "fresh profile" in first.message
    events = record([], now=T0, reason=first.reason, message=first.message)
    again = browser_leasable.replaced_after_use(["p3"], reset=True, events=events)
    assert again.reason == "ReplaceRequested"
    asked = browser_leasable.replaced_after_use(["p4"], reset=False, events=[])
    assert asked.reason == "ReplaceRequested"  # `release --replace`, or `onRelease: replace`


def test_a_device_replaced_after_use_is_removed_as_used_until_gone() -> None:
    """Its removal says so (`TerminateDeviceInput.used`): a Local API phone is then reset
    before its profile serves a later create, or retired."""
    state = PoolState(resets=[PendingReset(device="a")])
    leasable.take_resets(state, {"a": answer("a", am.ResetOutcome.QUOTA_USED)})
    leasable.replace_used(state, [ended("b", EndReason.RELEASED)], listed={"a", "b"}, now=T0)
    assert state.replaced_after_use == ["a", "b"] and sorted(state.doomed) == ["a", "b"]
    leasable.resets_due(state, members={"b"}, leaving=())
    assert state.replaced_after_use == ["b"]  # a is gone


def test_a_used_device_is_removed_as_used_whatever_takes_it_away() -> None:
    """Waiting for its reset, or replaced after a lease, or replaced by a person while
    leased: a lifetime, a scale-down, a rollout or a replace that takes it first must still
    tell the provider it was used (a phone's profile is fresh-started before it is kept)."""
    state = PoolState(resets=[PendingReset(device="a")], replaced_after_use=["b"])
    leasable.replaced_while_leased(
        state,
        [ended("c", EndReason.REPLACED), ended("d", EndReason.RELEASED)],
        listed={"a", "b", "c", "d"},
    )
    assert leasable.used(state) == {"a", "b", "c"}
