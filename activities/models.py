"""Inputs and results of every activity, and the template a device is created from.

They travel through Temporal history: names and references only, never a key or a
proxy password (those stay worker-side, `activities.settings`). It re-exports
`device_models`, the health check's `health_models` and the settings: a workflow's one import
of the activities' models.
`DeviceTemplate` is carried whole from the spec to the adapter; `fold_template` reads
v0.1.0's flat fields (recorded histories, creates in flight at an upgrade).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Self

from pydantic import Field, model_validator

from devicepool.activities.device_models import (
    ALIVE_STATUSES,
    BUSY,
    DEVICE_STATUSES,
    FAILED,
    OFFLINE,
    PROVISIONING,
    READY,
    REBOOTING,
    TERMINATED,
    TERMINATING,
    DeviceInfo,
    DeviceStatus,
    DeviceStatusInfo,
    HealthSuspect,
    device_fingerprint,
    device_rows,
    devices_from_rows,
    suspects_fingerprint,
)
from devicepool.activities.health_models import (
    PoolRunInput,
    PoolRunResult,
    WatchHealthInput,
    WatchHealthResult,
)
from devicepool.activities.settings import (
    AccountSettings,
    LedgerConfig,
    PoolSettings,
    ProxyPoolSettings,
)
from devicepool.api.base import CamelModel
from devicepool.api.names import LABEL_TEMPLATE_HASH
from devicepool.api.v1beta1 import DevicePoolSpec, Platform

__all__ = [
    "ALIVE_STATUSES",
    "BUSY",
    "DEVICE_STATUSES",
    "FAILED",
    "HEARTBEAT_EVERY",
    "HEARTBEAT_TIMEOUT",
    "MAX_RETRY_AFTER_SECONDS",
    "OFFLINE",
    "PROVISIONING",
    "READY",
    "REBOOTING",
    "TERMINATED",
    "TERMINATING",
    "AccountSettings",
    "CheckRefsInput",
    "CheckRefsResult",
    "CreateDeviceInput",
    "CreateDeviceResult",
    "DeviceInfo",
    "DeviceStatus",
    "DeviceStatusInfo",
    "DeviceTemplate",
    "GetStatusesInput",
    "GetStatusesResult",
    "HealthSuspect",
    "LedgerConfig",
    "ListDevicesInput",
    "ListDevicesResult",
    "PoolRunInput",
    "PoolRunResult",
    "PoolSettings",
    "ProxyPoolSettings",
    "RateLimitedReport",
    "RegionStatusInput",
    "RegionStatusResult",
    "ResetDeviceInput",
    "ResetDeviceResult",
    "ResetOutcome",
    "RunningWorkflowsInput",
    "RunningWorkflowsResult",
    "TerminateDeviceInput",
    "TerminateDeviceResult",
    "TerminatePoolInput",
    "TerminatePoolResult",
    "WatchDevicesInput",
    "WatchDevicesResult",
    "WatchHealthInput",
    "WatchHealthResult",
    "bounded_retry_after",
    "device_fingerprint",
    "device_rows",
    "device_template",
    "devices_from_rows",
    "fold_template",
    "suspects_fingerprint",
]


# Provider-calling activities beat every HEARTBEAT_EVERY and are scheduled with
# HEARTBEAT_TIMEOUT (`heartbeats`).
HEARTBEAT_EVERY = timedelta(seconds=2)
HEARTBEAT_TIMEOUT = timedelta(seconds=10)


# ---------------------------------------------------------------- the device template


class DeviceTemplate(CamelModel):
    """What a device is created from: the spec's create fields, names only (no secrets)."""

    platform: Platform
    region: str
    os_version: str
    # the worker's proxy pool (`spec.proxy.poolRef`) and its session ttl (`sessionTTL`) in seconds
    proxy_pool: str | None = None
    sticky_ttl: int = 0


def template_hash(template: DeviceTemplate) -> str:
    """A short, stable hash of what a device is created from (label `template-hash`)."""
    canonical = json.dumps(template.to_json_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def device_template(spec: DevicePoolSpec) -> DeviceTemplate:
    """The template every device of a pool with this spec is created from."""
    proxy = spec.proxy
    return DeviceTemplate(
        platform=spec.platform,
        region=spec.region,
        os_version=spec.os_version,
        proxy_pool=proxy.pool_ref if proxy else None,
        sticky_ttl=proxy.session_ttl if proxy else 0,
    )


# The template's fields as v0.1.0 carried them, flat (either spelling).
_FLAT_TEMPLATE = frozenset(
    {"platform", "region", "os_version", "osVersion", "proxy_pool", "proxyPool"}
    | {"sticky_ttl", "stickyTtl"}
)


def fold_template(data: Any) -> Any:
    """A message with the template's fields flat (v0.1.0) as one with a `template`."""
    if not isinstance(data, dict) or "template" in data:
        return data
    flat = {k: v for k, v in data.items() if k in _FLAT_TEMPLATE}
    if not flat:
        return data
    return {**{k: v for k, v in data.items() if k not in _FLAT_TEMPLATE}, "template": flat}


# ---------------------------------------------------------------- activity inputs/results


class CheckRefsInput(CamelModel):
    account: str
    proxy_pool: str | None = None
    # Checked against the account's provider when given (a pool from before it sends none).
    region: str | None = None
    # Likewise: an account whose provider cannot make this platform is a problem.
    platform: str | None = None


class CheckRefsResult(CamelModel):
    """Empty `problems` means the account, proxy pool and region are known."""

    problems: list[str] = Field(default_factory=list)


class ListDevicesInput(CamelModel):
    account: str
    pool: str
    # Answer in `rows` (`device_rows`), not `devices`: what a pool's history
    # holds per listing, ~100 bytes a device instead of ~290.
    compact: bool = False
    # ...and the `template-hash` most devices carry once, not in every row (~31 bytes
    # each): asked for only by a reader that puts it back (not v0.1.0's).
    fold_template_hash: bool = False


class ListDevicesResult(CamelModel):
    """The pool's devices: whole `devices`, or `rows` (`device_rows`)."""

    devices: list[DeviceInfo] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    # The `template-hash` label of every row that has its flag (`DEVICE_ROW`); left out
    # when None, so an answer v0.1.0's worker asked for decodes there (it forbids extras).
    template_hash: str | None = Field(default=None, exclude_if=lambda v: v is None)

    @classmethod
    def answer(
        cls, devices: list[DeviceInfo], asked: ListDevicesInput | WatchDevicesInput, **fields: Any
    ) -> Self:
        """`devices` in the form `asked` for."""
        if not asked.compact:
            return cls(devices=devices, **fields)
        hashes = Counter(h for d in devices if (h := d.labels.get(LABEL_TEMPLATE_HASH)))
        common = hashes.most_common(1)[0][0] if hashes and asked.fold_template_hash else None
        rows = device_rows(devices, pool=asked.pool, template_hash=common)
        return cls(rows=rows, template_hash=common, **fields)

    def listing(self, pool: str) -> list[DeviceInfo]:
        """The devices, whichever form the answer came in."""
        return self.devices or devices_from_rows(
            self.rows, pool=pool, template_hash=self.template_hash
        )


class WatchDevicesInput(CamelModel):
    """Poll the pool's devices inside one long activity; return on change or after `max_seconds`."""

    account: str
    pool: str
    fingerprint: str
    poll_seconds: float = 30.0
    max_seconds: float = 3600.0
    # Answer in `rows`, as `ListDevicesInput.compact` and `.fold_template_hash`.
    compact: bool = False
    fold_template_hash: bool = False
    # The pool's health check: every `health_every_seconds` the watch asks Temporal
    # whether it still runs, and answers (`health_ended`) when it does not.
    health_workflow_id: str | None = None
    health_every_seconds: float = 300.0


class WatchDevicesResult(ListDevicesResult):
    fingerprint: str
    changed: bool
    health_ended: bool = False


class CreateDeviceInput(CamelModel):
    """Create one device of `template` under `idempotency_key` (the adapter's `create_device`)."""

    account: str
    pool: str
    template: DeviceTemplate
    name: str
    idempotency_key: str
    extra_labels: dict[str, str] = Field(default_factory=dict)
    # A replacement's create goes first where the account's calls queue (`api: bitbrowser`).
    replacement: bool = False
    # The pool's `spec.reserve.keep` as its batch began, 0 when unset; None: not told (a
    # batch an older build started). A GeeLark node's warm reserve claims only under a keep
    # of 1 or more, and deletes what is parked past it.
    reserve_keep: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _fold_v0_1_0(cls, data: Any) -> Any:
        return fold_template(data)


class CreateDeviceResult(CamelModel):
    device: DeviceInfo


class GetStatusesInput(CamelModel):
    account: str
    ids: list[str] = Field(max_length=100)
    # The pool the devices belong to (a batch's boot check): a provider that lists by
    # pool reads that pool only, and its calls take the pool's turn of a shared budget.
    pool: str | None = None


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
    # The pool's `spec.reserve.keep` (None: keep every profile): what a power-billed
    # account's scale-down keeps in reserve before it retires profiles.
    reserve_keep: int | None = None
    # With `only_if_idle`: the plan's listing's `DeviceInfo.idle_since`. A device used
    # since (a session that started and ended after that listing) is kept.
    idle_since: datetime | None = None
    # It served a lease and goes unreset (`onRelease: replace`, a reset not possible): an
    # adapter that keeps removed devices for later creates resets it first, or retires it.
    used: bool = False
    # With `only_if_idle`: the pool retires it (past `lifetime.maxAge`, replaced when idle,
    # drifted), not a scale-down: an adapter that keeps scaled-down devices deletes it.
    retiring: bool = False


class TerminateDeviceResult(CamelModel):
    device_id: str
    already_gone: bool = False
    # why the device was kept (only_if_idle: it was busy by then)
    skipped: str | None = None


class ResetDeviceInput(CamelModel):
    """Clear a used device for its next holder (`onRelease: reset`)."""

    account: str
    pool: str
    device_id: str


class ResetOutcome(StrEnum):
    RESET = "reset"  # asked: the device restarts clean (a cloud phone's fresh start)
    UNSUPPORTED = "unsupported"  # the provider has no reset: replace the device
    QUOTA_USED = "quotaUsed"  # no reset left for it now (60 a month): replace it
    GONE = "gone"  # the provider no longer has it


class ResetDeviceResult(CamelModel):
    device_id: str
    outcome: ResetOutcome
    message: str = ""


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
    # Profiles the provider keeps of the pool, powered off and marked retired, because
    # it has no delete (cloud phones over the Local API); 0 where devices are deleted.
    retired: int = 0


class RunningWorkflowsInput(CamelModel):
    """Workflow ids (a pool's provisioning batches) whose liveness the pool asks about."""

    workflow_ids: list[str]


class RunningWorkflowsResult(CamelModel):
    # the subset of the asked ids whose latest run is still running
    running: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------- the permit ledger


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
