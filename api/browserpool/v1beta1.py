"""BrowserPool `mobile.example.com/v1beta1`: the version browser pools are stored in.

What changed from v1alpha1 (`api.browserpool.conversion`, lossless both ways), and why
DevicePool's other v1beta1 fields have no BrowserPool meaning: docs/browserpools.md,
'The manifest'."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    model_validator,
)

from devicepool.api.autoscale import (
    AutoscaleSpec,
    ScheduleWindow,
    check_schedule,
    replicas_if_autoscaled,
)
from devicepool.api.base import CamelModel
from devicepool.api.browserpool.v1alpha1 import (
    MAX_FINGERPRINT_VALUES,
    MAX_REPLICAS,
    SECRET_FINGERPRINT_KEYS,
    BrowserConditionType,
    BrowserPoolStatus,
    Fingerprint,
    GroupId,
    NodeSelector,
)
from devicepool.api.names import API_VERSION_V1BETA1, KIND_BROWSER_POOL
from devicepool.api.v1alpha1 import (
    Count,
    ObjectMeta,
    PoolResource,
    _max_unhealthy,
)
from devicepool.api.v1beta1 import LeaseSpec, ProxySpec

# What did not change is shared with v1alpha1 and exported here too: code
# outside `api/` knows only the stored version.
__all__ = [
    "DEFAULT_MAX_UNHEALTHY",
    "MAX_FINGERPRINT_VALUES",
    "MAX_REPLICAS",
    "SECRET_FINGERPRINT_KEYS",
    "BrowserConditionType",
    "BrowserHealthSpec",
    "BrowserPool",
    "BrowserPoolSpec",
    "BrowserPoolStatus",
    "ProxySpec",
]

# The same default as a DevicePool's `health.maxUnhealthy`.
DEFAULT_MAX_UNHEALTHY = "40%"


class BrowserHealthSpec(CamelModel):
    """When a profile is given up on. `failureStreakLimit` unset: the worker's value.

    Why a streak and a pause: docs/browserpools.md, 'The manifest' (`health`).
    """

    failure_streak_limit: Count | None = Field(default=None, ge=1)
    max_unhealthy: Annotated[int | str, BeforeValidator(_max_unhealthy)] = DEFAULT_MAX_UNHEALTHY


class BrowserPoolSpec(CamelModel):
    replicas: Count = Field(ge=0, le=MAX_REPLICAS)
    node_selector: NodeSelector = Field(default_factory=dict)
    fingerprint: Fingerprint = Field(default_factory=dict)
    proxy: ProxySpec | None = None
    group_id: GroupId | None = None
    open: StrictBool = True
    health: BrowserHealthSpec = Field(default_factory=BrowserHealthSpec)
    # Unset: leases as `v1beta1.DEFAULT_LEASES` (every pool can lease).
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
    def _schedule_fits(self) -> BrowserPoolSpec:
        check_schedule(self.autoscale, self.schedule, title=type(self).__name__)
        return self


class BrowserPool(PoolResource):
    api_version: Literal["mobile.example.com/v1beta1"] = API_VERSION_V1BETA1  # type: ignore[assignment]
    kind: Literal["BrowserPool"] = KIND_BROWSER_POOL  # type: ignore[assignment]
    metadata: ObjectMeta
    spec: BrowserPoolSpec
    status: BrowserPoolStatus | None = None
