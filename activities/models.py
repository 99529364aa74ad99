"""Inputs and results of every activity, and the worker-side settings activities own.

These travel through Temporal history, so they carry names and references only:
never an API key or a proxy password (those stay in `AccountSettings` /
`ProxyPoolSettings`, which live in the worker process and are never serialized
into a workflow or activity payload).

Device statuses are one closed vocabulary, `DeviceStatus`; the models' `status`
fields stay plain strings so that a status a provider adds later still loads.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from devicepool.api.base import CamelModel
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY
from devicepool.api.v1alpha1 import Platform


class DeviceStatus(StrEnum):
    """A device's status at the provider: the contract's lifecycle.

    A `StrEnum`, so a member equals (and hashes like, and serializes as) its
    plain string: `DeviceStatus.READY == "ready"`, and a `Counter` of raw
    status strings can be read with a member.
    """

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

# Provider-calling activities heartbeat every HEARTBEAT_EVERY while they work, and
# workflows schedule them with HEARTBEAT_TIMEOUT: an attempt lost with a killed
# worker is retried elsewhere within seconds, not after its start-to-close timeout.
HEARTBEAT_EVERY = timedelta(seconds=2)
HEARTBEAT_TIMEOUT = timedelta(seconds=10)


# ---------------------------------------------------------------- settings (worker-side only)


class AccountSettings(BaseModel):
    """One provider account as the worker knows it. Holds the secret; never serialized."""

    model_config = ConfigDict(extra="forbid")

    name: str
    base_url: str
    api_key: SecretStr
    creates_per_minute: int = Field(default=20, ge=1)
    timeout_seconds: float = Field(default=10.0, gt=0)
    # The provider's rate window (60 s; shorter only against a sped-up emulator)
    # and the safety margin the permit ledger adds to it.
    window_seconds: float = Field(default=60.0, gt=0)
    window_margin_seconds: float = Field(default=1.0, ge=0)


class ProxyPoolSettings(BaseModel):
    """A proxy gateway. `username_template` may use `{session}` and `{ttl}`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str = "socks5"
    host: str
    port: int = Field(ge=1, le=65535)
    username_template: str = "user-session-{session}-ttl-{ttl}"
    password: SecretStr = SecretStr("")


class PoolSettings(CamelModel):
    """Intervals from the worker's configuration, passed in the workflow input.

    Workflows never read the environment or files: each pool run asks the worker
    for these through the `pool_settings` activity (or a test passes them in
    the workflow input), and carries them in its state.
    """

    resync_seconds: float = Field(default=30.0, gt=0)
    health_seconds: float = Field(default=60.0, gt=0)
    offline_after_seconds: float = Field(default=180.0, gt=0)
    startup_timeout_seconds: float = Field(default=300.0, gt=0)
    idle_grace_seconds: float = Field(default=60.0, ge=0)
    provision_batch_size: int = Field(default=20, ge=1, le=100)
    # Longest a quiet pool goes without a workflow task (the watch activity's cap).
    watch_max_seconds: float = Field(default=3600.0, gt=0)
    # How often the pool's watch asks Temporal whether the pool's health check
    # still runs (a check that ended is started again): in the worker, no history.
    health_liveness_seconds: float = Field(default=300.0, gt=0)
    # Failing replacements: after this many devices in a row never reach ready,
    # the pool stops creating in the region and backs off (capped).
    failure_streak_limit: int = Field(default=3, ge=1)
    backoff_initial_seconds: float = Field(default=30.0, gt=0)
    backoff_max_seconds: float = Field(default=900.0, gt=0)
    # A deleted pool whose teardown keeps failing (any error, retryable too)
    # shows `TeardownBlocked=True` within this many seconds; it keeps trying.
    teardown_blocked_after_seconds: float = Field(default=60.0, gt=0)


# ---------------------------------------------------------------- device views


class DeviceInfo(CamelModel):
    """What the pool needs to know about one device (no secrets: the proxy is by name)."""

    id: str
    # Plain `str`, not `DeviceStatus`: a provider may add a status the enum does
    # not know yet, and one odd device must not fail the whole observation.
    # Compare with `DeviceStatus` members (a member equals its string); the JSON
    # is the provider's status string either way.
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


# ---------------------------------------------------------------- activity inputs/results


class CheckRefsInput(CamelModel):
    account: str
    proxy_pool: str | None = None


class CheckRefsResult(CamelModel):
    """Empty `problems` means the account and proxy pool are known to the worker."""

    problems: list[str] = Field(default_factory=list)


class ListDevicesInput(CamelModel):
    account: str
    pool: str
    # Answer in `rows` (`device_rows`), not `devices`: what a pool's history
    # holds per listing, ~100 bytes a device instead of ~290.
    compact: bool = False


class ListDevicesResult(CamelModel):
    devices: list[DeviceInfo] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)

    def listing(self, pool: str) -> list[DeviceInfo]:
        """The devices, whichever form the answer came in."""
        return self.devices or devices_from_rows(self.rows, pool=pool)


class WatchDevicesInput(CamelModel):
    """Poll the pool's devices inside one long activity; return on change or after `max_seconds`."""

    account: str
    pool: str
    fingerprint: str
    poll_seconds: float = 30.0
    max_seconds: float = 3600.0
    # Answer in `rows`, as `ListDevicesInput.compact`.
    compact: bool = False
    # The pool's health check: every `health_every_seconds` the watch asks Temporal
    # whether it still runs, and answers (`health_ended`) when it does not.
    health_workflow_id: str | None = None
    health_every_seconds: float = 300.0


class WatchDevicesResult(CamelModel):
    devices: list[DeviceInfo] = Field(default_factory=list)
    fingerprint: str
    changed: bool
    rows: list[list[Any]] = Field(default_factory=list)
    health_ended: bool = False

    def listing(self, pool: str) -> list[DeviceInfo]:
        """The devices, whichever form the answer came in."""
        return self.devices or devices_from_rows(self.rows, pool=pool)


class CreateDeviceInput(CamelModel):
    account: str
    pool: str
    platform: Platform
    region: str
    os_version: str
    name: str
    idempotency_key: str
    proxy_pool: str | None = None
    sticky_ttl: int = 0
    extra_labels: dict[str, str] = Field(default_factory=dict)


class CreateDeviceResult(CamelModel):
    device: DeviceInfo


class GetStatusesInput(CamelModel):
    account: str
    ids: list[str] = Field(max_length=100)


class GetStatusesResult(CamelModel):
    items: list[DeviceStatusInfo] = Field(default_factory=list)
    not_found: list[str] = Field(default_factory=list)


class TerminateDeviceInput(CamelModel):
    account: str
    device_id: str
    # Optional, for `devicepool_replacements_total`: why the device goes (e.g.
    # "offline"). Without it, the activity reads the device's status first and
    # counts a replacement only for an unhealthy one (offline, failed, never booted).
    pool: str | None = None
    reason: str | None = None
    # A scale-down: delete only if the device is idle right now at the provider
    # (ready, no session). The plan's listing may be old; a device busy since
    # is kept (`skipped`).
    only_if_idle: bool = False
    # With `only_if_idle`: when the plan's listing last saw the device do anything
    # (`DeviceInfo.idle_since`). A device used since (a session that started and
    # ended after that listing) is inside its idle grace again: kept.
    idle_since: datetime | None = None


class TerminateDeviceResult(CamelModel):
    device_id: str
    already_gone: bool = False
    # why the device was kept (only_if_idle: it was busy by then)
    skipped: str | None = None


class RegionStatusInput(CamelModel):
    account: str
    region: str


class RegionStatusResult(CamelModel):
    """`up`, `degraded`, `down`, or `unknown` when the provider does not list the region."""

    region: str
    status: str


class TerminatePoolInput(CamelModel):
    account: str
    pool: str


class TerminatePoolResult(CamelModel):
    terminated: int = 0
    remaining: int = 0


class RunningWorkflowsInput(CamelModel):
    """Workflow ids (a pool's provisioning batches) whose liveness the pool asks about."""

    workflow_ids: list[str]


class RunningWorkflowsResult(CamelModel):
    # the subset of the asked ids whose latest run is still running
    running: list[str] = Field(default_factory=list)


def device_fingerprint(devices: list[DeviceInfo]) -> str:
    """A short stable digest of what a reconcile pass cares about in a device list.

    Pure (the workflow computes it too, to tell the watch activity what it last
    saw): ids, statuses and sessions; timestamps are left out on purpose so a
    heartbeat-only change at the provider does not wake the pool.
    """
    import hashlib

    parts = sorted(f"{d.id}|{d.status}|{int(d.session_active)}" for d in devices)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# A compact listing: one JSON array per device, in this order. The pool's own
# label is implied by the listing (by `pool=<name>`); `managed-by=devicepool`
# is bit 1 of `flags` (bit 0: session active); timestamps are epoch seconds to
# the millisecond; trailing empty cells are left out.
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
_SESSION, _MANAGED = 1, 2


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else round(value.timestamp(), 3)


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def device_rows(devices: list[DeviceInfo], *, pool: str) -> list[list[Any]]:
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


def devices_from_rows(rows: list[list[Any]], *, pool: str) -> list[DeviceInfo]:
    """The devices `device_rows` made rows of (pure: the workflow reads them)."""
    devices = []
    for row in rows:
        cell = dict(zip(DEVICE_ROW, row, strict=False))
        flags = int(cell.get("flags") or 0)
        labels = {LABEL_POOL: pool}
        if flags & _MANAGED:
            labels[LABEL_MANAGED_BY] = MANAGED_BY
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


# ---------------------------------------------------------------- the permit ledger


class LedgerConfig(CamelModel):
    """One account's creation window: `capacity` creates per `window_seconds`."""

    capacity: int = Field(default=20, ge=1)
    window_seconds: float = Field(default=60.0, gt=0)
    # Added to every window (clock skew between the provider and Temporal); also
    # how long the first request after an idle spell waits for others to share.
    margin_seconds: float = Field(default=1.0, ge=0)

    @classmethod
    def of(cls, account: AccountSettings) -> LedgerConfig:
        return cls(
            capacity=account.creates_per_minute,
            window_seconds=account.window_seconds,
            margin_seconds=account.window_margin_seconds,
        )


class LedgerInput(CamelModel):
    account: str
    config: LedgerConfig | None = None
    # Carried across continue-as-new (a `workflows.ledger.LedgerState` as JSON).
    state: dict[str, object] | None = None


# The longest a provider's `Retry-After` / `RateLimit-Reset` may hold an account's
# creates: a wrong header (an epoch timestamp read as a delta, a day) must not
# stop an account for longer; a real longer limit costs one more 429 per cap.
MAX_RETRY_AFTER_SECONDS = 600.0


def bounded_retry_after(seconds: float | None) -> float | None:
    """`seconds` within [0, MAX_RETRY_AFTER_SECONDS]; None for none, NaN or a negative."""
    if seconds is None or math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


class RateLimitedReport(CamelModel):
    pool: str
    # Bounded by the sender; the ledger bounds it again (any worker may send anything).
    retry_after_seconds: float


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


class HealthSuspect(CamelModel):
    """A device the health check must judge: offline, or still provisioning/failed too long."""

    id: str
    status: str
    created_at: datetime
    updated_at: datetime | None = None


class WatchHealthInput(CamelModel):
    """Activity `watch_health`: poll the pool's devices until a suspect appears, changes or goes.

    One long activity instead of a list + status read + timer per interval: a
    healthy pool's check costs its history a few events per `max_seconds`.
    """

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
    # A listing of the pool this worker made (for the pool's own watch) at most
    # this old stands in for a provider call while it shows no change; a change
    # is read again before it is answered, and the read at `until` is always fresh.
    reuse_listing_seconds: float = 0.0
    # Without such a listing (the pool's watch runs on another worker, or lists
    # less often), the watch's own provider reads are at least this far apart
    # (0: every poll); fresh reads (`once`, `until`, a change) are never put off.
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


def suspects_fingerprint(suspects: list[HealthSuspect]) -> str:
    """A short digest of the suspects' ids and statuses (pure; the workflow computes it too)."""
    import hashlib

    if not suspects:
        return ""
    parts = sorted(f"{s.id}|{s.status}" for s in suspects)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
