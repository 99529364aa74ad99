"""The v1alpha1 models on their own: maxUnhealthy, the status shape."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from devicepool.api import (
    Condition,
    ConditionStatus,
    ConditionType,
    DevicePoolStatus,
    Phase,
    format_validation_error,
)
from devicepool.api.v1alpha1 import DevicePoolSpec, check_replicas, resolve_max_unhealthy


def spec(**extra: Any) -> DevicePoolSpec:
    return DevicePoolSpec.model_validate(
        {"platform": "android", "region": "us-west", "replicas": 10, **extra}
    )


def problems(**extra: Any) -> list[str]:
    with pytest.raises(pydantic.ValidationError) as info:
        spec(**extra)
    return format_validation_error(info.value, prefix="spec.")


@pytest.mark.parametrize(
    ("value", "stored", "count_of_10"),
    [(3, 3, 3), ("3", 3, 3), ("40%", "40%", 4), ("0%", "0%", 0), ("100%", "100%", 10), (0, 0, 0)],
)
def test_max_unhealthy_accepted(value: object, stored: object, count_of_10: int) -> None:
    pool = spec(maxUnhealthy=value)
    assert pool.max_unhealthy == stored
    assert resolve_max_unhealthy(pool.max_unhealthy, 10) == count_of_10


def test_max_unhealthy_default() -> None:
    assert spec().max_unhealthy == "40%"
    assert resolve_max_unhealthy(spec().max_unhealthy, 50) == 20


@pytest.mark.parametrize(("total", "count"), [(0, 1), (1, 1), (2, 1), (4, 1), (5, 2), (10, 4)])
def test_max_unhealthy_percentage_allows_at_least_one(total: int, count: int) -> None:
    assert resolve_max_unhealthy(spec().max_unhealthy, total) == count
    assert resolve_max_unhealthy(spec(maxUnhealthy="0%").max_unhealthy, total) == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("140%", "spec.maxUnhealthy: must be a count or a percentage such as '40%', got '140%'"),
        ("abc", "spec.maxUnhealthy: must be a count or a percentage such as '40%', got 'abc'"),
        (-1, "spec.maxUnhealthy: must be >= 0, got -1"),
        (True, "spec.maxUnhealthy: must be a count or a percentage such as '40%', got true"),
        (2.5, "spec.maxUnhealthy: must be a count or a percentage such as '40%', got 2.5"),
        ("-1", "spec.maxUnhealthy: must be a count or a percentage such as '40%', got '-1'"),
    ],
)
def test_max_unhealthy_refused(value: object, message: str) -> None:
    assert problems(maxUnhealthy=value) == [message]


def test_spec_serializes_camel_case() -> None:
    data = spec(osVersion="14", proxy={"poolRef": "p", "stickyTTL": 900}).to_json_dict()
    assert data == {
        "provider": "bitcloudphone",
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 10,
        "proxy": {"poolRef": "p", "stickyTTL": 900},
        "providerCredentialRef": "default",
        "maxUnhealthy": "40%",
    }


def test_status_serializes_camel_case_with_kubernetes_conditions() -> None:
    when = datetime(2025, 1, 31, 12, 0, tzinfo=UTC)
    status = DevicePoolStatus(
        phase=Phase.READY,
        desired_replicas=2,
        ready_devices=1,
        provisioning_devices=1,
        last_reconciled=when,
        observed_generation=3,
        device_ids=["d-1", "d-2"],
        conditions=[
            Condition(
                type=ConditionType.READY,
                status=ConditionStatus.FALSE,
                reason="Provisioning",
                message="1 of 2 devices ready",
                last_transition_time=when,
                observed_generation=3,
            )
        ],
    )
    data = status.to_json_dict()
    assert data == {
        "phase": "Ready",
        "desiredReplicas": 2,
        "readyDevices": 1,
        "provisioningDevices": 1,
        "busyDevices": 0,
        "offlineDevices": 0,
        "pendingDevices": 0,
        "hourlyCost": 0.0,
        "costToDate": 0.0,
        "lastReconciled": "2025-01-31T12:00:00Z",
        "observedGeneration": 3,
        "deviceIds": ["d-1", "d-2"],
        "protectedDevices": [],
        "updatedDevices": 0,
        "profilesRetired": 0,
        "leasedDevices": 0,
        "leasesQueued": 0,
        "leasesExpired": 0,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Provisioning",
                "message": "1 of 2 devices ready",
                "lastTransitionTime": "2025-01-31T12:00:00Z",
                "observedGeneration": 3,
            }
        ],
    }
    assert DevicePoolStatus.model_validate(data) == status
    assert status.condition("Ready") is not None
    assert status.condition("Progressing") is None


def test_status_problems_use_json_paths() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        DevicePoolStatus.model_validate(
            {"conditions": [{"type": "Ready", "status": "maybe", "lastTransitionTime": "soon"}]}
        )
    assert format_validation_error(info.value, prefix="status.") == [
        "status.conditions[0].status: must be one of True, False, Unknown, got 'maybe'",
        "status.conditions[0].lastTransitionTime: must be an RFC 3339 timestamp such as "
        "'2025-01-31T12:00:00Z', got 'soon'",
    ]


@pytest.mark.parametrize("replicas", [0, 1, 500])
def test_check_replicas_accepts_the_range(replicas: int) -> None:
    assert check_replicas(replicas) == replicas


@pytest.mark.parametrize(
    ("replicas", "message"),
    [(-1, "replicas: must be >= 0, got -1"), (501, "replicas: must be <= 500, got 501")],
)
def test_check_replicas_refuses_outside_the_range(replicas: int, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_replicas(replicas)
    assert str(info.value) == message
