"""DevicePool `mobile.example.com/v1alpha1`: the resource a user applies.

Field names are camelCase in JSON/YAML, snake_case in Python. Unknown fields are rejected
everywhere: a typo such as `replica:` must never silently mean 0."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    Strict,
    StringConstraints,
)

from devicepool.api.base import CamelModel
from devicepool.api.durations import MAX_SECONDS
from devicepool.api.labels import check_dns_label
from devicepool.api.names import API_VERSION_V1ALPHA1, API_VERSION_V1BETA1, KIND_DEVICE_POOL
from devicepool.api.problems import show_value, written

MAX_REPLICAS = 500
_PERCENT = re.compile(r"^(100|[1-9]?[0-9])%$")


def check_replicas(replicas: int) -> int:
    """The replicas range rule (0..MAX_REPLICAS), for callers outside a model's validation.

    The spec's `Field(ge=0, le=MAX_REPLICAS)` applies it to manifests; the
    workflow's `scale` signal and the client's `scale` check plain ints with this.
    """
    if replicas < 0:
        raise ValueError(f"replicas: must be >= 0, got {replicas}")
    if replicas > MAX_REPLICAS:
        raise ValueError(f"replicas: must be <= {MAX_REPLICAS}, got {replicas}")
    return replicas


def _strict_int(value: Any) -> Any:
    # Strict validation refuses `replicas: true` (YAML 1.1's `yes` too) and `"5"`, as
    # `ScaleRequest` does; this says why, in the author's terms. Everything else is
    # left to the int validation and its messages. Payloads are JSON: their numbers pass.
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, got {str(value).lower()}")
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        raise ValueError(
            f"must be an integer, got {show_value(value)}"
            f" (a quoted number is a string: write {value.strip()})"
        )
    return value


def _sticky_ttl(value: Any) -> Any:
    # `stickyTTL: 15m` is v1beta1's `sessionTTL` written under the v1alpha1 name.
    if isinstance(value, str | float):
        raise ValueError(
            f"must be a whole number of seconds such as 900, got {show_value(value)}"
            f" (apiVersion {API_VERSION_V1BETA1} takes a duration such as 15m as"
            " proxy.sessionTTL)"
        )
    return _strict_int(value)


def _os_version(value: Any) -> Any:
    # `osVersion: 14` is fine, but YAML reads `osVersion: 14.10` as the float
    # 14.1: refuse floats rather than silently store the wrong version, and
    # suggest the digits the user wrote (the loader keeps them), not 14.1.
    if isinstance(value, bool):
        raise ValueError(f"must be a string, got {str(value).lower()}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        raise ValueError(
            f'must be a quoted string: write osVersion: "{written(value)}" '
            f"(unquoted, it reads as the number {float(value)})"
        )
    return value


def count_or_percent(example: str) -> Callable[[Any], Any]:
    """A before-validator of a count or a percentage such as `example` (`'40%'`).

    Before, not after: after `int | str` validation a YAML `true` would already be 1.
    """

    def check(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"must be >= 0, got {value}")
            return value
        if isinstance(value, str) and _PERCENT.match(value):
            return value
        if isinstance(value, str) and value.isascii() and value.isdigit():
            return int(value)
        raise ValueError(
            f"must be a count or a percentage such as {example!r}, got {show_value(value)}"
        )

    return check


_max_unhealthy = count_or_percent("40%")


def resolve_max_unhealthy(value: int | str, total: int, *, at_least_one: bool = True) -> int:
    """How many devices may be unhealthy at once before remediation pauses.

    A count stays a count (0 too: the one way to turn replacement off); a percentage is of
    `total`, rounded down but never below 1 (docs/pools.md, 'Health: replace, do not repair').
    `at_least_one=False` is the rule before the floor (health checks recorded before it replay
    on it).
    """
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        percent = int(value[:-1])
        share = (total * percent) // 100
        return max(1, share) if at_least_one and percent > 0 else share
    return int(value)


DNSLabel = Annotated[str, AfterValidator(check_dns_label)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]
# A count: an int written as a number (no boolean, no quoted string, no 5.0).
Count = Annotated[int, Strict(), BeforeValidator(_strict_int)]


class Provider(StrEnum):
    BITCLOUDPHONE = "bitcloudphone"


class Platform(StrEnum):
    ANDROID = "android"
    IOS = "ios"


class ObjectMeta(CamelModel):
    name: DNSLabel
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ProxySpec(CamelModel):
    pool_ref: NonEmpty
    # `stickyTTL` in the article's manifest; to_camel would say `stickyTtl`.
    # At most the longest duration v1beta1's `sessionTTL` can hold (Go's, ~292 years).
    sticky_ttl: Annotated[int, Strict(), BeforeValidator(_sticky_ttl)] = Field(
        default=0, ge=0, le=MAX_SECONDS, alias="stickyTTL"
    )


class DevicePoolSpec(CamelModel):
    provider: Provider = Provider.BITCLOUDPHONE
    platform: Platform
    region: NonEmpty
    os_version: Annotated[str, BeforeValidator(_os_version)] = Field(
        default="", json_schema_extra={"example": "14"}
    )
    replicas: Count = Field(ge=0, le=MAX_REPLICAS)
    proxy: ProxySpec | None = None
    provider_credential_ref: NonEmpty = "default"
    max_unhealthy: Annotated[int | str, BeforeValidator(_max_unhealthy)] = "40%"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    PROVIDER_AVAILABLE = "ProviderAvailable"
    REMEDIATION_PAUSED = "RemediationPaused"
    SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
    SPEC_REJECTED = "SpecRejected"
    SPEND_CAP_REACHED = "SpendCapReached"
    ROLLING_OUT = "RollingOut"
    TEARDOWN_BLOCKED = "TeardownBlocked"
    QUOTA_EXHAUSTED = "QuotaExhausted"
    # A pool that sizes itself (`spec.autoscale`): why the size is what it is.
    AUTOSCALING = "Autoscaling"


class Condition(CamelModel):
    """The Kubernetes condition shape (`metav1.Condition`)."""

    type: str
    status: ConditionStatus
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int = 0


class Phase(StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    SCALING_DOWN = "ScalingDown"
    DEGRADED = "Degraded"
    DELETING = "Deleting"
    DELETED = "Deleted"


class DevicePoolStatus(CamelModel):
    phase: Phase = Phase.PENDING
    desired_replicas: int = 0
    ready_devices: int = 0
    # devices that exist at the provider and are booting (or rebooting)
    provisioning_devices: int = 0
    busy_devices: int = 0
    offline_devices: int = 0
    # creates planned or on their way, whose device the provider does not show yet
    pending_devices: int = 0
    # Dollars an hour the pool's devices bill now (every device not yet
    # terminated, at the account's price), and what they billed so far.
    hourly_cost: float = 0.0
    cost_to_date: float = 0.0
    last_reconciled: datetime | None = None
    observed_generation: int = 0
    device_ids: list[str] = Field(default_factory=list)
    # Devices `devicepool protect` keeps from scale-down and expiry.
    protected_devices: list[str] = Field(default_factory=list)
    # Devices made from the spec's current template (what a rollout brings all to).
    updated_devices: int = 0
    # What a deletion kept at a provider that has no delete (cloud phones over the
    # Local API): profiles powered off and marked retired. Set when the pool is Deleted.
    profiles_retired: int = 0
    # Leases (docs/leases.md): members held by one, tickets waiting, the oldest's wait.
    leased_devices: int = 0
    leases_queued: int = 0
    oldest_queued_seconds: float | None = None
    # Leases ended by no holder's word (expired, idle, unclaimed, member lost), ever.
    leases_expired: int = 0
    # The intervals the pool goes by: its spec's `health`/`scaleDown`, else the worker's
    # settings (what `describe` shows). None from a worker before them.
    offline_after_seconds: float | None = None
    startup_timeout_seconds: float | None = None
    idle_grace_seconds: float | None = None
    # A pool that sizes itself (`spec.autoscale`): the size its demand asks for, and the
    # schedule window in force. None otherwise.
    desired_from_demand: int | None = None
    active_schedule: str | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class PoolResource(CamelModel):
    """What every version of a pool resource has besides its fields: a name, where it was read."""

    # Where the loader read it (`pools.yaml`, `pools.yaml[1]`); never sent anywhere.
    _source: str | None = PrivateAttr(default=None)
    if TYPE_CHECKING:  # each version declares it, after apiVersion and kind
        metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def source(self) -> str | None:
        """The file (and document) the pool was loaded from, for messages; None if built."""
        return self._source

    def __eq__(self, other: object) -> bool:
        # Where a pool was read is no part of it: the same pool from two files is equal.
        if not isinstance(other, PoolResource):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # as BaseModel: mutable, unhashable

    def read_from(self, source: str | None) -> Self:
        """This pool, marked as loaded from `source`."""
        self._source = source
        return self


class DevicePool(PoolResource):
    """The article's version. Pools are stored as v1beta1; this one still applies, converted."""

    api_version: Literal["mobile.example.com/v1alpha1"] = API_VERSION_V1ALPHA1  # type: ignore[assignment]
    kind: Literal["DevicePool"] = KIND_DEVICE_POOL  # type: ignore[assignment]
    metadata: ObjectMeta
    spec: DevicePoolSpec
    status: DevicePoolStatus | None = None
