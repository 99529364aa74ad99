"""`describe` and `get` tables as a person reads them (issue 15, items 5 and 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devicepool.api.kinds import DEVICE_POOL
from devicepool.client._cli_kinds import print_pools
from devicepool.client._cli_views import POOL_HEADERS, event_age, print_description
from devicepool.client._results import PoolSummary

NOW = datetime.now(UTC)


def iso(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat()


def description(events: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p1", "creationTimestamp": iso(3600)},
        "spec": {"platform": "android", "region": "us-west", "replicas": 6},
        "status": {
            "phase": "Provisioning",
            "desiredReplicas": 6,
            "readyDevices": 1,
            "provisioningDevices": 2,
            "pendingDevices": 3,
            "conditions": [],
        },
        "workflow": {"id": "devicepool/p1", "runId": "r", "status": "RUNNING"},
        "devices": [],
        "events": events,
    }


def test_describe_shows_the_pools_own_events_with_age_and_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    events: list[dict[str, Any]] = [
        {"time": iso(600), "type": "Normal", "reason": "Scaled", "message": "replicas 5 -> 6"},
        {
            "time": iso(180),
            "type": "Warning",
            "reason": "TeardownBlocked",
            "message": "cannot delete devices",
            "count": 4,
            "firstTime": iso(900),
        },
    ]
    print_description(description(events))
    out = capsys.readouterr().out
    assert "1 ready | 0 busy | 2 provisioning | 3 pending | 0 offline" in out
    lines = out[out.index("Events:") :].splitlines()
    assert lines[1].split() == ["TYPE", "REASON", "AGE", "MESSAGE"]
    assert lines[2].split() == ["Normal", "Scaled", "10m", "replicas", "5", "->", "6"]
    assert "Warning   TeardownBlocked   3m (x4 over 15m)   cannot delete devices" in lines[3]
    assert "TimerStarted" not in out


def test_describe_says_when_no_worker_answered_or_nothing_happened(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_description(description(None))
    assert "Events:\n  (no worker answered)" in capsys.readouterr().out
    print_description(description([]))
    assert "Events:\n  <none>" in capsys.readouterr().out


def test_event_age_of_a_single_event_is_its_age() -> None:
    assert event_age({"time": iso(45), "count": 1}) == "45s"


def test_get_shows_pending_apart_from_provisioning(capsys: pytest.CaptureFixture[str]) -> None:
    pool = PoolSummary(
        name="p1",
        spec={"platform": "android", "region": "us-west", "replicas": 95},
        status={
            "desiredReplicas": 95,
            "readyDevices": 0,
            "provisioningDevices": 15,
            "pendingDevices": 80,
            "offlineDevices": 0,
            "phase": "Provisioning",
        },
        created=NOW - timedelta(seconds=60),
    )
    print_pools([pool], [DEVICE_POOL])
    header, row = capsys.readouterr().out.strip().splitlines()
    columns = dict(zip(header.split(), row.split(), strict=True))
    assert (columns["PROV"], columns["PENDING"]) == ("15", "80")


def test_the_readme_names_the_columns_get_prints() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    said = [line for line in readme.splitlines() if "NAME PLATFORM" in line]
    assert said, "the README no longer shows get's columns"
    for line in said:
        assert " ".join(POOL_HEADERS) in line, line


def test_describe_shows_rollout_progress_and_spend(capsys: pytest.CaptureFixture[str]) -> None:
    data = description([])
    data["spec"] |= {
        "rollout": {"maxSurge": 2, "maxUnavailable": 0},
        "spendCap": {"maxDevices": 8},
    }
    data["status"] |= {"updatedDevices": 4, "hourlyCost": 0.6, "costToDate": 1.25}
    print_description(data)
    out = capsys.readouterr().out
    assert "4/6 updated (maxSurge 2, maxUnavailable 0)" in out
    assert "$0.6/h now, $1.25 to date (spendCap maxDevices 8)" in out
    print_description(description([]))
    out = capsys.readouterr().out
    assert "updated" not in out  # no rollout: no line
    assert "$0/h now, $0 to date\n" in out
