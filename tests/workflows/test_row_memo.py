"""A pool's row in its memo (`row_memo`): what `get` and the gauges read, and nothing that
moves with the clock alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from devicepool.api.browserpool.v1beta1 import BrowserPoolStatus
from devicepool.api.v1beta1 import (
    Condition,
    ConditionStatus,
    DevicePoolStatus,
    Phase,
)
from devicepool.workflows.reconciler.row_memo import (
    MAX_ROW_BYTES,
    LeaseFacts,
    pool_row,
    read_row,
)

T0 = datetime(2026, 12, 6, 0, 0, tzinfo=UTC)


def _device_status(**more: Any) -> dict[str, Any]:
    status = DevicePoolStatus(
        phase=Phase.READY,
        desired_replicas=3,
        ready_devices=2,
        busy_devices=1,
        hourly_cost=0.6,
        cost_to_date=12.5,
        last_reconciled=T0,
        observed_generation=4,
        device_ids=["d1", "d2", "d3"],
        leased_devices=1,
        leases_queued=1,
        oldest_queued_seconds=30.0,
        conditions=[
            Condition(
                type="Ready",
                status=ConditionStatus.TRUE,
                reason="AllReady",
                message="3 of 3",
                last_transition_time=T0,
            )
        ],
    )
    return status.model_copy(update=more).to_json_dict()


def _through_the_memo(row: dict[str, Any]) -> Any:
    return read_row(json.loads(json.dumps(row)))


def test_an_idle_pool_s_row_does_not_change_with_the_clock() -> None:
    ticket = (T0, T0 + timedelta(minutes=5))
    leases = LeaseFacts(leased=1, queued=1, expired=0, oldest=ticket, max_wait=300.0)
    before = pool_row(_device_status(), created_at=T0, leases=leases)
    later = _device_status(
        last_reconciled=T0 + timedelta(hours=1), cost_to_date=13.1, oldest_queued_seconds=3630.0
    )
    assert pool_row(later, created_at=T0, leases=leases) == before
    assert "deviceIds" not in json.dumps(before)
    assert "message" not in json.dumps(before)


def test_a_row_read_back_carries_what_get_and_the_gauges_read() -> None:
    ticket = (T0, T0 + timedelta(minutes=5))
    leases = LeaseFacts(leased=2, queued=1, expired=3, oldest=ticket, max_wait=120.0)
    row = _through_the_memo(pool_row(_device_status(), created_at=T0, leases=leases))
    assert row is not None
    assert row.status == {
        "phase": "Ready",
        "desiredReplicas": 3,
        "readyDevices": 2,
        "busyDevices": 1,
        "provisioningDevices": 0,
        "pendingDevices": 0,
        "offlineDevices": 0,
        "updatedDevices": 0,
        "hourlyCost": 0.6,
        "observedGeneration": 4,
        "leasedDevices": 2,  # the book's, as `Leasing.shown` is about to write them
        "leasesQueued": 1,
        "leasesExpired": 3,
        "conditions": [{"type": "Ready", "status": "True", "reason": "AllReady"}],
    }
    assert row.created_at == T0
    assert row.max_wait == 120.0
    assert row.oldest == (T0.timestamp(), (T0 + timedelta(minutes=5)).timestamp())


def test_a_browser_pool_s_row_keeps_its_profiles_and_nodes() -> None:
    status = BrowserPoolStatus(
        phase=Phase.READY,
        desired_replicas=4,
        ready_profiles=4,
        open_profiles=3,
        lost_profiles=1,
        by_node={"node-1": 2, "node-2": 2},
        profile_ids=["p1", "p2", "p3", "p4"],
    ).to_json_dict()
    row = _through_the_memo(pool_row(status, created_at=None))
    assert row is not None
    assert row.status["byNode"] == {"node-1": 2, "node-2": 2}
    assert (row.status["openProfiles"], row.status["lostProfiles"]) == (3, 1)
    assert "profileIds" not in row.status and row.created_at is None


def test_five_hundred_devices_write_the_row_five_do() -> None:
    big = _device_status(device_ids=[f"device-{i:04d}" for i in range(500)], ready_devices=500)
    small = _device_status(device_ids=["d1"], ready_devices=500)
    assert pool_row(big, created_at=T0) == pool_row(small, created_at=T0)
    assert len(json.dumps(pool_row(big, created_at=T0))) < MAX_ROW_BYTES


def test_a_row_over_its_size_drops_the_node_list_and_is_read_as_none() -> None:
    nodes = {f"node-{i:04d}": 1 for i in range(500)}
    status = BrowserPoolStatus(desired_replicas=500, by_node=nodes).to_json_dict()
    row = pool_row(status, created_at=T0)
    assert len(json.dumps(row, separators=(",", ":"))) <= MAX_ROW_BYTES
    assert row["partial"] is True and "byNode" not in row["status"]
    assert _through_the_memo(row) is None  # its reader asks the pool instead


def test_a_hostile_row_is_no_row_or_loses_its_bad_fields() -> None:
    assert read_row(None) is None
    assert read_row("a row") is None
    assert read_row({"v": 2, "status": {}}) is None  # a newer build's
    assert read_row({"v": 1, "status": []}) is None
    row = read_row(
        {
            "v": 1,
            "status": {
                "readyDevices": -1,
                "busyDevices": True,
                "offlineDevices": "3",
                "hourlyCost": float("nan"),
                "pendingDevices": 1e20,
                "phase": 7,
                "conditions": [{"type": "Ready", "status": 1}, "x", {"status": "True"}],
            },
            "createdAt": "yesterday",
            "maxWait": float("inf"),
            "oldestTicket": {"createdAt": "2026-12-06T00:00:00Z"},
        }
    )
    assert row is not None
    assert row.status == {"conditions": [{"type": "Ready"}]}
    assert (row.created_at, row.max_wait, row.oldest) == (None, None, None)


def test_a_count_or_amount_past_an_exact_json_number_is_dropped_not_raised() -> None:
    # float(10**400) raises OverflowError: in a gauge it took every pool's samples with it.
    huge = 10**400
    row = read_row(
        {
            "v": 1,
            "status": {"readyDevices": huge, "byNode": {"node-1": huge}, "hourlyCost": huge},
            "maxWait": huge,
        }
    )
    assert row is not None
    assert row.status == {"byNode": {"node-1": 0}} and row.max_wait is None
    largest = read_row({"v": 1, "status": {"readyDevices": 2**53}})
    assert largest is not None and largest.status == {"readyDevices": 2**53}
