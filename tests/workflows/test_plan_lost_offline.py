"""`plan.lost_offline`: which offline devices a new listing shows removed by someone else.

The pool credits each with a replacement (asked ahead of growth) even when the
health check's report of the termination has not arrived yet.
"""

from __future__ import annotations

from datetime import UTC, datetime

from devicepool.activities.models import (
    BUSY,
    OFFLINE,
    PROVISIONING,
    READY,
    TERMINATED,
    TERMINATING,
    DeviceInfo,
)
from devicepool.workflows.pool.plan import lost_offline, offline_ids
from devicepool.workflows.pool.state import PoolState

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def dev(id: str, status: str) -> DeviceInfo:
    return DeviceInfo(id=id, status=status, created_at=NOW)


def test_an_offline_device_terminating_terminated_or_absent_is_lost() -> None:
    before = [dev("a", OFFLINE), dev("b", OFFLINE), dev("c", OFFLINE), dev("d", READY)]
    after = [dev("a", TERMINATING), dev("b", TERMINATED), dev("d", READY)]
    assert lost_offline(offline_ids(before), after) == ["a", "b", "c"]


def test_back_online_or_still_offline_is_not_lost() -> None:
    before = [dev("a", OFFLINE), dev("b", OFFLINE), dev("c", OFFLINE)]
    after = [dev("a", READY), dev("b", OFFLINE), dev("c", BUSY)]
    assert lost_offline(offline_ids(before), after) == []


def test_only_devices_that_were_offline_count() -> None:
    # A ready device scaled down, a booting one removed: the pool's own doing, not a loss.
    before = [dev("a", READY), dev("b", PROVISIONING), dev("c", BUSY)]
    assert lost_offline(offline_ids(before), []) == []
    assert lost_offline([], [dev("x", TERMINATING)]) == []


def test_the_offline_devices_seen_last_are_carried_across_continue_as_new() -> None:
    # The new run's first listing may be the one that shows the device gone.
    state = PoolState(offline_seen=offline_ids([dev("a", OFFLINE), dev("b", READY)]))
    carried = PoolState.model_validate(state.to_json_dict())
    assert lost_offline(carried.offline_seen, [dev("b", READY)]) == ["a"]
    assert PoolState.model_validate({"slots": {}}).offline_seen == []  # state from before
