"""Device statuses are one enum; the models still carry whatever string the provider sent."""

from __future__ import annotations

from datetime import UTC, datetime

from devicepool.activities import models
from devicepool.activities.device_views import device_info, device_status_info
from devicepool.activities.models import DeviceInfo, DeviceStatus


def test_the_enum_is_the_contracts_lifecycle_and_the_old_names_are_its_members() -> None:
    assert [s.value for s in DeviceStatus] == [
        "provisioning",
        "ready",
        "busy",
        "offline",
        "rebooting",
        "terminating",
        "terminated",
        "failed",
    ]
    assert models.DEVICE_STATUSES == tuple(DeviceStatus)
    assert models.READY is DeviceStatus.READY
    assert models.ALIVE_STATUSES == set(DeviceStatus) - {
        DeviceStatus.TERMINATING,
        DeviceStatus.TERMINATED,
    }
    assert "offline" in models.ALIVE_STATUSES


def test_a_known_status_serializes_as_its_plain_string() -> None:
    device = DeviceInfo(id="d1", status=DeviceStatus.READY, created_at=datetime.now(UTC))
    assert device.to_json_dict()["status"] == "ready"
    assert device.model_dump_json().count('"status":"ready"') == 1
    assert type(device.status) is str


def test_a_status_the_enum_does_not_know_still_loads_and_round_trips() -> None:
    raw = {"id": "d1", "status": "hibernating", "createdAt": "2025-01-31T12:00:00Z"}
    device = device_info(raw)
    assert device.status == "hibernating"
    assert DeviceInfo.model_validate_json(device.model_dump_json()).status == "hibernating"
    assert device_status_info(raw).status == "hibernating"
