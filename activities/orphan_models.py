"""The orphan sweep's activities as workflows see them: inputs, results, definitions. No I/O.

What an orphan is and how the janitor (`workflows/orphans/workflow.py`) sweeps:
docs/pools.md, "Orphans". Like every activity model, these carry names and ids only.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from devicepool.api.base import CamelModel

__all__ = [
    "MAX_ORPHANS_PER_SCAN",
    "CountDevicesInput",
    "CountDevicesResult",
    "FindOrphansInput",
    "FindOrphansResult",
    "JanitorConfig",
    "KeptDevice",
    "OrphanDevice",
    "TerminateOrphansInput",
    "TerminateOrphansResult",
]


# ~250 bytes each in history: 1,000 is ~250 KB, well under the 2 MB payload limit.
MAX_ORPHANS_PER_SCAN = 1000


class JanitorConfig(CamelModel):
    """The worker's orphan settings, sent to the janitor at every worker start."""

    # How long a device stays an orphan before it is terminated (`orphanGraceSeconds`).
    grace_seconds: float = Field(default=600.0, ge=0)
    # The node worker serving the account ("" for none): where its scans run.
    node: str = ""


class OrphanDevice(CamelModel):
    """One device whose pool has no running workflow at its account."""

    id: str
    pool: str
    status: str
    platform: str = ""
    region: str = ""
    created_at: datetime
    # what Temporal says of the pool's workflow: TERMINATED, COMPLETED, NOT_FOUND, ...
    # (or "runs on account X" when a pool of that name runs on another account)
    pool_state: str = ""


class FindOrphansInput(CamelModel):
    account: str


class FindOrphansResult(CamelModel):
    # the oldest orphans, at most MAX_ORPHANS_PER_SCAN: never the whole listing
    orphans: list[OrphanDevice] = Field(default_factory=list)
    # every orphan the listing found, returned or not
    orphans_found: int = 0
    # what the listing saw (devices managed by devicepool that are not on their
    # way out, and the distinct pools they name)
    devices: int = 0
    pools: int = 0
    # parked cloud phones (reserve, retired) found still powered and sent a shutdown
    # again this scan (BitBrowser Local API accounts; 0 elsewhere)
    parked_shut_down: int = 0


class TerminateOrphansInput(CamelModel):
    account: str
    device_ids: list[str] = Field(max_length=500)
    # why, for the log line: "grace" (orphaned past the grace) or "manual" (`orphans --delete`)
    reason: str = "grace"


class KeptDevice(CamelModel):
    id: str
    # e.g. "pool x is running", "already gone", "status unknown (timeout)"
    why: str
    # True: it is no longer an orphan (gone, leaving, its pool runs); False: the
    # check or the DELETE failed, and the next scan decides again
    settled: bool = True


class TerminateOrphansResult(CamelModel):
    # devices a DELETE was sent for (their pool still had no running workflow)
    terminated: list[OrphanDevice] = Field(default_factory=list)
    kept: list[KeptDevice] = Field(default_factory=list)


class CountDevicesInput(CamelModel):
    """`count_devices`: how many managed devices of `account` bill now (its ledger's spend cap)."""

    account: str


class CountDevicesResult(CamelModel):
    # Managed devices not terminating or terminated, any pool.
    devices: int
