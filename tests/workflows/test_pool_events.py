"""The pool's own events (issue 15, item 6), pure: the ring and what each event says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.models import PoolSettings
from devicepool.workflows.pool import events as pe
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler import events as ev
from devicepool.workflows.shared.protocol import BatchReport, HealthReport

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_ring_keeps_the_newest_and_counts_repeats() -> None:
    events: list[ev.PoolEvent] = []
    for i in range(30):
        events = ev.record(events, now=NOW + timedelta(seconds=i), reason="Scaled", message=str(i))
    assert len(events) == ev.LIMIT
    assert [e.message for e in events] == [str(i) for i in range(10, 30)]
    blocked = "TerminatePoolFailed: 503"
    for i in range(3):
        events = ev.record(
            events,
            now=NOW + timedelta(minutes=i),
            reason="TeardownBlocked",
            message=blocked,
            warning=True,
        )
    last = events[-1]
    assert (last.type, last.count, last.time, last.first_time) == (
        ev.EventType.WARNING,
        3,
        NOW + timedelta(minutes=2),
        NOW,
    )
    assert len(events) == ev.LIMIT


def test_a_busy_pools_leases_are_combined_and_push_nothing_out() -> None:
    events = ev.record([], now=NOW, reason="Scaled", message="replicas 2 -> 3")
    for i in range(100):
        for reason in ("Leased", "LeaseReleased"):
            events = ev.record(
                events,
                now=NOW + timedelta(seconds=i),
                reason=reason,
                message=f"d-{i} (lease l-{i})",
                similar=True,
            )
    assert [e.reason for e in events] == ["Scaled", "Leased", "LeaseReleased"]
    leased = events[1]
    assert (leased.count, leased.first_time, leased.time) == (100, NOW, NOW + timedelta(seconds=99))
    assert leased.message == "(combined from similar events): d-99 (lease l-99)"
    # Not alike: another type, or one too far back, is an event of its own.
    warned = ev.record(events, now=NOW, reason="Leased", message="x", warning=True, similar=True)
    assert [e.type for e in warned[-2:]] == [ev.EventType.NORMAL, ev.EventType.WARNING]


def test_a_long_message_is_cut() -> None:
    [event] = ev.record([], now=NOW, reason="BackOff", message="x" * 5000)
    assert len(event.message) == ev.MESSAGE_CHARS and event.message.endswith("…")


def test_events_are_carried_across_continue_as_new() -> None:
    state = PoolState(events=ev.record([], now=NOW, reason="Created", message="pool created"))
    again = PoolState.model_validate(state.to_json_dict())
    assert again.events == state.events
    assert state.to_json_dict()["events"][0]["reason"] == "Created"
    assert PoolState.model_validate({"slots": {}}).events == []  # state from before the field


def test_scaled_and_configured() -> None:
    assert pe.applied(old_replicas=6, new_replicas=5, generation=3) == pe.Happened(
        "Scaled", "replicas 6 -> 5 (generation 3)"
    )
    assert pe.applied(old_replicas=5, new_replicas=5, generation=4).reason == "Configured"


def test_a_batch_report_is_news_once() -> None:
    book = SlotBook()
    book.open_batch("b1", 1, [0, 1, 2, 3], NOW)
    withdrawn = BatchReport(workflow_id="b1", slots=[0, 1, 2, 3], withdrawn=[3])
    assert pe.batches_settled(book, [withdrawn]) == [
        pe.Happened("Withdrawn", "1 create(s) not yet rented dropped (fewer replicas wanted)")
    ]
    book.inbox.created.append(withdrawn)
    book.settle_created(1)
    created = BatchReport(
        workflow_id="b1",
        slots=[0, 1, 2, 3],
        created={0: "d0", 1: "d1"},
        failed_slots={2: "server_error: 500"},
        withdrawn=[3],
    )
    said = pe.batches_settled(book, [created])
    assert [h.reason for h in said] == ["Created", "CreateFailed"]
    assert said[0].message == "created 2 device(s): d0, d1"
    assert said[1].warning and "1 create(s) failed, retried: server_error: 500" in said[1].message


def test_how_a_batch_ended() -> None:
    report = BatchReport(
        workflow_id="b",
        slots=[0, 1, 2],
        ready=["d0"],
        failed_devices={"d1": "not ready after the startup timeout (300s)"},
        vanished_devices={"d2": "not found at the provider"},
    )
    said = pe.batch_done(report)
    assert [(h.reason, h.warning) for h in said] == [
        ("Ready", False),
        ("BootFailed", True),
        ("Vanished", False),
    ]
    assert said[2].message == (
        "1 device(s) gone before they booted, replaced: d2 (not found at the provider)"
    )
    assert pe.batch_done(report.model_copy(update={"cancelled": True})) == []
    # A booting device the pool's own scale-down removed is no news here.
    assert [h.reason for h in pe.batch_done(report, ours={"d2"})] == ["Ready", "BootFailed"]


def test_devices_offline_before_they_booted_are_left_to_the_health_check() -> None:
    report = BatchReport(workflow_id="b", slots=[0, 1], offline_devices={"d0": "region_down"})
    [said] = pe.batch_done(report)
    assert (said.reason, said.warning) == ("OfflineWhileBooting", True)
    assert said.message == (
        "1 device(s) went offline before they booted, left to the health check: d0"
    )
    # Neither a failed boot nor a success: the failure streak is left as it was.
    backoff = Backoff(failure_streak=2)
    settings = PoolSettings(failure_streak_limit=3)
    assert backoff.record(report, region="r", settings=settings, now=NOW) is None
    assert backoff.failure_streak == 2


def test_replaced_paused_and_resumed() -> None:
    def report(**kw: object) -> HealthReport:
        base: dict[str, object] = {
            "checked_at": NOW,
            "devices": 10,
            "unhealthy": 1,
            "max_unhealthy": 4,
            "paused": False,
        }
        return HealthReport.model_validate({**base, **kw})

    replaced = pe.health(
        None,
        report(terminated={"dev-1": "Offline: offline for 185s (threshold 180s)"}),
        max_unhealthy="40%",
    )
    assert replaced == [
        pe.Happened("Replaced", "replaced dev-1 (offline for 185s (threshold 180s))")
    ]
    paused = report(unhealthy=6, paused=True)
    [pause] = pe.health(report(), paused, max_unhealthy="40%")
    assert (pause.reason, pause.warning) == ("RemediationPaused", True)
    assert pause.message.startswith("6 of 10 devices unhealthy, more than maxUnhealthy (40% = 4)")
    assert pe.health(paused, paused, max_unhealthy="40%") == []
    [resumed] = pe.health(paused, report(), max_unhealthy="40%")
    assert resumed.reason == "RemediationResumed"


def test_back_off_and_terminations() -> None:
    backoff = Backoff(problem="ReplacementsFailing: 3 device(s) in a row", seconds=30)
    assert pe.backed_off(backoff) == pe.Happened(
        "BackOff", "creates paused 30s: ReplacementsFailing: 3 device(s) in a row", warning=True
    )
    said = pe.terminations(surplus=["a", "b"], doomed=["f"], skipped={"b": "status busy"})
    assert [h.message for h in said] == [
        "terminated 1 device(s): a",
        "terminated 1 failed device(s): f",
        "1 device(s) busy since the plan: b (status busy)",
    ]
    again = pe.terminations(surplus=["a"], doomed=[], skipped={"a": "status terminating"})
    assert again == []
    many = pe.ids(f"d{i}" for i in range(8))
    assert many == "d0, d1, d2, d3, d4 and 3 more"
