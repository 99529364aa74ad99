"""The provider's device JSON, reduced to the pool's view (`DeviceInfo`, `DeviceStatusInfo`).

Only what a pool needs is kept (never the proxy, with its password). Timestamps are
read leniently (RFC 3339, epoch seconds, or nothing), so one odd field never fails an
observation; a status is kept as the provider's string, known to `DeviceStatus` or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from devicepool.activities.models import (
    FAILED,
    OFFLINE,
    PROVISIONING,
    DeviceInfo,
    DeviceStatusInfo,
    HealthSuspect,
)

__all__ = ["device_info", "device_status_info", "health_suspects", "parse_time"]


def parse_time(value: Any) -> datetime | None:
    """A provider timestamp as a `datetime`, or None when absent or unreadable."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    text = str(value)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def device_info(raw: Mapping[str, Any]) -> DeviceInfo:
    """The pool's view of a provider device (drops everything else, e.g. the proxy)."""
    created = parse_time(raw.get("createdAt"))
    updated = parse_time(raw.get("updatedAt"))
    labels = raw.get("labels") or {}
    return DeviceInfo(
        id=str(raw["id"]),
        status=str(raw.get("status") or ""),
        region=str(raw.get("region") or ""),
        # `created_at` is required by the model; a provider that omits it gets the
        # best stand-in rather than a failed observation.
        created_at=created or updated or datetime.fromtimestamp(0, UTC),
        updated_at=updated,
        session_active=bool(raw.get("sessionActive", False)),
        last_activity_at=parse_time(raw.get("lastActivityAt")),
        reason=raw.get("reason"),
        labels={str(k): str(v) for k, v in labels.items()},
    )


def device_status_info(raw: Mapping[str, Any]) -> DeviceStatusInfo:
    """The pool's view of one entry of a status answer (`/status`, `status:batch`)."""
    return DeviceStatusInfo(
        id=str(raw["id"]),
        status=str(raw.get("status") or ""),
        reason=raw.get("reason"),
        session_active=bool(raw.get("sessionActive", False)),
        last_activity_at=parse_time(raw.get("lastActivityAt")),
        updated_at=parse_time(raw.get("updatedAt")),
    )


def health_suspects(
    devices: Iterable[DeviceInfo], *, now: datetime, startup_timeout: timedelta
) -> list[HealthSuspect]:
    """The devices a health check must judge: offline, or provisioning/failed past the startup timeout.

    Everything else is healthy (`workflows.triage`): the check needs only these
    and a count, not the whole listing.
    """
    return sorted(
        (
            HealthSuspect(
                id=d.id, status=d.status, created_at=d.created_at, updated_at=d.updated_at
            )
            for d in devices
            if d.status == OFFLINE
            or (d.status in (PROVISIONING, FAILED) and now - d.created_at >= startup_timeout)
        ),
        key=lambda s: s.id,
    )
