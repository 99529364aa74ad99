"""The janitor's bookkeeping (`workflows/orphans/state.py`): pure, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devicepool.activities.orphan_models import (
    FindOrphansResult,
    JanitorConfig,
    KeptDevice,
    OrphanDevice,
    TerminateOrphansResult,
)
from devicepool.workflows.orphans.state import RECENT_SWEPT, JanitorState, cost_usd, scan_seconds

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def orphan(device_id: str, pool: str = "gone") -> OrphanDevice:
    return OrphanDevice(id=device_id, pool=pool, status="ready", platform="android", created_at=T0)


def found(*ids: str) -> FindOrphansResult:
    return FindOrphansResult(orphans=[orphan(i) for i in ids], devices=len(ids), pools=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("grace", "every"), [(600, 150), (3600, 150), (60, 15), (8, 2), (2, 1), (0, 1)]
)
def test_scans_run_every_quarter_grace_within_one_second_and_150(
    grace: float, every: float
) -> None:
    assert scan_seconds(grace) == every


def test_an_orphan_is_due_only_after_the_grace_from_the_scan_that_first_saw_it() -> None:
    s = JanitorState(config=JanitorConfig(grace_seconds=600))
    s.observe(found("a"), at(0))
    s.observe(found("a", "b"), at(300))
    assert s.due(at(599)) == []
    assert s.due(at(600)) == ["a"]
    # b's grace runs from its own first sighting
    s.observe(found("a", "b"), at(600))
    assert s.due(at(899)) == ["a"]
    assert s.due(at(900)) == ["a", "b"]


def test_an_orphan_not_found_by_a_scan_is_forgotten_and_starts_over() -> None:
    s = JanitorState(config=JanitorConfig(grace_seconds=600))
    s.observe(found("a"), at(0))
    s.observe(found(), at(150))  # its pool runs again
    s.observe(found("a"), at(300))
    assert s.due(at(600)) == []
    assert s.seen["a"].first_seen_at == at(300)


def test_terminated_devices_are_remembered_and_settled_kept_ones_forgotten() -> None:
    s = JanitorState(config=JanitorConfig(grace_seconds=10))
    s.observe(found("a", "b", "c", "d"), at(0))
    s.record(
        TerminateOrphansResult(
            terminated=[orphan("a")],
            kept=[
                KeptDevice(id="b", why="pool gone is running"),
                KeptDevice(id="c", why="already gone"),
                KeptDevice(id="d", why="delete failed (server_error)", settled=False),
            ],
        ),
        at(12),
        reason="grace",
    )
    assert set(s.seen) == {"d"}  # the next scan decides d again
    assert s.terminated_total == 1
    (event,) = s.swept
    assert (event.device.id, event.reason, event.orphaned_seconds, event.at) == (
        "a",
        "grace",
        12.0,
        at(12),
    )


def test_the_swept_list_is_bounded() -> None:
    s = JanitorState()
    for i in range(RECENT_SWEPT + 5):
        s.record(TerminateOrphansResult(terminated=[orphan(str(i))]), at(i), reason="manual")
    assert len(s.swept) == RECENT_SWEPT
    assert s.swept[-1].device.id == str(RECENT_SWEPT + 4)
    assert s.terminated_total == RECENT_SWEPT + 5


def test_the_janitor_wakes_at_the_next_scan_or_when_the_earliest_orphan_falls_due() -> None:
    s = JanitorState(config=JanitorConfig(grace_seconds=600))
    assert s.next_wake(at(0)) == at(150)
    s.observe(found("a"), at(0))
    assert s.next_wake(at(500)) == at(600)  # due before the next scan
    assert s.next_wake(at(700)) == at(701)  # overdue: at least a second on


def test_the_state_survives_continue_as_new_whole() -> None:
    s = JanitorState(config=JanitorConfig(grace_seconds=5))
    s.observe(found("a"), at(0))
    s.record(TerminateOrphansResult(terminated=[orphan("b")]), at(1), reason="grace")
    again = JanitorState.model_validate(s.to_json_dict())
    assert again == s


def test_the_report_lists_orphans_with_their_sweep_time() -> None:
    s = JanitorState(config=JanitorConfig(grace_seconds=600))
    s.observe(found("a"), at(10))
    report = s.report("default", at(20))
    (entry,) = report.orphans
    assert (entry.id, entry.first_seen_at, entry.sweep_at) == ("a", at(10), at(610))
    assert (report.account, report.grace_seconds, report.scan_seconds) == ("default", 600, 150)


def test_cost_is_a_tenth_of_a_dollar_per_device_hour() -> None:
    assert cost_usd(T0, T0 + timedelta(hours=3)) == pytest.approx(0.30)
    assert cost_usd(T0, T0 - timedelta(hours=1)) == 0
