"""DevicePool `mobile.example.com/v1beta1`: the version pools are stored in.

Unknown fields are rejected, as in v1alpha1; durations as kubectl writes them (`api.durations`).
What changed from v1alpha1 (`api.conversion` converts both ways, losslessly): docs/pools.md,
'Versions: v1alpha1 and v1beta1'."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    model_validator,
)

from devicepool.api.autoscale import (
    AutoscaleSpec,
    ScheduleWindow,
    check_schedule,
    replicas_if_autoscaled,
)
from devicepool.api.base import CamelModel
from devicepool.api.fields import Duration, WholeSecondsDuration, _cron
from devicepool.api.names import API_VERSION_V1BETA1, KIND_DEVICE_POOL
from devicepool.api.problems import show_value
from devicepool.api.v1alpha1 import (
    MAX_REPLICAS,
    Condition,
    ConditionStatus,
    ConditionType,
    Count,
    DevicePoolStatus,
    NonEmpty,
    ObjectMeta,
    Phase,
    Platform,
    PoolResource,
    Provider,
    _max_unhealthy,
    _os_version,
    check_replicas,
    count_or_percent,
    resolve_max_unhealthy,
)

# What did not change is shared with v1alpha1 and exported here too: code
# outside `api/` knows only the stored version, this module.
__all__ = [
    "DEFAULT_LEASES",
    "MAX_REPLICAS",
    "AutoscaleSpec",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DevicePool",
    "DevicePoolSpec",
    "DevicePoolStatus",
    "DisruptionBudget",
    "DisruptionReason",
    "DisruptionSpec",
    "Duration",
    "HealthSpec",
    "LeaseQueueSpec",
    "LeaseSpec",
    "LifetimeSpec",
    "ObjectMeta",
    "OnRelease",
    "Phase",
    "Platform",
    "Provider",
    "ProviderRef",
    "ProxySpec",
    "ReserveSpec",
    "RolloutSpec",
    "ScaleDownSpec",
    "ScheduleWindow",
    "SpendCapSpec",
    "check_replicas",
    "resolve_max_unhealthy",
]


def _provider_ref(value: Any) -> Any:
    if isinstance(value, str):
        raise ValueError(
            f"must be a mapping such as {{name: {Provider.BITCLOUDPHONE.value}, account: default}}"
            f" (v1alpha1's `provider: {value}` and `providerCredentialRef` moved here),"
            f" got {show_value(value)}"
        )
    return value


class ProviderRef(CamelModel):
    """Which provider, and which of the worker's configured accounts at it."""

    name: Provider = Provider.BITCLOUDPHONE
    account: NonEmpty = "default"


class ProxySpec(CamelModel):
    pool_ref: NonEmpty
    # How long the provider keeps one proxy session (exit IP) for a device. 0s: not sticky.
    session_ttl: WholeSecondsDuration = Field(default=0, alias="sessionTTL")


class HealthSpec(CamelModel):
    """Replace-not-repair thresholds for this pool. Unset: the worker's configured value."""

    offline_after: Duration | None = Field(default=None, gt=0)
    startup_timeout: Duration | None = Field(default=None, gt=0)
    max_unhealthy: Annotated[int | str, BeforeValidator(_max_unhealthy)] = "40%"


class ScaleDownSpec(CamelModel):
    """How scale-down treats this pool's devices. Unset: the worker's configured value."""

    idle_grace: Duration | None = Field(default=None, ge=0)


CountOrPercent = Annotated[int | str, BeforeValidator(count_or_percent("25%"))]


def resolve_count(value: int | str, total: int, *, round_up: bool) -> int:
    """A count, or a percentage of `total` rounded up (surge) or down (unavailable)."""
    if isinstance(value, int):
        return value
    percent = int(value[:-1])
    share, rest = divmod(total * percent, 100)
    return share + (1 if round_up and rest else 0)


class RolloutSpec(CamelModel):
    """How a template change replaces the devices made from the old one (Cluster API's
    semantics): `maxSurge` devices above `replicas` while replacing (a percentage rounds
    up), `maxUnavailable` below it (rounds down); not both 0."""

    max_surge: CountOrPercent = 1
    max_unavailable: CountOrPercent = 0

    @model_validator(mode="after")
    def _not_both_zero(self) -> RolloutSpec:
        if self.max_surge in (0, "0%") and self.max_unavailable in (0, "0%"):
            raise ValueError(
                "maxSurge and maxUnavailable cannot both be 0: nothing could be replaced"
            )
        return self

    def limits(self, replicas: int) -> tuple[int, int]:
        """(surge, unavailable) in devices for a pool of `replicas`; never both 0."""
        surge = resolve_count(self.max_surge, replicas, round_up=True)
        unavailable = resolve_count(self.max_unavailable, replicas, round_up=False)
        return (surge, unavailable) if surge or unavailable else (1, 0)


class DisruptionReason(StrEnum):
    """Why the pool itself takes a serving device away (a person's `replace` is not limited)."""

    DRIFTED = "Drifted"
    EXPIRED = "Expired"
    SCALE_DOWN = "ScaleDown"


class DisruptionBudget(CamelModel):
    """At most `devices` (a count, or a percentage of `replicas` rounded up) taken away at
    once for `reasons` (all if unset), while active: always without `schedule`; with one,
    for `duration` from each time the cron `schedule` (UTC) fires."""

    devices: CountOrPercent
    reasons: list[DisruptionReason] | None = None
    schedule: Annotated[str, BeforeValidator(_cron)] | None = None
    duration: Duration | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _schedule_with_duration(self) -> DisruptionBudget:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration go together: set both or neither")
        return self

    def covers(self, reason: DisruptionReason) -> bool:
        return self.reasons is None or reason in self.reasons

    def active(self, now: datetime) -> bool:
        """Whether the budget applies at `now` (UTC)."""
        if self.schedule is None or self.duration is None:
            return True
        from cronsim import CronSim

        since = now - timedelta(seconds=self.duration)
        fired = next(
            CronSim(self.schedule, since.replace(tzinfo=UTC) if since.tzinfo is None else since),
            None,
        )
        return fired is not None and fired <= now

    def allowed(self, replicas: int) -> int:
        return resolve_count(self.devices, replicas, round_up=True)


class DisruptionSpec(CamelModel):
    """Limits on what the pool takes away at once of its own accord (drift, lifetime,
    scale-down). Outside every scheduled window only the unscheduled budgets apply; with
    none active, nothing is limited. Health repairs are governed by `maxUnhealthy`."""

    budgets: list[DisruptionBudget] = Field(default_factory=list)

    def allowed(self, reason: DisruptionReason, *, replicas: int, now: datetime) -> int | None:
        """The most restrictive active budget's count for `reason`; None: no limit."""
        counts = [b.allowed(replicas) for b in self.budgets if b.covers(reason) and b.active(now)]
        return min(counts) if counts else None


class LifetimeSpec(CamelModel):
    """Replace devices by age (Karpenter's `expireAfter` + `terminationGracePeriod`).

    Past `maxAge` a device is replaced as soon as it is idle; past `maxAge +
    gracePeriod` even if busy. No `gracePeriod`: never forced, only when idle.
    """

    max_age: Duration = Field(gt=0)
    grace_period: Duration | None = Field(default=None, ge=0)


class SpendCapSpec(CamelModel):
    """A money cap: a create that would take the pool past it is not made.

    A cap never terminates a running device: lowered below what runs, it only
    stops growth (and replacements) until the pool is back under it.
    """

    max_devices: Count | None = Field(default=None, ge=0)
    # Dollars an hour, at the account's `pricePerHour` (worker config; 0.10 by default).
    max_hourly_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    def devices_allowed(self, price_per_hour: float) -> int | None:
        """How many devices may bill at once under this cap, or None (no cap)."""
        limits = []
        if self.max_devices is not None:
            limits.append(self.max_devices)
        # Free devices never cross a money cap.
        if self.max_hourly_cost is not None and price_per_hour > 0:
            # A hair of slack: 0.3 / 0.1 is 2.9999999999999996 in floats.
            limits.append(int(self.max_hourly_cost / price_per_hour + 1e-9))
        return min(limits) if limits else None

    def describe(self, price_per_hour: float) -> str:
        """The cap's limits as a person reads them: `maxDevices 20, maxHourlyCost $2/h at ...`."""
        limits = []
        if self.max_devices is not None:
            limits.append(f"maxDevices {self.max_devices}")
        if self.max_hourly_cost is not None:
            limits.append(
                f"maxHourlyCost ${self.max_hourly_cost:g}/h at ${price_per_hour:g}/h a device"
            )
        return ", ".join(limits)


class ReserveSpec(CamelModel):
    """What scale-down keeps on a power-billed account (`api: bitbrowser` cloud phones; `api:
    geelark` served by a node worker).

    A phone scaled away is shut down and its profile kept as a warm reserve that scale-up powers on
    first. `keep`: at most this many; past it, a profile is retired (the Local API has no delete)
    or deleted (GeeLark); unset `reserve`: every profile is kept on the Local API, none on
    GeeLark. Any other account with a delete ignores this.
    """

    keep: Count = Field(ge=0, le=MAX_REPLICAS)


class OnRelease(StrEnum):
    """What a device given back becomes."""

    KEEP = "keep"  # leasable again at once
    # The provider's clear (a cloud phone's fresh start) before it is leased again; a
    # new device where the provider has none (docs/leases.md, "onRelease: reset").
    RESET = "reset"
    REPLACE = "replace"  # a new device is made and the used one goes


class LeaseQueueSpec(CamelModel):
    """Tickets of those waiting for a device, granted first come, first served."""

    max: int = Field(default=50, ge=0, le=10_000, strict=True)
    max_wait: Duration = Field(default=300.0, gt=0)


class LeaseSpec(CamelModel):
    # A lease ends this long after its grant, renewed or not.
    max_duration: Duration = Field(default=3600.0, gt=0)
    # A holder that neither renews nor releases for this long has died: its lease ends.
    idle_timeout: Duration = Field(default=300.0, gt=0)
    queue: LeaseQueueSpec = Field(default_factory=LeaseQueueSpec)
    on_release: OnRelease = OnRelease.KEEP


class DevicePoolSpec(CamelModel):
    provider: Annotated[ProviderRef, BeforeValidator(_provider_ref)] = Field(
        default_factory=ProviderRef
    )
    platform: Platform
    region: NonEmpty
    os_version: Annotated[str, BeforeValidator(_os_version)] = Field(
        default="", json_schema_extra={"example": "14"}
    )
    replicas: Count = Field(ge=0, le=MAX_REPLICAS)
    proxy: ProxySpec | None = None
    health: HealthSpec = Field(default_factory=HealthSpec)
    scale_down: ScaleDownSpec = Field(default_factory=ScaleDownSpec)
    spend_cap: SpendCapSpec | None = None
    lifetime: LifetimeSpec | None = None
    # Set: devices made from an older template are replaced (drift). Unset: they stay.
    rollout: RolloutSpec | None = None
    disruption: DisruptionSpec | None = None
    reserve: ReserveSpec | None = None
    # Unset: leases as `DEFAULT_LEASES` (every pool can lease).
    leases: LeaseSpec | None = None
    # Set: the pool sizes itself from its leases (`replicas` is then the autoscaler's).
    autoscale: AutoscaleSpec | None = None
    # Campaign windows raising the autoscaler's floor (only beside `autoscale`).
    schedule: list[ScheduleWindow] | None = None

    @model_validator(mode="before")
    @classmethod
    def _replicas_optional(cls, data: Any) -> Any:
        return replicas_if_autoscaled(data)

    @model_validator(mode="after")
    def _schedule_fits(self) -> DevicePoolSpec:
        check_schedule(self.autoscale, self.schedule, title=type(self).__name__)
        return self

    @property
    def account(self) -> str:
        """The worker-configured provider account this pool's devices are rented from."""
        return self.provider.account

    def setting_overrides(self) -> dict[str, float]:
        """The worker settings this spec sets for its pool (`PoolSettings` field -> value)."""
        overrides = {
            "offline_after_seconds": self.health.offline_after,
            "startup_timeout_seconds": self.health.startup_timeout,
            "idle_grace_seconds": self.scale_down.idle_grace,
        }
        return {name: value for name, value in overrides.items() if value is not None}


DEFAULT_LEASES = LeaseSpec()


class DevicePool(PoolResource):
    api_version: Literal["mobile.example.com/v1beta1"] = API_VERSION_V1BETA1  # type: ignore[assignment]
    kind: Literal["DevicePool"] = KIND_DEVICE_POOL  # type: ignore[assignment]
    metadata: ObjectMeta
    spec: DevicePoolSpec
    status: DevicePoolStatus | None = None
