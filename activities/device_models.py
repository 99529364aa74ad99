"""What the pool knows of a device: its status vocabulary, its view, its compact rows.

Every provider adapter answers in `DeviceInfo` (a listing) and `DeviceStatusInfo` (a
status read), whatever its own JSON. Pure: workflows import this.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from devicepool.api.base import CamelModel
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, LABEL_TEMPLATE_HASH, MANAGED_BY

__all__ = [
    "ALIVE_STATUSES",
    "BUSY",
    "DEVICE_ROW",
    "DEVICE_STATUSES",
    "FAILED",
    "OFFLINE",
    "PROVISIONING",
    "READY",
    "REBOOTING",
    "TERMINATED",
    "TERMINATING",
    "UNKNOWN_STATUS_REASON",
    "DeviceInfo",
    "DeviceStatus",
    "DeviceStatusInfo",
    "HealthSuspect",
    "device_fingerprint",
    "device_rows",
    "devices_from_rows",
    "suspects_fingerprint",
]


class DeviceStatus(StrEnum):
    """A device's status at the provider. A member equals, hashes and serializes as its
    plain string: `DeviceStatus.READY == "ready"`."""

    PROVISIONING = "provisioning"
    READY = "ready"
    BUSY = "busy"
    OFFLINE = "offline"
    REBOOTING = "rebooting"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


# The module-level names existing code imports; each is the enum member itself.
PROVISIONING = DeviceStatus.PROVISIONING
READY = DeviceStatus.READY
BUSY = DeviceStatus.BUSY
OFFLINE = DeviceStatus.OFFLINE
REBOOTING = DeviceStatus.REBOOTING
TERMINATING = DeviceStatus.TERMINATING
TERMINATED = DeviceStatus.TERMINATED
FAILED = DeviceStatus.FAILED
DEVICE_STATUSES: tuple[DeviceStatus, ...] = tuple(DeviceStatus)
# A device the pool still pays for and still counts (not on its way out).
ALIVE_STATUSES: frozenset[DeviceStatus] = frozenset(
    {PROVISIONING, READY, BUSY, OFFLINE, REBOOTING, FAILED}
)
# How the `reason` of a device begins whose provider status an adapter does not know: it
# reads `offline` (the health check replaces it in time), yet may be powered on, so billing
# per running minute counts it as running.
UNKNOWN_STATUS_REASON = "status unknown to devicepool"


class DeviceInfo(CamelModel):
    """What the pool needs to know about one device (no secrets: the proxy is by name)."""

    id: str
    # Plain `str`, not `DeviceStatus`: a status a provider adds later still loads.
    status: str
    region: str = ""
    created_at: datetime
    updated_at: datetime | None = None
    session_active: bool = False
    last_activity_at: datetime | None = None
    reason: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @property
    def idle_since(self) -> datetime:
        """The moment the device last did anything (its idle clock starts there)."""
        return self.last_activity_at or self.updated_at or self.created_at


class DeviceStatusInfo(CamelModel):
    id: str
    status: str  # plain `str` on purpose, as in `DeviceInfo.status`
    reason: str | None = None
    session_active: bool = False
    last_activity_at: datetime | None = None
    updated_at: datetime | None = None


class HealthSuspect(CamelModel):
    """A device the health check must judge: offline, or still provisioning/failed too long."""

    id: str
    status: str
    created_at: datetime
    updated_at: datetime | None = None


def device_fingerprint(devices: list[DeviceInfo]) -> str:
    """A short stable digest of what a reconcile pass cares about in a device list.

    Pure (the workflow computes it too, to tell the watch activity what it last
    saw): ids, statuses and sessions; timestamps are left out on purpose so a
    heartbeat-only change at the provider does not wake the pool.
    """
    parts = sorted(f"{d.id}|{d.status}|{int(d.session_active)}" for d in devices)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# A compact listing: one JSON array per device, in this order. The pool's own
# label is implied by the listing (by `pool=<name>`); `managed-by=devicepool`
# is bit 1 of `flags` (bit 0: session active), `template-hash=<template_hash>`
# bit 2 where the answer names a `template_hash`; timestamps are epoch seconds
# to the millisecond; trailing empty cells are left out.
DEVICE_ROW = (
    "id",
    "status",
    "region",
    "createdAt",
    "updatedAt",
    "flags",
    "lastActivityAt",
    "reason",
    "labels",
)
_SESSION, _MANAGED, _TEMPLATE = 1, 2, 4


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else round(value.timestamp(), 3)


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def device_rows(
    devices: list[DeviceInfo], *, pool: str, template_hash: str | None = None
) -> list[list[Any]]:
    """`devices` as compact rows (`DEVICE_ROW`); `devices_from_rows` reads them back."""
    rows: list[list[Any]] = []
    for d in devices:
        labels = dict(d.labels)
        if labels.get(LABEL_POOL) == pool:
            del labels[LABEL_POOL]
        flags = _SESSION if d.session_active else 0
        if labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
            del labels[LABEL_MANAGED_BY]
            flags |= _MANAGED
        if template_hash is not None and labels.get(LABEL_TEMPLATE_HASH) == template_hash:
            del labels[LABEL_TEMPLATE_HASH]
            flags |= _TEMPLATE
        row: list[Any] = [
            d.id,
            d.status,
            d.region,
            _epoch(d.created_at),
            _epoch(d.updated_at),
            flags,
            _epoch(d.last_activity_at),
            d.reason,
            labels or None,
        ]
        while row[-1] is None:
            row.pop()
        rows.append(row)
    return rows


def devices_from_rows(
    rows: list[list[Any]], *, pool: str, template_hash: str | None = None
) -> list[DeviceInfo]:
    """The devices `device_rows` made rows of (pure: the workflow reads them)."""
    devices = []
    for row in rows:
        cell = dict(zip(DEVICE_ROW, row, strict=False))
        flags = int(cell.get("flags") or 0)
        labels = {LABEL_POOL: pool}
        if flags & _MANAGED:
            labels[LABEL_MANAGED_BY] = MANAGED_BY
        if flags & _TEMPLATE and template_hash is not None:
            labels[LABEL_TEMPLATE_HASH] = template_hash
        labels.update(cell.get("labels") or {})
        devices.append(
            DeviceInfo(
                id=cell["id"],
                status=cell["status"],
                region=cell.get("region") or "",
                created_at=_time(cell["createdAt"]) or datetime.fromtimestamp(0, UTC),
                updated_at=_time(cell.get("updatedAt")),
                session_active=bool(flags & _SESSION),
                last_activity_at=_time(cell.get("lastActivityAt")),
                reason=cell.get("reason"),
                labels=labels,
            )
        )
    return devices


def suspects_fingerprint(suspects: list[HealthSuspect]) -> str:
    """A short digest of the suspects' ids and statuses (pure; the workflow computes it too)."""
    if not suspects:
        return ""
    parts = sorted(f"{s.id}|{s.status}" for s in suspects)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
