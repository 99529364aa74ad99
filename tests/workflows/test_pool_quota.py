"""A pool that meets a provider's quota says so and waits for its reset (issue 41). Pure.

A create refused for a quota (`BatchReport.quota`) holds the pool's creates: until the
quota's reset when the provider names one (a daily quota), else for at most an hour or
until one of the pool's own devices goes (a profile cap). `QuotaExhausted` says which quota
and when creates resume, an event when it starts and when it ends; it goes False by itself
once creates succeed after the reset. The refusals are no verdict on the region.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from temporalio.exceptions import ApplicationError, RetryState

from devicepool.activities.errors import to_application_error
from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.activities.providers.geelark.errors import error_for
from devicepool.api.v1beta1 import ConditionStatus, ConditionType, DevicePoolSpec
from devicepool.workflows.pool import events as say
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.decide import Observed, decision_for
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.provision.failures import provider_verdict, quota_refusal
from devicepool.workflows.shared.protocol import BatchReport, QuotaRefusal
from tests.helpers.activity_errors import activity_error

NOW = datetime(2026, 12, 6, 13, 30, tzinfo=UTC)
MIDNIGHT = datetime(2026, 12, 7, tzinfo=UTC)
RESUME = MIDNIGHT + timedelta(seconds=5)  # the provider's clock and the pool's may be apart
SETTINGS = PoolSettings(provision_batch_size=3, failure_streak_limit=2)
SPEC = DevicePoolSpec.model_validate({"platform": "android", "region": "us-west", "replicas": 3})
DAILY = QuotaRefusal(
    reason="DailyCreateQuota",
    message="quota_exceeded: POST /open/v1/phone/addNew refused: 44004",
    resets_at=MIDNIGHT,
    slots=[0, 1],
)
CAP = QuotaRefusal(reason="ProfileCap", message="quota_exceeded: 44002 cap", slots=[0])


_BATCHES = itertools.count(1)


def refused(quota: QuotaRefusal, batch: str | None = None) -> BatchReport:
    """A batch's report of `quota` (a new batch each call unless `batch` names one)."""
    return BatchReport(
        workflow_id=batch or f"b{next(_BATCHES)}",
        slots=list(quota.slots),
        failed_slots={s: quota.message for s in quota.slots},
        quota=quota,
    )


def landed(slot: int = 5) -> BatchReport:
    return BatchReport(
        workflow_id="b2", slots=[slot], created={slot: f"d{slot}"}, ready=[f"d{slot}"]
    )


def take(
    state: PoolState, report: BatchReport, now: datetime = NOW, *, hold_quota: bool = True
) -> None:
    """`state` takes a batch's `report` in us-west at `now`; `hold_quota` False: as a run
    that predates the quota hold."""
    state.take_report(report, region="us-west", settings=SETTINGS, now=now, hold_quota=hold_quota)


def seen(now: datetime, devices: list[DeviceInfo] | None = None) -> Observed:
    return Observed(
        devices=tuple(devices or ()),
        reported_leaving=(),
        settings=SETTINGS,
        price=0.1,
        now=now,
        refs_problems=[],
    )


def publish(state: PoolState, now: datetime, *, creating: bool = False) -> list[str]:
    """Publish a pass at `now`; the reasons of the events it said."""
    decision = decision_for(seen(now), pool="p", spec=SPEC, state=state, incarnation="i", act=True)
    view = st.PoolView(
        spec=SPEC,
        generation=state.generation,
        plan=decision.plan,
        creating=creating or bool(decision.batches),
        device_ids=[],
        refs_problems=[],
        backoff=state.backoff,
        health=None,
        now=now,
    )
    said = state.publish(st.published(state.status, view))
    return [e.reason for e in said.events]


def quota_condition(state: PoolState) -> tuple[str, str, str]:
    cond = state.status.condition(ConditionType.QUOTA_EXHAUSTED)
    assert cond is not None
    return cond.status.value, cond.reason, cond.message


def test_a_quota_refusal_is_read_from_the_failed_create() -> None:
    failure = to_application_error(error_for("POST /open/v1/phone/addNew", 44004, "", now=NOW))
    err = activity_error(failure, "create_device", RetryState.NON_RETRYABLE_FAILURE)
    assert quota_refusal(err) == ("DailyCreateQuota", MIDNIGHT)
    cap = to_application_error(error_for("POST /open/v1/phone/addNew", 44002, "", now=NOW))
    assert quota_refusal(activity_error(cap, "create_device", None)) == ("ProfileCap", None)
    other = ApplicationError("boom", {"status": 500}, type="server_error")
    assert quota_refusal(activity_error(other, "create_device", None)) is None
    assert provider_verdict(err) is not None  # still the provider's refusal


def test_a_daily_quota_holds_creates_until_its_reset_and_says_so() -> None:
    state = PoolState()
    take(state, refused(DAILY))
    # No create before the reset: not now, not a minute before it.
    for when in (NOW, MIDNIGHT - timedelta(minutes=1), MIDNIGHT):
        decision = decision_for(seen(when), pool="p", spec=SPEC, state=state, incarnation="i",
                                act=True)  # fmt: skip
        assert decision.batches == [], when
    assert state.backoff.next_at(NOW) == RESUME  # the pool's timer wakes it after the reset
    # Not a verdict on the region: no back-off, ProviderAvailable stays True.
    assert state.backoff.problem is None and state.backoff.failure_streak == 0
    said = publish(state, NOW)
    assert "QuotaExhausted" in said
    status, reason, message = quota_condition(state)
    assert (status, reason) == ("True", "DailyCreateQuota")
    assert message == (
        "the account's daily create quota is used until 2026-12-07T00:00:00Z; "
        "creates resume at 2026-12-07T00:00:05Z"
    )
    provider = state.status.condition(ConditionType.PROVIDER_AVAILABLE)
    assert provider is not None and provider.status == ConditionStatus.TRUE
    # At the reset the pool creates again...
    decision = decision_for(seen(RESUME), pool="p", spec=SPEC, state=state, incarnation="i",
                            act=True)  # fmt: skip
    assert sum(len(b.slots) for b in decision.batches) == 3
    # ...and once a create lands, the condition goes False by itself, said once.
    take(state, landed(), RESUME)
    said = publish(state, RESUME + timedelta(seconds=5))
    assert "QuotaAvailable" in said
    assert quota_condition(state)[:2] == ("False", "QuotaAvailable")
    assert publish(state, RESUME + timedelta(seconds=10)) == []


def test_a_pool_that_never_met_a_quota_shows_no_such_condition() -> None:
    state = PoolState()
    publish(state, NOW)
    assert state.status.condition(ConditionType.QUOTA_EXHAUSTED) is None


def test_a_profile_cap_holds_an_hour_or_until_a_device_of_the_pool_goes() -> None:
    state = PoolState()
    take(state, refused(CAP))
    assert state.backoff.next_at(NOW) == NOW + timedelta(hours=1)
    publish(state, NOW)
    status, reason, message = quota_condition(state)
    assert (status, reason) == ("True", "ProfileCap")
    assert "no clock resets it" in message and "2026-12-06T14:30:00Z" in message
    # A device of the pool goes: the cap may have room; creates are tried at the next pass.
    d = DeviceInfo(id="d1", status="ready", created_at=NOW)
    state.take_terminations(["d1"], only_if_idle={"d1"}, failed={}, skipped={}, devices=[d])
    later = NOW + timedelta(minutes=1)
    assert not state.backoff.creates_held(later)
    assert state.backoff.next_at(later) is None  # no timer on a hold that ended


def test_a_used_up_balance_is_not_released_by_a_device_of_the_pool_going() -> None:
    # A termination frees a profile, not money: released, each retry would spend a daily
    # create (`addNew` runs before the start meets 41001 again) and make a profile.
    broke = QuotaRefusal(reason="BalanceExhausted", message="41001 balance", slots=[0])
    state = PoolState()
    take(state, refused(broke))
    d = DeviceInfo(id="d1", status="ready", created_at=NOW)
    state.take_terminations(["d1"], only_if_idle={"d1"}, failed={}, skipped={}, devices=[d])
    later = NOW + timedelta(minutes=1)
    assert state.backoff.creates_held(later)
    assert state.backoff.next_at(later) == NOW + timedelta(hours=1)  # the re-probe


def test_a_refusal_again_after_the_reset_holds_again_and_old_runs_keep_the_back_off() -> None:
    state = PoolState()
    take(state, refused(DAILY))
    again = DAILY.model_copy(update={"resets_at": MIDNIGHT + timedelta(days=1)})
    take(state, refused(again), MIDNIGHT)
    assert state.backoff.creates_held(MIDNIGHT + timedelta(hours=23))
    # A run that may not hold (before its patch): the refusals count as failures, as before.
    old = PoolState()
    take(old, refused(DAILY), hold_quota=False)
    assert old.backoff.quota is None and old.backoff.problem is not None


def test_a_reset_in_the_past_or_far_away_is_bounded() -> None:
    state = PoolState()
    past = DAILY.model_copy(update={"resets_at": NOW - timedelta(days=3)})
    take(state, refused(past))
    held_until = state.backoff.next_at(NOW)
    # No 1-second loop: at least the back-off's first pause.
    assert held_until == NOW + timedelta(seconds=SETTINGS.backoff_initial_seconds)
    far = DAILY.model_copy(update={"resets_at": datetime(9999, 1, 1, tzinfo=UTC)})
    state = PoolState()
    take(state, refused(far))
    held_until = state.backoff.next_at(NOW)
    assert held_until is not None and held_until <= NOW + timedelta(days=2)


def test_a_hold_that_ended_with_no_create_wanted_holds_nothing() -> None:
    # Scaled down to what it has while held: once the hold ends, the condition says so
    # rather than "creates are tried again" for ever.
    state = PoolState()
    take(state, refused(DAILY))
    publish(state, NOW)
    assert quota_condition(state)[0] == "True"
    three = [DeviceInfo(id=f"d{i}", status="ready", created_at=NOW) for i in range(3)]
    decision = decision_for(seen(RESUME, three), pool="p", spec=SPEC, state=state,
                            incarnation="i", act=True)  # fmt: skip
    view = st.PoolView(
        spec=SPEC,
        generation=state.generation,
        plan=decision.plan,
        creating=False,
        device_ids=[d.id for d in three],
        refs_problems=[],
        backoff=state.backoff,
        health=None,
        now=RESUME,
    )
    said = state.publish(st.published(state.status, view))
    assert quota_condition(state)[:2] == ("False", "QuotaAvailable")
    assert [e.reason for e in said.events] == ["QuotaAvailable"]


def test_a_refusal_just_after_the_reset_looks_again_soon_not_a_day_later() -> None:
    # The provider's clock a little behind the pool's: its day has not turned when the pool
    # creates again, and its adapter names the next midnight, a day away. Within minutes of
    # the reset the pool waited for, it looks again after the back-off's first pause.
    state = PoolState()
    take(state, refused(DAILY))
    tomorrow = DAILY.model_copy(update={"resets_at": MIDNIGHT + timedelta(days=1)})
    take(state, refused(tomorrow), RESUME)
    soon = RESUME + timedelta(seconds=SETTINGS.backoff_initial_seconds)
    assert state.backoff.next_at(RESUME) == soon
    again = soon + timedelta(seconds=1)
    take(state, refused(tomorrow), again)
    assert state.backoff.next_at(again) == again + timedelta(
        seconds=SETTINGS.backoff_initial_seconds
    )
    # Past those minutes, the provider means it: the next reset.
    late = MIDNIGHT + timedelta(minutes=11)
    take(state, refused(tomorrow), late)
    assert state.backoff.next_at(late) == MIDNIGHT + timedelta(days=1, seconds=5)


def test_a_quota_hold_withdraws_the_creates_still_waiting_for_a_permit() -> None:
    # Batches started before the refusal wait for the ledger's permits: each would spend
    # a request on a create the quota refuses. The hold asks them to drop those, once.
    state = PoolState()
    state.slots.open_batch("b-late", 1, [3, 4], NOW)
    take(state, refused(DAILY))
    decision = decision_for(seen(NOW), pool="p", spec=SPEC, state=state, incarnation="i",
                            act=True)  # fmt: skip
    assert decision.withdraw == {"b-late": [4, 3]}
    assert decision.batches == []
    again = decision_for(seen(NOW), pool="p", spec=SPEC, state=state.model_copy(
        update={"slots": decision.slots}), incarnation="i", act=True)  # fmt: skip
    assert again.withdraw == {}
    # After the reset, nothing is withdrawn: the creates go ahead.
    state = PoolState()
    state.slots.open_batch("b-late", 1, [3, 4], NOW)
    take(state, refused(DAILY))
    after = decision_for(seen(RESUME), pool="p", spec=SPEC, state=state, incarnation="i",
                         act=True)  # fmt: skip
    assert after.withdraw == {}


def test_creates_dropped_for_a_quota_are_said_so() -> None:
    book = SlotBook()
    book.open_batch("b1", 1, [0, 1, 2], NOW)
    report = refused(DAILY.model_copy(update={"slots": [0]}), batch="b1")
    report = report.model_copy(update={"slots": [0, 1, 2], "withdrawn": [1, 2]})
    said = say.batches_settled(book, [report], held=True)
    dropped = [h.message for h in said if h.reason == "Withdrawn"]
    assert dropped == [
        "2 create(s) not yet rented dropped (a quota holds them: see QuotaExhausted)"
    ]
    said = say.batches_settled(book, [report])
    assert [h.message for h in said if h.reason == "Withdrawn"] == [
        "2 create(s) not yet rented dropped (fewer replicas wanted)"
    ]


def test_a_late_report_of_a_reset_already_waited_for_holds_nothing_again() -> None:
    # A batch refused at 23:59:59 reports its end minutes later (it waited for boots): the
    # reset it names has passed and was waited for; creates are not held again.
    state = PoolState()
    take(state, refused(DAILY, "b9"))
    late = MIDNIGHT + timedelta(minutes=4)
    take(state, refused(DAILY, "b9"), late)
    assert not state.backoff.creates_held(late)


def test_a_new_refusal_naming_a_past_reset_holds_again_and_longer_each_time() -> None:
    # R13: a reset already past (the provider's clock behind ours, or a stale one) held once;
    # every later refusal naming it was taken for a late word, and creates went straight on
    # into the used-up quota, a batch after every batch.
    state = PoolState()
    past = DAILY.model_copy(update={"resets_at": NOW - timedelta(days=3)})
    first = SETTINGS.backoff_initial_seconds
    take(state, refused(past))
    assert state.backoff.next_at(NOW) == NOW + timedelta(seconds=first)
    again = NOW + timedelta(seconds=first + 1)
    assert not state.backoff.creates_held(again)  # the pause ended: a create is tried
    take(state, refused(past), again)
    assert state.backoff.creates_held(again), "refused again: creates must not go straight out"
    assert state.backoff.next_at(again) == again + timedelta(seconds=2 * first)


def test_a_batch_s_second_word_of_its_refusal_holds_nothing_after_a_create_landed() -> None:
    # R13: a batch reports its refusal when it reports its creates and again when it ends,
    # maybe minutes later; if a create landed between the two (the hold over), the second
    # word held the pool again: an hour below size for a cap.
    for quota, at, late in (
        (CAP, NOW, NOW + timedelta(minutes=5)),
        (DAILY, MIDNIGHT - timedelta(minutes=2), MIDNIGHT + timedelta(minutes=6)),
    ):
        state = PoolState()
        take(state, refused(quota, "b-one"), at)
        state.backoff.room_freed()
        landing = max(at, MIDNIGHT if quota is DAILY else at) + timedelta(seconds=30)
        take(state, landed(), landing)
        take(state, refused(quota, "b-one"), late)
        assert not state.backoff.creates_held(late), quota.reason
