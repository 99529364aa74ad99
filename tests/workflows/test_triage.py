"""The health check's pure decisions (workflows/health/triage.py): unhealthy, due, paused, reported.

Nothing here touches Temporal: none of the session fixtures in conftest.py is
requested, so no server starts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.activities.models import (
    BUSY,
    DEVICE_STATUSES,
    FAILED,
    OFFLINE,
    PROVISIONING,
    READY,
    DeviceStatusInfo,
)
from devicepool.workflows.health.triage import (
    METRIC_REASON,
    REASON_OFFLINE,
    REASON_STARTUP_TIMEOUT,
    Triage,
    health_report,
    reason_kind,
    triage,
    went_offline,
)

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
OFFLINE_AFTER = timedelta(seconds=180)
STARTUP = timedelta(seconds=300)
OLD = NOW - timedelta(hours=1)  # created long ago


def sec(n: float) -> timedelta:
    return timedelta(seconds=n)


def dev(
    device_id: str, status: str, *, updated_at: datetime | None = None, created_at: datetime = OLD
) -> tuple[DeviceStatusInfo, datetime]:
    return DeviceStatusInfo(id=device_id, status=status, updated_at=updated_at), created_at


def judge(
    statuses: list[tuple[DeviceStatusInfo, datetime]],
    *,
    offline_since: dict[str, datetime] | None = None,
    last_check_at: datetime | None = None,
    max_unhealthy: int | str = "40%",
    replicas: int | None = None,
    now: datetime = NOW,
) -> Triage:
    return triage(
        statuses,
        offline_since=offline_since or {},
        last_check_at=last_check_at,
        max_unhealthy=max_unhealthy,
        replicas=replicas,
        now=now,
        offline_after=OFFLINE_AFTER,
        startup_timeout=STARTUP,
    )


# ---------------------------------------------------------------- offline clocks


def test_a_device_newly_offline_starts_its_clock_and_is_not_yet_due() -> None:
    found = judge([dev("d1", OFFLINE, updated_at=NOW - sec(20)), dev("d2", READY)])
    assert found.offline_since == {"d1": NOW - sec(20)}
    assert found.unhealthy == ["d1"]
    assert found.offline == ["d1"]
    assert found.due == {}


def test_offline_past_the_threshold_is_due_with_its_reason() -> None:
    found = judge([dev("d1", OFFLINE)], offline_since={"d1": NOW - sec(200)})
    assert found.due == {"d1": "Offline: offline for 200s (threshold 180s)"}
    assert reason_kind(found.due["d1"]) == REASON_OFFLINE
    assert METRIC_REASON[REASON_OFFLINE] == "offline"


def test_exactly_at_the_threshold_is_due() -> None:
    found = judge([dev("d1", OFFLINE)], offline_since={"d1": NOW - OFFLINE_AFTER})
    assert "d1" in found.due


def test_a_device_back_before_the_threshold_loses_its_clock() -> None:
    found = judge([dev("d1", READY)], offline_since={"d1": NOW - sec(100)})
    assert found.offline_since == {}
    assert found.unhealthy == []


def test_a_device_no_longer_listed_loses_its_clock() -> None:
    found = judge([dev("d2", OFFLINE)], offline_since={"gone": NOW - sec(999), "d2": NOW})
    assert found.offline_since == {"d2": NOW}


def test_the_clocks_passed_in_are_not_changed() -> None:
    clocks = {"d1": NOW - sec(5), "gone": NOW}
    judge([dev("d1", READY)], offline_since=clocks)
    assert clocks == {"d1": NOW - sec(5), "gone": NOW}


def test_went_offline_is_the_providers_time_within_bounds() -> None:
    status, _ = dev("d1", OFFLINE, updated_at=NOW - sec(30))
    assert went_offline(status, NOW, None) == NOW - sec(30)
    # Never before the last check (which saw it not offline)...
    assert went_offline(status, NOW, NOW - sec(10)) == NOW - sec(10)
    # ...never in the future (clock skew)...
    ahead, _ = dev("d1", OFFLINE, updated_at=NOW + sec(30))
    assert went_offline(ahead, NOW, None) == NOW
    # ...and now when the provider gives no time.
    unknown, _ = dev("d1", OFFLINE)
    assert went_offline(unknown, NOW, NOW - sec(10)) == NOW


# ---------------------------------------------------------------- startup timeout


def test_stuck_in_provisioning_or_failed_past_the_startup_timeout_is_due() -> None:
    late = NOW - sec(301)
    found = judge(
        [
            dev("p", PROVISIONING, created_at=late),
            dev("f", FAILED, created_at=late),
            dev("young", PROVISIONING, created_at=NOW - sec(10)),
        ]
    )
    assert found.unhealthy == ["p", "f"]
    assert found.due == {
        "p": "StartupTimeout: still provisioning 301s after creation",
        "f": "StartupTimeout: still failed 301s after creation",
    }
    assert reason_kind(found.due["p"]) == REASON_STARTUP_TIMEOUT
    assert METRIC_REASON[REASON_STARTUP_TIMEOUT] == "startup_timeout"


def test_healthy_devices_busy_or_ready_are_never_touched() -> None:
    found = judge([dev("b", BUSY), dev("r", READY)])
    assert (found.unhealthy, found.due, found.paused) == ([], {}, False)


# ---------------------------------------------------------------- pause


def test_too_many_unhealthy_at_once_pauses() -> None:
    statuses = [dev(f"d{i}", OFFLINE) for i in range(3)] + [dev("ok", READY)]
    clocks = {f"d{i}": NOW - sec(999) for i in range(3)}
    found = judge(statuses, offline_since=clocks, max_unhealthy="50%")
    assert found.max_unhealthy == 2
    assert found.paused
    assert len(found.due) == 3  # due, but the workflow replaces none while paused


def test_at_the_limit_does_not_pause() -> None:
    statuses = [dev("d0", OFFLINE), dev("d1", OFFLINE), dev("ok", READY)]
    assert not judge(statuses, max_unhealthy=2).paused
    assert judge(statuses, max_unhealthy=1).paused


@settings(max_examples=200, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(DEVICE_STATUSES)), max_size=20),
    limit=st.integers(min_value=0, max_value=20),
)
def test_paused_exactly_when_unhealthy_exceed_the_limit(kinds: list[str], limit: int) -> None:
    statuses = [dev(f"d{i}", kind, created_at=NOW - sec(400)) for i, kind in enumerate(kinds)]
    found = judge(statuses, max_unhealthy=limit)
    expected = [f"d{i}" for i, k in enumerate(kinds) if k in (OFFLINE, PROVISIONING, FAILED)]
    assert found.unhealthy == expected
    assert found.paused == (len(expected) > limit)
    assert set(found.due) <= set(found.unhealthy)
    assert set(found.offline_since) == {f"d{i}" for i, k in enumerate(kinds) if k == OFFLINE}


# ---------------------------------------------------------------- maxUnhealthy for every size


def offline_pool(size: int, offline: int) -> list[tuple[DeviceStatusInfo, datetime]]:
    return [dev(f"d{i}", OFFLINE if i < offline else READY) for i in range(size)]


def long_offline(offline: int) -> dict[str, datetime]:
    return {f"d{i}": NOW - sec(999) for i in range(offline)}


def test_a_one_or_two_device_pool_replaces_its_offline_device_with_the_default() -> None:
    # 40% of 1 or 2 rounds down to 0; one replacement at a time is always allowed.
    for size in (1, 2):
        found = judge(offline_pool(size, 1), offline_since=long_offline(1), replicas=size)
        assert found.max_unhealthy == 1, size
        assert not found.paused, size
        assert found.due.keys() == {"d0"}


def test_two_of_two_offline_still_pauses() -> None:
    found = judge(offline_pool(2, 2), offline_since=long_offline(2), replicas=2)
    assert (found.max_unhealthy, found.paused) == (1, True)


def test_six_of_ten_offline_is_an_outage_and_pauses() -> None:
    found = judge(offline_pool(10, 6), offline_since=long_offline(6), replicas=10)
    assert (found.max_unhealthy, found.paused) == (4, True)
    assert not judge(offline_pool(10, 4), replicas=10).paused


def test_a_percentage_is_of_the_desired_replicas_not_of_the_devices_seen() -> None:
    # Scaling up to 20, 5 devices so far: 40% of 20 = 8 may be unhealthy...
    assert judge(offline_pool(5, 5), replicas=20).max_unhealthy == 8
    # ...scaling down to 5 from 20: 40% of 5 = 2, not 8.
    assert judge(offline_pool(20, 3), replicas=5).paused
    # A pool from before the desired size was told: the devices seen.
    assert judge(offline_pool(5, 3), replicas=None).max_unhealthy == 2


def test_a_count_is_a_count_and_zero_turns_replacement_off() -> None:
    assert judge(offline_pool(10, 3), max_unhealthy=3, replicas=10).max_unhealthy == 3
    for zero in (0, "0%"):
        found = judge(offline_pool(2, 1), max_unhealthy=zero, replicas=2)
        assert (found.max_unhealthy, found.paused) == (0, True), zero


@settings(max_examples=200, deadline=None)
@given(
    replicas=st.integers(min_value=0, max_value=500),
    percent=st.integers(min_value=1, max_value=100),
)
def test_any_percentage_allows_at_least_one_and_at_most_its_share(
    replicas: int, percent: int
) -> None:
    found = judge(offline_pool(1, 1), max_unhealthy=f"{percent}%", replicas=replicas)
    assert found.max_unhealthy == max(1, replicas * percent // 100)
    assert not found.paused


# ---------------------------------------------------------------- report and wake


def test_nothing_to_say_sends_nothing() -> None:
    found = judge([dev("r", READY)])
    assert health_report(found, terminated={}, devices=1, now=NOW, was_reporting=False) is None


def test_recovery_is_reported_once() -> None:
    found = judge([dev("r", READY)], max_unhealthy=3)
    report = health_report(found, terminated={}, devices=1, now=NOW, was_reporting=True)
    assert report is not None
    assert (report.unhealthy, report.paused, report.terminated, report.max_unhealthy) == (
        0,
        False,
        {},
        3,
    )


def test_a_check_that_found_something_reports_it() -> None:
    found = judge([dev("b", OFFLINE), dev("a", OFFLINE)], max_unhealthy=5)
    terminated = {"x": "Offline: ..."}
    report = health_report(found, terminated=terminated, devices=2, now=NOW, was_reporting=False)
    assert report is not None
    assert report.checked_at == NOW
    assert (report.devices, report.unhealthy, report.max_unhealthy) == (2, 2, 5)
    assert report.offline == ["a", "b"]
    assert report.terminated == terminated
    assert not report.paused


def test_terminations_alone_are_reported() -> None:
    found = judge([dev("r", READY)])
    report = health_report(found, terminated={"x": "y"}, devices=1, now=NOW, was_reporting=False)
    assert report is not None
