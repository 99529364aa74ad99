"""The health check's decisions, pure: which devices are unhealthy, which to replace, whether to pause.

No Temporal, no I/O, no clock; `workflow.py` reads, terminates and reports. The rules
and why: docs/pools.md, "Health: replace, do not repair".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from devicepool.activities.models import FAILED, OFFLINE, PROVISIONING, DeviceStatusInfo
from devicepool.api.v1beta1 import resolve_max_unhealthy
from devicepool.workflows.shared.protocol import HealthReport

__all__ = [
    "METRIC_REASON",
    "REASON_OFFLINE",
    "REASON_STARTUP_TIMEOUT",
    "Triage",
    "health_report",
    "own_read_seconds",
    "reason_kind",
    "reuse_listing_seconds",
    "triage",
    "went_offline",
]

REASON_OFFLINE = "Offline"
REASON_STARTUP_TIMEOUT = "StartupTimeout"
# `devicepool_replacements_total{reason}` label for each.
METRIC_REASON = {REASON_OFFLINE: "offline", REASON_STARTUP_TIMEOUT: "startup_timeout"}


@dataclass(frozen=True)
class Triage:
    """What one check found, and what it decided."""

    # device id -> when it was first seen offline, after this check
    offline_since: dict[str, datetime]
    unhealthy: list[str]
    # device id -> reason, due for replacement now (unless paused)
    due: dict[str, str]
    offline: list[str]
    # the most unhealthy devices tolerated at once, for this many devices
    max_unhealthy: int
    paused: bool


def triage(
    statuses: Sequence[tuple[DeviceStatusInfo, datetime]],
    *,
    offline_since: Mapping[str, datetime],
    last_check_at: datetime | None,
    max_unhealthy: int | str,
    now: datetime,
    offline_after: timedelta,
    startup_timeout: timedelta,
    replicas: int | None = None,
    devices: int | None = None,
) -> Triage:
    """Judge each (status, created_at) of the pool's devices at `now`.

    `replicas`: the pool's desired size, what a percentage `max_unhealthy` is
    of; None (a pool that did not say) falls back to the devices seen.
    `devices`: how many devices the pool has, when `statuses` holds only the
    suspects (the health watch's compact answer); a device not among them is
    healthy, so it loses its clock as a device seen not offline does.
    """
    seen = {s.id for s, _ in statuses}
    clocks = {d: since for d, since in offline_since.items() if d in seen}
    unhealthy: list[str] = []
    due: dict[str, str] = {}
    offline: list[str] = []
    for status, created_at in statuses:
        if status.status == OFFLINE:
            offline.append(status.id)
            since = clocks.setdefault(status.id, went_offline(status, now, last_check_at))
            unhealthy.append(status.id)
            if now - since >= offline_after:
                due[status.id] = (
                    f"{REASON_OFFLINE}: offline for {int((now - since).total_seconds())}s "
                    f"(threshold {int(offline_after.total_seconds())}s)"
                )
            continue
        clocks.pop(status.id, None)  # back before the threshold
        if status.status in (PROVISIONING, FAILED) and now - created_at >= startup_timeout:
            unhealthy.append(status.id)
            due[status.id] = (
                f"{REASON_STARTUP_TIMEOUT}: still {status.status} "
                f"{int((now - created_at).total_seconds())}s after creation"
            )
    seen_count = len(statuses) if devices is None else devices
    total = seen_count if replicas is None else replicas
    limit = resolve_max_unhealthy(max_unhealthy, total)
    return Triage(
        offline_since=clocks,
        unhealthy=unhealthy,
        due=due,
        offline=offline,
        max_unhealthy=limit,
        paused=len(unhealthy) > limit,
    )


def reason_kind(reason: str) -> str:
    """`REASON_OFFLINE` or `REASON_STARTUP_TIMEOUT`, from a reason `triage` wrote."""
    return reason.split(":")[0]


def health_report(
    found: Triage,
    *,
    terminated: dict[str, str],
    devices: int,
    now: datetime,
    was_reporting: bool,
) -> HealthReport | None:
    """What to tell the pool after a check: whenever something is unhealthy, was replaced
    or remediation is paused, and once more after that (which clears the pool's
    condition); otherwise nothing (no signal every interval)."""
    if not (found.unhealthy or terminated or found.paused or was_reporting):
        return None
    return HealthReport(
        checked_at=now,
        devices=devices,
        unhealthy=len(found.unhealthy),
        max_unhealthy=found.max_unhealthy,
        paused=found.paused,
        terminated=terminated,
        offline=sorted(found.offline),
    )


def went_offline(
    status: DeviceStatusInfo, now: datetime, last_check_at: datetime | None
) -> datetime:
    """When a device newly seen offline went offline: the provider's `updatedAt`, never
    before the previous check (a provider that leaves `updatedAt` alone must not get a
    device replaced at first sight) nor in the future (clock skew)."""
    since = status.updated_at if status.updated_at is not None else now
    if last_check_at is not None:
        since = max(since, last_check_at)
    return min(since, now)


def reuse_listing_seconds(*, resync_seconds: float, health_seconds: float) -> float:
    """How old a listing of the pool's own watch may be for the health watch to judge it
    instead of reading the provider. Why 1.5 x: docs/pools.md, "Health"."""
    return 1.5 * min(resync_seconds, health_seconds)


def own_read_seconds(*, health_seconds: float, offline_after_seconds: float) -> float:
    """How far apart the health watch's own provider reads are where it has no listing
    of the pool's watch to reuse (docs/pools.md, "Health")."""
    return max(health_seconds, min(3 * health_seconds, offline_after_seconds))
