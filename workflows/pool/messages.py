"""Inputs, updates and results of the DevicePool workflow (its public message contract):
pydantic models with camelCase JSON, so the stock `temporal` CLI and the Web UI can
read and send them; and which `apply` a running pool accepts (`refuse_apply`, checked
before anything is written to history).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.conversion import stored_spec
from devicepool.api.v1beta1 import DevicePoolSpec, Duration, ObjectMeta
from devicepool.workflows.pool.slots import InFlightBatch
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler.messages import Accepted, ApplyResult, ScaleRequest
from devicepool.workflows.shared.protocol import BatchReport, HealthConfig, HealthReport

# Re-exported: the pool's messages defined where they are used.
__all__ = [
    "Accepted",
    "ApplyResult",
    "BatchReport",
    "HealthConfig",
    "HealthReport",
    "InFlightBatch",
    "PoolSettings",
    "PoolState",
    "ScaleRequest",
]


# A v1alpha1 spec (a v0.1.0 pool or client) is read into v1beta1 (docs/pools.md,
# 'Versions: v1alpha1 and v1beta1').
StoredSpec = Annotated[DevicePoolSpec, BeforeValidator(stored_spec)]


class PoolInput(CamelModel):
    metadata: ObjectMeta
    spec: StoredSpec
    # None: the first task asks the worker (activity `pool_settings`) for its configured intervals.
    settings: PoolSettings | None = None
    # None on a new pool; the whole carried state at continue-as-new.
    state: PoolState | None = None


class ApplyRequest(CamelModel):
    """Update `apply`: replace the whole spec (name must match the pool)."""

    metadata: ObjectMeta
    spec: StoredSpec


# Fields a running pool cannot change (their JSON paths): its devices were rented under them.
IMMUTABLE_FIELDS = ("provider.name", "provider.account", "platform", "region")
# Mutable spec fields that go into a create's body (with the immutable ones).
CREATE_BODY_FIELDS = ("os_version", "proxy")


def refuse_apply(name: str, spec: DevicePoolSpec, request: ApplyRequest) -> None:
    """Raise `ValueError` naming the field if `request` cannot replace `spec` on pool `name`."""
    if request.metadata.name != name:
        raise ValueError(f"metadata.name: this pool is {name!r}, got {request.metadata.name!r}")
    old_fields, new_fields = spec.to_json_dict(), request.spec.to_json_dict()
    for path in IMMUTABLE_FIELDS:
        old, new = _at(old_fields, path), _at(new_fields, path)
        if old != new:
            raise ValueError(
                f"spec.{path}: cannot change from {old!r} to {new!r} on a "
                "running pool; delete it and apply again"
            )


def body_changed(old: DevicePoolSpec, new: DevicePoolSpec) -> bool:
    """Whether creates under `new` send another body (old idempotency keys would be a 422)."""
    return any(getattr(new, field) != getattr(old, field) for field in CREATE_BODY_FIELDS)


def _at(fields: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        fields = fields.get(key, {})
    return fields


class DevicesView(CamelModel):
    devices: list[DeviceInfo] = Field(default_factory=list)


class ReplaceRequest(CamelModel):
    """Update `replace_device`: replace one device now (busy or not), or once it is idle."""

    device: str = Field(min_length=1)
    when_idle: bool = False


class ProtectRequest(CamelModel):
    """Update `protect_device`: never pick the device for scale-down or expiry, for
    `duration` (a kubectl duration such as `2h`) or until `unprotect_device`."""

    device: str = Field(min_length=1)
    duration: Duration | None = Field(default=None, gt=0)


class DeviceRef(CamelModel):
    """Update `unprotect_device`: the device to take the protection from."""

    device: str = Field(min_length=1)


class ControlAnswer(CamelModel):
    """What a control update did, in a line (`devicepool replace|protect|...` print it)."""

    model_config = ConfigDict(**{**CamelModel.model_config, "extra": "ignore"})

    message: str


class BilledHour(CamelModel):
    start: datetime
    device_hours: float
    cost: float


class PoolCost(CamelModel):
    """Query `cost`: what the pool's devices billed, from its own listings (every device
    the provider had not terminated, at the account's price; per running minute, those
    powered on, each to its daily cap: `Cost.accrue`), by the hour for a week."""

    model_config = ConfigDict(**{**CamelModel.model_config, "extra": "ignore"})

    account: str
    price_per_hour: float
    hourly_cost: float = 0.0
    cost_to_date: float = 0.0
    device_hours_to_date: float = 0.0
    hours: list[BilledHour] = Field(default_factory=list)
    # The figures count until `counted_until` (the pool's last pass); since then
    # `billing_devices` bill on (a quiet pool does not wake to count them).
    counted_until: datetime | None = None
    billing_devices: int = 0

    def totals(self, now: datetime) -> tuple[float, float]:
        """(device-hours, dollars) to date at `now`: counted, and billed on since, at the
        pool's hourly cost (a device at its daily cap runs on, and bills nothing more)."""
        hours = 0.0
        if self.counted_until is not None and now > self.counted_until:
            hours = (now - self.counted_until).total_seconds() / 3600
        return (
            self.device_hours_to_date + self.billing_devices * hours,
            self.cost_to_date + self.hourly_cost * hours,
        )


def cost_of(s: PoolState, *, account: str, price_per_hour: float) -> PoolCost:
    """Query `cost`'s answer, from what the pool counted (`Cost.accrue`)."""
    return PoolCost(
        account=account,
        price_per_hour=price_per_hour,
        hourly_cost=round(s.cost.rate, 4),
        cost_to_date=round(s.cost.to_date, 4),
        device_hours_to_date=round(s.cost.device_hours, 4),
        hours=[
            BilledHour(start=hour, device_hours=round(hours, 4), cost=round(dollars, 4))
            for hour, (hours, dollars) in sorted(s.cost.billed_hours.items())
        ],
        counted_until=s.cost.since,
        billing_devices=s.cost.devices,
    )
