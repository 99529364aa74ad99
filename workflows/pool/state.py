"""`PoolState`: everything a pool run hands to the next one, in one model carried as it is.

The pool workflow reads and writes these fields directly; continue-as-new
passes the object on whole, so a new field cannot be forgotten in a hand-made
copy. What lives only for one run (the last listing, the running watch, the
worker's settings) stays on the workflow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, field_serializer

from devicepool.api.base import CamelModel
from devicepool.api.v1alpha1 import DevicePoolStatus
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.event_log import PoolEvent
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.shared.protocol import AccountPause, HealthConfig, HealthReport

__all__ = ["REPLACING_LIMIT", "PoolState"]

REPLACING_LIMIT = 100


class PoolState(CamelModel):
    # the spec's generation (each accepted change adds one)
    generation: int = 1
    created_at: datetime | None = None
    status: DevicePoolStatus = Field(default_factory=DevicePoolStatus)
    slots: SlotBook = Field(default_factory=SlotBook)
    backoff: Backoff = Field(default_factory=Backoff)
    # devices to terminate (a batch reported them failed, or a termination failed)
    doomed: set[str] = Field(default_factory=set)
    replaced_total: int = 0
    # replacements not yet handed to a batch (the ledger serves them before growth)
    replacements_owed: int = 0
    # Devices already credited to `replacements_owed`, by the health check's report
    # or by a listing that showed them gone while offline, so the other of the two
    # does not credit them again (the newest `REPLACING_LIMIT`).
    replacing: list[str] = Field(default_factory=list)
    # set once the pool is deleted: a run continued while deleting only finishes the finalizer
    deleting: bool = False
    # Whether this pool (this chain of runs) started its health check yet: its
    # first start replaces a check an earlier pool of its name left running.
    health_started: bool = False
    # The pool's own recent events, newest last (a ring of `events.LIMIT`), for `describe`.
    events: list[PoolEvent] = Field(default_factory=list)
    # Booting devices a scale-down terminated, until their batch reports them
    # vanished (so that is not told as news); the newest `events.LIMIT` at most.
    scaled_down_booting: list[str] = Field(default_factory=list)
    # Devices this pool removed because the provider listed them `failed`,
    # before their batch read them: the batch then finds them terminating, and
    # they still count as failed boots (the newest `events.LIMIT` at most).
    removed_failed: list[str] = Field(default_factory=list)
    # The health check's last report, without its device lists: the check
    # reports only when something changes, so a run that continued as new must
    # still know that remediation is paused. None in state from before the
    # field (the next report fills it).
    health: HealthReport | None = None
    # The devices the pool's last listing showed offline: one the next listing
    # shows gone was removed by someone else, and is owed a replacement
    # (`plan.lost_offline`), also when a continue-as-new came in between.
    offline_seen: list[str] = Field(default_factory=list)
    # The pool's last listing (compact rows, `activities.models.device_rows`),
    # written at a hand-over only: the next run answers `devices` and publishes
    # from it until its own first listing lands (which replaces it), instead of
    # showing an empty pool in between. Empty in state from before the field.
    listing: list[list[Any]] = Field(default_factory=list)
    # What the health check was last told (None until the pool first sets it): a
    # spec change that lands in the pass that hands over is told by the next run.
    health_told: HealthConfig | None = None
    # The ledger is still to hear that this pool will ask for permits (a new
    # pool, or more replicas), also when the change landed in a handing-over pass.
    announce: bool = False
    # The provider's long pause of the account's creates (from the ledger), until it ends.
    account_pause: AccountPause | None = None

    @field_serializer("doomed")
    def _sorted(self, doomed: set[str]) -> list[str]:
        return sorted(doomed)
