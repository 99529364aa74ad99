"""Inputs, updates and results of the DevicePool workflow (its public message contract).

The client and the CLI import these types; they are plain pydantic models with
camelCase JSON so that the stock `temporal` CLI and the Web UI can read and send
them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from activities.models import DeviceInfo
from api.v1alpha1 import CamelModel, DevicePoolSpec, ObjectMeta


class PoolSettings(CamelModel):
    """Intervals from the worker's configuration, passed in the workflow input.

    Workflows never read the environment: whoever starts a pool (the client,
    with defaults the worker config can override on the next continue-as-new)
    sends these.
    """

    resync_seconds: float = Field(default=30.0, gt=0)
    health_seconds: float = Field(default=60.0, gt=0)
    offline_after_seconds: float = Field(default=180.0, gt=0)
    startup_timeout_seconds: float = Field(default=300.0, gt=0)
    idle_grace_seconds: float = Field(default=60.0, ge=0)
    provision_batch_size: int = Field(default=20, ge=1, le=100)
    # Longest a quiet pool goes without a workflow task (the watch activity's cap).
    watch_max_seconds: float = Field(default=3600.0, gt=0)


class InFlightBatch(CamelModel):
    """A provisioning child the pool is waiting on (carried across continue-as-new)."""

    workflow_id: str
    generation: int
    slots: list[int]
    device_ids: list[str] = Field(default_factory=list)


class CarriedState(CamelModel):
    """Everything a pool run hands to the next one at continue-as-new."""

    generation: int = 1
    next_slot: int = 0
    next_batch: int = 0
    in_flight: list[InFlightBatch] = Field(default_factory=list)
    status: dict[str, Any] = Field(default_factory=dict)
    fingerprint: str = ""
    created_at: datetime | None = None


class PoolInput(CamelModel):
    metadata: ObjectMeta
    spec: DevicePoolSpec
    settings: PoolSettings = Field(default_factory=PoolSettings)
    state: CarriedState | None = None


class ApplyRequest(CamelModel):
    """Update `apply`: replace the whole spec (name must match the pool)."""

    metadata: ObjectMeta
    spec: DevicePoolSpec


class ScaleRequest(CamelModel):
    """Update `scale_update` (the CLI) and, as plain JSON, signal `scale`."""

    replicas: int


class Accepted(CamelModel):
    """What an update answers: the generation the change was accepted as."""

    generation: int
    replicas: int


class DevicesView(CamelModel):
    devices: list[DeviceInfo] = Field(default_factory=list)
