"""The pure parts of the pool workflow, each on its own: slot book, back-off, status, spec rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.api.errors import ErrorType
from devicepool.api.v1beta1 import (
    ConditionStatus,
    ConditionType,
    DevicePoolSpec,
    DevicePoolStatus,
    ObjectMeta,
    Phase,
    ProviderRef,
    check_replicas,
)
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.finalizer import SweepVerdict, verdict
from devicepool.workflows.pool.messages import ApplyRequest, PoolInput, body_changed, refuse_apply
from devicepool.workflows.pool.plan import plan_pool
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler import messages
from devicepool.workflows.reconciler.messages import short_json
from devicepool.workflows.shared.protocol import BatchReport, HealthReport

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SETTINGS = PoolSettings(failure_streak_limit=3, backoff_initial_seconds=30, backoff_max_seconds=900)


def spec(**changes: object) -> DevicePoolSpec:
    base = {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": 4}
    return DevicePoolSpec.model_validate({**base, **changes})


# ---------------------------------------------------------------- slot book


def test_fresh_slots_are_numbered_on_and_counted_until_observed() -> None:
    book = SlotBook()
    assert book.take(3, generation=1, observed_slots=set()) == (1, [0, 1, 2])
    book.open_batch("b0", 1, [0, 1, 2], NOW)
    assert book.take(2, generation=2, observed_slots=set()) == (2, [3, 4])
    assert book.pending(set()) == 3
    assert book.pending({"0", "2"}) == 1
    assert book.creating()


def test_a_failed_slot_is_taken_again_under_its_old_generation_until_seen() -> None:
    book = SlotBook()
    book.take(2, generation=1, observed_slots=set())
    book.open_batch("b0", 1, [0, 1], NOW)
    book.inbox.done.append(
        BatchReport(workflow_id="b0", slots=[0, 1], created={0: "d0"}, failed_slots={1: "lost"})
    )
    (report,) = book.finish(1)
    assert report.workflow_id == "b0" and book.in_flight == []
    assert book.take(5, generation=3, observed_slots=set()) == (1, [1])
    # Seen by a listing, or after a body change, the old key is not retried.
    book.retry_slots = [(1, 1)]
    assert book.take(1, generation=3, observed_slots={"1"}) == (3, [2])
    book.retry_slots = [(1, 7)]
    book.body_changed(2)
    assert book.take(1, generation=3, observed_slots=set()) == (3, [3])


def test_created_reports_settle_slots_and_only_the_marked_ones_apply() -> None:
    book = SlotBook()
    book.open_batch("b0", 1, [0, 1, 2], NOW)
    book.inbox.created.append(BatchReport(workflow_id="b0", slots=[0, 1, 2], created={0: "d0"}))
    mark = book.inbox.mark()
    book.inbox.created.append(BatchReport(workflow_id="b0", slots=[0, 1, 2], created={1: "d1"}))
    book.settle_created(mark[0])
    assert book.in_flight[0].slots == [1, 2]
    assert len(book.inbox.created) == 1  # arrived after the mark: waits for the next pass
    assert book.unreported() == {"b0"}


# ---------------------------------------------------------------- back-off


def test_failures_in_a_row_pause_creates_and_a_ready_device_resets() -> None:
    backoff = Backoff()
    failed = BatchReport(workflow_id="b", slots=[0], failed_devices={"d0": "StartupTimeout"})
    assert backoff.record(failed, region="us-west", settings=SETTINGS, now=NOW) is None
    assert backoff.record(failed, region="us-west", settings=SETTINGS, now=NOW) is None
    problem = backoff.record(failed, region="us-west", settings=SETTINGS, now=NOW)
    assert problem and problem.startswith("ReplacementsFailing: 3 device(s)")
    assert backoff.active(NOW) and backoff.until == NOW + timedelta(seconds=30)
    assert backoff.probe_due(NOW + timedelta(seconds=31))
    backoff.pause("RegionDown: x", settings=SETTINGS, now=NOW)
    assert backoff.seconds == 60
    ok = BatchReport(workflow_id="b", slots=[0], ready=["d1"])
    assert backoff.record(ok, region="us-west", settings=SETTINGS, now=NOW) is None
    assert (backoff.failure_streak, backoff.until, backoff.problem) == (0, None, None)


def test_unanswered_creates_are_no_verdict_on_the_region_but_region_down_is() -> None:
    backoff = Backoff()
    lost = BatchReport(
        workflow_id="b",
        slots=[0, 1, 2],
        failed_slots={0: "t", 1: "t", 2: "t"},
        unanswered_slots=[0, 1, 2],
    )
    assert backoff.record(lost, region="r", settings=SETTINGS, now=NOW) is None
    assert backoff.failure_streak == 0
    down = BatchReport(
        workflow_id="b", slots=[0], failed_slots={0: f"{ErrorType.REGION_UNAVAILABLE.value}: r"}
    )
    assert backoff.record(down, region="r", settings=SETTINGS, now=NOW) == (
        f"RegionUnavailable: {ErrorType.REGION_UNAVAILABLE.value}: r"
    )
    backoff.region_up(SETTINGS)
    assert backoff.until is None and backoff.failure_streak == 2


# ---------------------------------------------------------------- status


def view(devices: list[DeviceInfo], **kw: object) -> st.PoolView:
    s = kw.pop("spec", spec())
    assert isinstance(s, DevicePoolSpec)
    plan = plan_pool(
        replicas=s.replicas, devices=devices, in_flight=0, now=NOW, idle_grace=timedelta(0)
    )
    base: dict[str, object] = {
        "spec": s,
        "generation": 2,
        "plan": plan,
        "creating": plan.create > 0,
        "device_ids": sorted(d.id for d in devices),
        "refs_problems": None,
        "backoff": Backoff(),
        "health": None,
        "now": NOW,
    }
    return st.PoolView(**{**base, **kw})  # type: ignore[arg-type]


def ready(n: int) -> list[DeviceInfo]:
    return [DeviceInfo(id=f"d{i}", status="ready", created_at=NOW) for i in range(n)]


def test_a_converged_pool_is_ready_with_typed_conditions() -> None:
    status = st.published(DevicePoolStatus(), view(ready(4)))
    assert status.phase == Phase.READY and status.ready_devices == 4
    ready_cond = status.condition(ConditionType.READY)
    assert ready_cond and (ready_cond.status, ready_cond.reason) == (
        ConditionStatus.TRUE,
        "Converged",
    )
    assert status.condition(ConditionType.SCALE_DOWN_BLOCKED) is None
    assert [c.type for c in status.conditions] == sorted(c.type for c in status.conditions)


def capped_view(
    devices: list[DeviceInfo], cap: dict[str, object], replicas: int = 4
) -> st.PoolView:
    s = spec(replicas=replicas, spendCap=cap)
    assert s.spend_cap is not None
    plan = plan_pool(
        replicas=replicas,
        devices=devices,
        in_flight=0,
        now=NOW,
        idle_grace=timedelta(0),
        cap=s.spend_cap.devices_allowed(0.10),
    )
    return view(devices, spec=s, plan=plan, creating=plan.create > 0, price_per_hour=0.10)


def test_a_pool_held_at_its_spend_cap_says_so_and_does_not_look_fine() -> None:
    status = st.published(DevicePoolStatus(), capped_view(ready(2), {"maxHourlyCost": 0.2}))
    reached = status.condition(ConditionType.SPEND_CAP_REACHED)
    assert reached is not None and reached.status == ConditionStatus.TRUE
    assert reached.message == (
        "spendCap (maxHourlyCost $0.2/h at $0.1/h a device) allows 2 device(s); 4 desired, "
        "2 create(s) held back — raise spendCap to grow (running devices are kept)"
    )
    ready_cond = status.condition(ConditionType.READY)
    assert ready_cond is not None and ready_cond.reason == "SpendCapReached"
    assert status.phase == Phase.DEGRADED
    # Within the cap it is False; without a cap there is no such condition.
    within = st.published(status, capped_view(ready(4), {"maxDevices": 10}))
    again = within.condition(ConditionType.SPEND_CAP_REACHED)
    assert again is not None and (again.status, again.reason) == (
        ConditionStatus.FALSE,
        "WithinCap",
    )
    assert within.phase == Phase.READY
    assert st.published(within, view(ready(4))).condition(ConditionType.SPEND_CAP_REACHED) is None


def test_cost_accrues_at_the_rate_each_pass_saw_and_a_cap_is_said_once() -> None:
    state = PoolState()
    state.cost.accrue(NOW, 4, 0.10)  # 4 devices at $0.10 (NOW is 12:00)
    state.cost.accrue(NOW + timedelta(minutes=30), 2, 0.10)  # then 2 for an hour
    state.cost.accrue(NOW + timedelta(minutes=90), 2, 0.10)
    assert round(state.cost.to_date, 6) == 0.4  # 0.4 * 0.5 h + 0.2 * 1 h
    assert round(state.cost.device_hours, 6) == 4.0
    # ...by the hour: 12:00-13:00 had 4 devices for 30 min and 2 for 30 min.
    assert {h.hour: [round(x, 6) for x in v] for h, v in state.cost.billed_hours.items()} == {
        12: [3.0, 0.3],
        13: [1.0, 0.1],
    }
    capped = st.published(DevicePoolStatus(), capped_view(ready(2), {"maxDevices": 2}))
    said = state.publish(capped)
    assert [e.reason for e in said.events] == ["SpendCapReached"] and said.events[0].warning
    assert (state.status.hourly_cost, state.status.cost_to_date) == (0.2, 0.4)
    assert state.publish(capped).events == []  # still reached: not said again


def test_transition_time_moves_only_when_a_condition_flips() -> None:
    first = st.published(DevicePoolStatus(), view(ready(2)))
    later = NOW + timedelta(minutes=5)
    same = st.published(first, view(ready(3), now=later))
    flipped = st.published(same, view(ready(4), now=later))
    cond = lambda s: s.condition(ConditionType.READY)  # noqa: E731
    assert cond(same).last_transition_time == NOW and cond(same).message == "3/4 devices ready"
    assert cond(flipped).last_transition_time == later


def test_unknown_refs_and_a_back_off_make_the_pool_degraded() -> None:
    status = st.published(
        DevicePoolStatus(), view(ready(4), refs_problems=["unknown proxy pool 'x'"])
    )
    cond = status.condition(ConditionType.READY)
    assert status.phase == Phase.DEGRADED and cond and cond.reason == "UnknownProxyPool"
    backoff = Backoff(problem="RegionDown: gone", until=NOW + timedelta(seconds=30))
    status = st.published(DevicePoolStatus(), view(ready(4), backoff=backoff))
    provider = status.condition(ConditionType.PROVIDER_AVAILABLE)
    assert provider and provider.reason == "RegionDown" and "next try at" in provider.message


def test_details_name_the_pool_and_every_condition() -> None:
    status = st.published(DevicePoolStatus(), view(ready(1)))
    text = st.details("p", spec(), 2, status)
    assert text.startswith("**p** · android · us-west · account `default` · generation 2")
    assert "- **Ready** False · BelowDesired: 1/4 devices ready" in text.splitlines()


def test_details_read_well_without_markdown_tables() -> None:
    # The Web UI's Markdown has no tables: they ran together into
    # `phasedesiredreadybusyprovisioningoffline`. One aligned line per figure.
    status = st.published(DevicePoolStatus(), view(ready(1)))
    lines = st.details("p", spec(), 2, status).splitlines()
    assert not any(line.startswith("|") for line in lines), lines
    block = lines[lines.index("```") + 1 :]
    block = block[: block.index("```")]
    assert block == [
        f"phase         {status.phase.value}",
        "desired       4",
        "ready         1",
        "busy          0",
        "provisioning  0",
        "pending       3",  # created this pass, not at the provider yet
        "offline       0",
    ]
    assert len([line for line in lines if line.startswith("- **")]) == len(status.conditions)


# ---------------------------------------------------------------- spec changes, finalizer, state


def test_immutable_fields_and_names_are_refused_with_the_field() -> None:
    meta = ObjectMeta(name="p")
    with pytest.raises(ValueError, match=r"^spec\.region: cannot change"):
        refuse_apply("p", spec(), ApplyRequest(metadata=meta, spec=spec(region="eu")))
    with pytest.raises(ValueError, match=r"^metadata\.name:"):
        refuse_apply("q", spec(), ApplyRequest(metadata=meta, spec=spec()))
    refuse_apply("p", spec(), ApplyRequest(metadata=meta, spec=spec(replicas=9)))
    assert body_changed(spec(), spec(osVersion="15")) and not body_changed(spec(), spec(replicas=1))


@pytest.mark.parametrize(
    ("path", "changed"),
    [
        ("platform", spec(platform="ios")),
        ("region", spec(region="eu-west")),
        # One provider is known today: a stored pool of another is what would differ.
        (
            "provider.name",
            spec().model_copy(
                update={
                    "provider": ProviderRef.model_construct(name="othercloud", account="default")
                }
            ),
        ),
        ("provider.account", spec(provider={"account": "second"})),
    ],
)
# A provider name no build knows serializes with pydantic's warning: it is the point here.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_each_immutable_field_is_refused_by_its_name(path: str, changed: DevicePoolSpec) -> None:
    # README: "Platform, region, provider and account cannot change on a running pool."
    other = _at(changed.to_json_dict(), path)
    with pytest.raises(ValueError, match=rf"^spec\.{path}: cannot change from .* to '{other}'"):
        refuse_apply("p", spec(), ApplyRequest(metadata=ObjectMeta(name="p"), spec=changed))


def parse_scale_signal(payload: Any) -> messages.ScaleRequest:
    return messages.parse_scale_signal(payload, check=check_replicas)


def _at(fields: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        fields = fields[key]
    return fields


def test_a_scale_signal_is_checked_to_one_line() -> None:
    assert parse_scale_signal({"replicas": 3}).replicas == 3
    with pytest.raises(ValueError, match=r"^replicas: must be <= 500, got 501$"):
        parse_scale_signal({"replicas": 501})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        # A manifest's words: one mistake, one line, no pydantic "Field required".
        ({"replica": 4}, "replica: unknown field (did you mean 'replicas'?)"),
        ({"replicas": "ten"}, "replicas: must be an integer, got 'ten'"),
        ({"replicas": True}, "replicas: must be an integer, got true"),
        ({}, "replicas: required"),
        (7, 'must be a JSON object such as {"replicas": 3}, got 7'),
    ],
)
def test_a_bad_scale_signal_is_said_as_a_manifest_error_is(payload: object, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_scale_signal(payload)
    assert str(refused.value) == message


def test_a_signal_payload_is_shown_as_json() -> None:
    assert short_json({"replica": 4}) == '{"replica": 4}'
    assert short_json({"replicas": None, "x": True}) == '{"replicas": null, "x": true}'
    long = short_json({"replicas": "x" * 200})
    assert len(long) == 80 and long.endswith("...")


def test_the_finalizer_only_stops_when_nothing_can_be_left() -> None:
    assert verdict(ErrorType.UNKNOWN_ACCOUNT.value, rented_anything=False) == SweepVerdict.DONE
    for error in (ErrorType.UNKNOWN_ACCOUNT.value, "Unauthenticated", "QuotaExceeded", None):
        assert verdict(error, rented_anything=True) == SweepVerdict.RETRY


def test_pool_state_round_trips_whole_through_the_workflow_input() -> None:
    state = PoolState(generation=3, replacements_owed=2)
    state.fates.set(["b", "a"], Fate.DOOMED)
    state.slots.open_batch("b0", 3, [5], NOW)
    state.backoff.pause("RegionDown: x", settings=SETTINGS, now=NOW)
    # The health check's last word (it reports again only on news).
    state.health = HealthReport(
        checked_at=NOW, devices=4, unhealthy=4, max_unhealthy=1, paused=True
    )
    payload = PoolInput(metadata=ObjectMeta(name="p"), spec=spec(), state=state).to_json_dict()
    assert payload["state"]["fates"] == {"b": "doomed", "a": "doomed"}
    assert PoolInput.model_validate(payload).state == state


def test_a_rollout_takes_idle_drifted_devices_first_within_surge_and_unavailable() -> None:
    from devicepool.workflows.pool.lifecycle import roll

    drift = ["old-busy", "old-1", "old-2", "old-3"]  # oldest first
    first = roll([], drift, surge=1, unavailable=0, protected=(), busy={"old-busy"})
    assert first == ["old-1"]  # the busy one waits for its session
    assert roll(first, drift, surge=2, unavailable=1, protected={"old-2"}, busy=()) == [
        "old-1",
        "old-busy",
        "old-3",
    ]
    # With nothing idle left, the busy one is next.
    assert roll([], ["old-busy"], surge=1, unavailable=0, protected=(), busy={"old-busy"}) == [
        "old-busy"
    ]


def test_disruption_budgets_hold_voluntary_replacements_within_the_tightest_active_one() -> None:
    from devicepool.api.v1beta1 import DisruptionReason as R
    from devicepool.api.v1beta1 import DisruptionSpec
    from devicepool.workflows.pool.lifecycle import Budgets

    spec = DisruptionSpec.model_validate(
        {
            "budgets": [
                {"devices": "10%", "reasons": ["Drifted", "Expired"]},  # 2 of 20, rounded up
                # weekdays 09:00-17:00 UTC: nothing expires (NOW is a Tuesday, 12:00)
                {
                    "devices": 0,
                    "reasons": ["Expired"],
                    "schedule": "0 9 * * mon-fri",
                    "duration": "8h",
                },
            ]
        }
    )
    budgets = Budgets(spec, replicas=20, now=NOW)
    assert budgets.take(R.EXPIRED, ["e1", "e2"]) == []  # the business-hours window is on
    assert budgets.take(R.DRIFTED, ["d1", "d2", "d3"]) == ["d1", "d2"]
    assert budgets.left(R.SCALE_DOWN) is None  # no budget covers it: not limited
    evening = Budgets(spec, replicas=20, now=NOW.replace(hour=18))
    assert evening.take(R.EXPIRED, ["e1", "e2", "e3"]) == ["e1", "e2"]  # outside: 10% only
    assert evening.take(R.DRIFTED, ["d1"]) == []  # the shared 10% is spent


def test_a_scale_down_budget_leaves_the_rest_blocked() -> None:
    p = plan_pool(
        replicas=1, devices=ready(4), in_flight=0, now=NOW, idle_grace=timedelta(0), max_terminate=1
    )
    assert (len(p.terminate), p.blocked_surplus) == (1, 2)
