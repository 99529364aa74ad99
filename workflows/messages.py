"""Inputs, updates and results of the DevicePool workflow (its public message contract).

The client and the CLI import these types; they are plain pydantic models with
camelCase JSON so that the stock `temporal` CLI and the Web UI can read and send
them.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import ConfigDict, Field

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.v1alpha1 import DevicePoolSpec, ObjectMeta, Platform
from devicepool.workflows.pool_state import HealthConfig, HealthReport, PoolState
from devicepool.workflows.slots import BatchReport, InFlightBatch

# Re-exported: `PoolSettings` is defined beside the activity that serves it, the
# batch messages beside the slot book that applies them, `PoolState` on its own
# (with the health report it carries).
__all__ = [
    "BatchReport",
    "HealthConfig",
    "HealthReport",
    "InFlightBatch",
    "PoolSettings",
    "PoolState",
]


class ProvisionBatchInput(CamelModel):
    """Input of the `ProvisionBatch` child: create these slots, wait until they boot."""

    pool: str
    parent_workflow_id: str
    account: str
    platform: Platform
    region: str
    os_version: str
    proxy_pool: str | None = None
    sticky_ttl: int = 0
    generation: int
    slots: list[int]
    # the pool's first run id, shortened: part of every create's idempotency key
    incarnation: str = ""
    startup_timeout_seconds: float = 300.0
    poll_seconds: float = 5.0
    # Replaces unhealthy devices: the account's ledger serves it before growth.
    replacement: bool = False


class PoolInput(CamelModel):
    metadata: ObjectMeta
    spec: DevicePoolSpec
    # None: the first task asks the worker (activity `pool_settings`) for its configured intervals.
    settings: PoolSettings | None = None
    # None on a new pool; the whole carried state at continue-as-new.
    state: PoolState | None = None


class ApplyRequest(CamelModel):
    """Update `apply`: replace the whole spec (name must match the pool)."""

    metadata: ObjectMeta
    spec: DevicePoolSpec


class ScaleRequest(CamelModel):
    """Update `scale_update` (the CLI) and, as plain JSON, signal `scale`."""

    # Strict: `"5"` or `true` from a hand-written signal must not pass as a count.
    replicas: int = Field(strict=True)


class ApplyResult(StrEnum):
    """What an `apply` did, in kubectl's words."""

    CREATED = "created"  # the update that started the pool
    CONFIGURED = "configured"  # the spec (or metadata) changed
    UNCHANGED = "unchanged"  # the pool already had this spec


class Accepted(CamelModel):
    """What an update answers: the generation the change was accepted as."""

    # Fields this version does not know are ignored, not refused: a worker newer
    # than its client may answer with more.
    model_config = ConfigDict(**{**CamelModel.model_config, "extra": "ignore"})

    generation: int
    replicas: int
    # Set by `apply` only. None: `scale_update`, or a worker from before the field.
    result: ApplyResult | None = None


class DevicesView(CamelModel):
    devices: list[DeviceInfo] = Field(default_factory=list)


class HealthInput(CamelModel):
    pool: str
    parent_workflow_id: str
    account: str
    settings: PoolSettings
    config: HealthConfig = Field(default_factory=HealthConfig)
    # Carried across the health child's own continue-as-new: device id -> when
    # it was first seen offline. Durable, so a worker restart keeps the clock.
    offline_since: dict[str, datetime] = Field(default_factory=dict)
    replaced_total: int = 0
    last_check_at: datetime | None = None
    # Also carried (absent, i.e. False, in runs from before they were): whether
    # the last check paused remediation, and whether it told the pool anything
    # (so the recovery that clears the pool's RemediationPaused is reported
    # even when a new run is the first to see it).
    paused: bool = False
    was_reporting: bool = False
    # The pool's first run id: which pool this check belongs to. Learned at the
    # first check (from the parent run) when the pool did not pass it; a pool
    # applied again under the same name has another.
    pool_first_run_id: str = ""
