"""The orphan sweep's carried state and its bookkeeping, pure (no Temporal calls).

`JanitorInput` starts a run (`worker/accounts.py`) and carries `JanitorState` whole
to the next. What an orphan is, when it is due, how often scans run, and its cost
(`DEVICE_HOUR_USD`, a documented constant: no config names a price): docs/pools.md,
"Orphans".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from devicepool.activities.orphan_models import (
    FindOrphansResult,
    JanitorConfig,
    KeptDevice,
    OrphanDevice,
    TerminateOrphansResult,
)
from devicepool.api.base import CamelModel

__all__ = [
    "DEVICE_HOUR_USD",
    "RECENT_SWEPT",
    "JanitorInput",
    "JanitorState",
    "OrphanEntry",
    "OrphanRecord",
    "OrphanReport",
    "SweepRequest",
    "SweptDevice",
    "cost_usd",
    "scan_seconds",
]

DEVICE_HOUR_USD = 0.10
# How many terminated devices the janitor remembers (its query, its details).
RECENT_SWEPT = 50
SCAN_MIN_SECONDS = 1.0
SCAN_MAX_SECONDS = 150.0


def scan_seconds(grace_seconds: float) -> float:
    """How often the janitor lists its account: grace/4, within [1 s, 150 s]."""
    return min(max(grace_seconds / 4, SCAN_MIN_SECONDS), SCAN_MAX_SECONDS)


def cost_usd(created_at: datetime, now: datetime) -> float:
    """What a device has cost since its creation, at `DEVICE_HOUR_USD`."""
    hours = max((now - created_at).total_seconds(), 0.0) / 3600
    return round(hours * DEVICE_HOUR_USD, 4)


class OrphanRecord(CamelModel):
    device: OrphanDevice
    first_seen_at: datetime


class SweptDevice(CamelModel):
    """A device the janitor terminated: the event an operator looks for."""

    device: OrphanDevice
    at: datetime
    # "grace" (orphaned past the grace period) or "manual" (`devicepool orphans --delete`)
    reason: str
    orphaned_seconds: float


class OrphanEntry(OrphanDevice):
    """An orphan as `devicepool orphans` lists it."""

    first_seen_at: datetime
    # when it is terminated unless its pool runs again by then
    sweep_at: datetime


class SweepRequest(CamelModel):
    """Update `sweep_orphans`: scan now; with `delete`, terminate every orphan now."""

    delete: bool = False


class OrphanReport(CamelModel):
    """What the janitor knows (query `orphans`), or what a sweep did (update `sweep_orphans`)."""

    account: str
    grace_seconds: float
    scan_seconds: float
    scanned_at: datetime | None = None
    last_error: str | None = None
    devices: int = 0
    pools: int = 0
    # every orphan the last scan found (`orphans` holds at most MAX_ORPHANS_PER_SCAN)
    orphans_found: int = 0
    orphans: list[OrphanEntry] = Field(default_factory=list)
    terminated_total: int = 0
    swept: list[SweptDevice] = Field(default_factory=list)
    # parked cloud phones found still powered and sent a shutdown again, so far
    parked_shut_down_total: int = 0
    # only in the answer to a sweep with `delete`
    terminated: list[OrphanDevice] = Field(default_factory=list)
    kept: list[KeptDevice] = Field(default_factory=list)


class JanitorState(CamelModel):
    config: JanitorConfig = Field(default_factory=JanitorConfig)
    # device id -> the orphan and when a scan first saw it orphaned
    seen: dict[str, OrphanRecord] = Field(default_factory=dict)
    # the last RECENT_SWEPT devices terminated, oldest first
    swept: list[SweptDevice] = Field(default_factory=list)
    terminated_total: int = 0
    scans: int = 0
    scanned_at: datetime | None = None
    last_error: str | None = None
    devices: int = 0
    pools: int = 0
    orphans_found: int = 0
    parked_shut_down_total: int = 0

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.config.grace_seconds)

    def observe(self, found: FindOrphansResult, now: datetime) -> None:
        """A scan's answer: new orphans start their grace now; ones not found are forgotten."""
        self.seen = {
            o.id: OrphanRecord(
                device=o,
                first_seen_at=self.seen[o.id].first_seen_at if o.id in self.seen else now,
            )
            for o in found.orphans
        }
        self.scans += 1
        self.scanned_at = now
        self.devices, self.pools = found.devices, found.pools
        self.orphans_found = max(found.orphans_found, len(found.orphans))
        self.parked_shut_down_total += found.parked_shut_down
        self.last_error = None

    def due(self, now: datetime) -> list[str]:
        """Orphans whose grace has run out, oldest first."""
        ready = [r for r in self.seen.values() if now - r.first_seen_at >= self.grace]
        return [r.device.id for r in sorted(ready, key=lambda r: (r.first_seen_at, r.device.id))]

    def record(self, result: TerminateOrphansResult, now: datetime, *, reason: str) -> None:
        """A termination's answer: what went is remembered, what is settled is forgotten."""
        for device in result.terminated:
            record = self.seen.pop(device.id, None)
            first = record.first_seen_at if record is not None else now
            self.swept.append(
                SweptDevice(
                    device=device,
                    at=now,
                    reason=reason,
                    orphaned_seconds=(now - first).total_seconds(),
                )
            )
        self.swept = self.swept[-RECENT_SWEPT:]
        self.terminated_total += len(result.terminated)
        for kept in result.kept:
            # Its pool runs again, or it is gone already: no longer an orphan.
            # Not known (a failed read or delete): the next scan decides again.
            if kept.settled:
                self.seen.pop(kept.id, None)

    def next_wake(self, now: datetime) -> datetime:
        """The next scan: one interval on, or sooner when an orphan falls due first."""
        due = (record.first_seen_at + self.grace for record in self.seen.values())
        wake = min([now + timedelta(seconds=scan_seconds(self.config.grace_seconds)), *due])
        return max(wake, now + timedelta(seconds=SCAN_MIN_SECONDS))

    def report(self, account: str, now: datetime) -> OrphanReport:
        return OrphanReport(
            account=account,
            grace_seconds=self.config.grace_seconds,
            scan_seconds=scan_seconds(self.config.grace_seconds),
            scanned_at=self.scanned_at,
            last_error=self.last_error,
            devices=self.devices,
            pools=self.pools,
            orphans_found=self.orphans_found,
            orphans=[
                OrphanEntry(
                    **r.device.model_dump(),
                    first_seen_at=r.first_seen_at,
                    sweep_at=r.first_seen_at + self.grace,
                )
                for r in sorted(self.seen.values(), key=lambda r: (r.device.pool, r.device.id))
            ],
            terminated_total=self.terminated_total,
            swept=list(self.swept),
            parked_shut_down_total=self.parked_shut_down_total,
        )


class JanitorInput(CamelModel):
    account: str
    config: JanitorConfig | None = None
    # Carried across continue-as-new (None: a new janitor).
    state: JanitorState | None = None
