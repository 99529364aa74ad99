"""The health check's activities as workflows see them: is the pool that started a check
still running (`pool_running`), and its watch of the pool's devices (`watch_health`).

Re-exported by `activities.models`, a workflow's one import of the activities' models. Names
and ids only, like every activity model; what the check judges: docs/pools.md, "Health".
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from devicepool.activities.device_models import HealthSuspect
from devicepool.api.base import CamelModel

__all__ = ["PoolRunInput", "PoolRunResult", "WatchHealthInput", "WatchHealthResult"]


# ---------------------------------------------------------------- is the health check's pool still there


class PoolRunInput(CamelModel):
    """Activity `pool_running`: is the pool that started a health check still running?"""

    # the pool's workflow id (`devicepool/<name>`)
    workflow_id: str
    # the pool run that started the health check (its parent), to learn the pool's chain from
    run_id: str = ""
    # the pool's first run id, once known: a pool applied again under the same name has another
    first_run_id: str = ""


class PoolRunResult(CamelModel):
    # the id's latest run is running and belongs to the same pool (chain of runs)
    running: bool
    # the pool's first run id (learned from `run_id` when `first_run_id` was not given)
    first_run_id: str = ""
    # what Temporal says of the id's latest run: RUNNING, TERMINATED, ..., NOT_FOUND
    status: str = ""
    # the first run id of the id's latest run (another than `first_run_id`: another pool)
    latest_first_run_id: str = ""


# ---------------------------------------------------------------- the health check's watch


class WatchHealthInput(CamelModel):
    """Activity `watch_health`: poll the pool's devices until a suspect appears, changes or goes.

    Why one long activity: docs/pools.md, "Health"."""

    account: str
    pool: str
    # Asked of Temporal on every poll: the watch returns at once when the pool is gone.
    pool_run: PoolRunInput
    poll_seconds: float = 60.0
    max_seconds: float = 3600.0
    startup_timeout_seconds: float = 300.0
    # `suspects_fingerprint` of the suspects the check already knows: the watch
    # returns when what it sees differs.
    fingerprint: str = ""
    # Return after a fresh read at this time at the latest (the earliest offline deadline).
    until: datetime | None = None
    # Return after the first read (a check asked for now, e.g. after a config change).
    once: bool = False
    # This worker's listing of the pool at most this old stands in for a provider read;
    # without one, the watch's own reads are at least `own_read_seconds` apart (0: every
    # poll). What each is, and what is always read fresh: `watches._watch_health`.
    reuse_listing_seconds: float = 0.0
    own_read_seconds: float = 0.0


class WatchHealthResult(CamelModel):
    pool: PoolRunResult
    # the pool's devices at the provider at `checked_at` (not terminated)
    devices: int = 0
    # only the suspects (offline; provisioning or failed past the startup
    # timeout), never the whole listing: compact at any pool size
    suspects: list[HealthSuspect] = Field(default_factory=list)
    fingerprint: str = ""
    # when the answer's listing was made, and when the read before it was (None:
    # this is the watch's first read), which saw none of the new suspects offline
    checked_at: datetime
    previous_check_at: datetime | None = None
