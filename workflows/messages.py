"""Inputs, updates and results of the DevicePool workflow (its public message contract).

The client and the CLI import these types; they are plain pydantic models with
camelCase JSON so that the stock `temporal` CLI and the Web UI can read and send
them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.v1alpha1 import DevicePoolSpec, ObjectMeta, Platform

__all__ = ["PoolSettings"]  # re-exported: defined beside the activity that serves it


class InFlightBatch(CamelModel):
    """A provisioning child the pool is waiting on (carried across continue-as-new)."""

    workflow_id: str
    generation: int
    slots: list[int]
    started_at: datetime


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


class BatchReport(CamelModel):
    """What a provisioning child tells its pool (signal `batch_done`) when it ends."""

    workflow_id: str
    slots: list[int]
    # slot -> device id, for every slot whose create the provider accepted
    created: dict[int, str] = Field(default_factory=dict)
    ready: list[str] = Field(default_factory=list)
    # slots whose create failed for good, with the reason
    failed_slots: dict[int, str] = Field(default_factory=dict)
    # the subset of `failed_slots` the provider never refused: the create was
    # lost with a worker, timed out or stayed rate-limited past its budget.
    # They say nothing about the region, so they do not count towards a back-off.
    unanswered_slots: list[int] = Field(default_factory=list)
    # devices created that never became ready in time (the pool removes them)
    failed_devices: dict[str, str] = Field(default_factory=dict)
    cancelled: bool = False


class CarriedState(CamelModel):
    """Everything a pool run hands to the next one at continue-as-new."""

    generation: int = 1
    next_slot: int = 0
    next_batch: int = 0
    in_flight: list[InFlightBatch] = Field(default_factory=list)
    # devices a child reported as failed, still to be terminated
    doomed: list[str] = Field(default_factory=list)
    status: dict[str, Any] = Field(default_factory=dict)
    fingerprint: str = ""
    created_at: datetime | None = None
    failure_streak: int = 0
    # batch reports received but not yet applied (they wait for an observation
    # made after they arrived)
    reports: list[BatchReport] = Field(default_factory=list)
    created_reports: list[BatchReport] = Field(default_factory=list)
    # (generation, slot) of creates that failed: re-planned under the same
    # idempotency key, so a create that landed after all is found, not doubled.
    retry_slots: list[tuple[int, int]] = Field(default_factory=list)
    # the generation whose create body (osVersion, proxy) is still current
    body_generation: int = 1
    backoff_seconds: float = 0.0
    backoff_until: datetime | None = None
    provider_problem: str | None = None
    replaced_total: int = 0
    # Replacement devices not yet handed to a batch (served first by the ledger).
    replacements_owed: int = 0


class PoolInput(CamelModel):
    metadata: ObjectMeta
    spec: DevicePoolSpec
    # None: the first task asks the worker (activity `pool_settings`) for its configured intervals.
    settings: PoolSettings | None = None
    state: CarriedState | None = None


class ApplyRequest(CamelModel):
    """Update `apply`: replace the whole spec (name must match the pool)."""

    metadata: ObjectMeta
    spec: DevicePoolSpec


class ScaleRequest(CamelModel):
    """Update `scale_update` (the CLI) and, as plain JSON, signal `scale`."""

    # Strict: `"5"` or `true` from a hand-written signal must not pass as a count.
    replicas: int = Field(strict=True)


class Accepted(CamelModel):
    """What an update answers: the generation the change was accepted as."""

    generation: int
    replicas: int


class DevicesView(CamelModel):
    devices: list[DeviceInfo] = Field(default_factory=list)


class HealthConfig(CamelModel):
    """What the health child needs from the pool's spec (sent again when it changes)."""

    max_unhealthy: int | str = "40%"


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


class HealthReport(CamelModel):
    """Signal `health_report` to the pool: what the last check found and did."""

    checked_at: datetime
    devices: int
    unhealthy: int
    max_unhealthy: int
    paused: bool
    # device id -> reason, terminated by this check (the pool plans replacements now)
    terminated: dict[str, str] = Field(default_factory=dict)
    offline: list[str] = Field(default_factory=list)
