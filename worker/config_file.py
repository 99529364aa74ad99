"""The worker config file's schema: pydantic models in the file's camelCase names.

Every model forbids unknown fields; `first_error` turns a validation error into the one line a
`ConfigError` carries. Resolving the parsed file is ``worker/config.py``'s job."""

from __future__ import annotations

from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from devicepool.activities.settings import PoolSettings

DEFAULT_METRICS_PORT = 9464
# One worker process serves at least 1,000 pools (see the README's Scaling section).
# Short activities (lists, status reads, terminations): the SDK's own default.
DEFAULT_MAX_CONCURRENT_ACTIVITIES = 100
# Watches: two per pool (its own, its health check's), each a coroutine asleep
# between provider polls; 1,000 pools twice over.
DEFAULT_MAX_CONCURRENT_WATCHES = 4000
# Long-running workflows stay cached: a pool and its health check each, plus
# batches and ledgers; below that, every wake-up is a full replay.
DEFAULT_MAX_CACHED_WORKFLOWS = 4000
DEFAULT_ORPHAN_GRACE_SECONDS = 600.0
_POOL = PoolSettings()  # the intervals' defaults


class _FileModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=False, extra="forbid", allow_inf_nan=False
    )


class SpendCapFile(_FileModel):
    """`accounts.<name>.spendCap`: the account's money cap (either or both)."""

    max_devices: int | None = Field(default=None, ge=0)
    max_hourly_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)


# Above any real price (dollars): a larger one is a typo, and its arithmetic would overflow.
MAX_PRICE = 1e9


class BillingFile(_FileModel):
    """`accounts.<name>.billing`, in place of `pricePerHour`: `perMinute` (dollars a running
    minute, with `dailyCap`: most dollars one device bills a UTC day). `monthly` is read only
    to be refused with its reason (`worker.config._billing`)."""

    per_minute: float | None = Field(default=None, ge=0, le=MAX_PRICE, allow_inf_nan=False)
    daily_cap: float | None = Field(default=None, ge=0, le=MAX_PRICE, allow_inf_nan=False)
    monthly: float | None = Field(default=None, ge=0, le=MAX_PRICE, allow_inf_nan=False)


class AccountFile(_FileModel):
    # The provider adapter that speaks to the account (`activities.providers.PROVIDER_APIS`).
    api: str = "rest"
    # The node worker that serves the account (its calls go there). `api: bitbrowser`:
    # required, the node whose Local API is logged into the account, exactly one of
    # `node` and `baseUrl`. `api: geelark`: optional, the node that holds the key.
    node: str | None = None
    base_url: str | None = None
    api_key_file: str | None = None
    api_key_env: str | None = None
    # `api: geelark`: the key's app id (key mode); without it the key file holds a token.
    app_id: str | None = None
    creates_per_minute: int = Field(default=20, ge=1, le=6000)
    timeout_seconds: float = Field(default=10.0, gt=0)
    window_seconds: float = Field(default=60.0, gt=0)
    window_margin_seconds: float = Field(default=1.0, ge=0)
    # Dollars per device-hour: a pool's hourlyCost, costToDate and spendCap use it.
    price_per_hour: float = Field(default=0.10, ge=0, allow_inf_nan=False)
    # How the provider bills instead (per running minute with a daily cap).
    billing: BillingFile | None = None
    # Every pool of the account together: a create that would cross it waits.
    spend_cap: SpendCapFile | None = None


class ProxyPoolFile(_FileModel):
    type: str = "socks5"
    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    username_template: str = "user-session-{session}-ttl-{ttl}"
    password_file: str | None = None
    password_env: str | None = None


WEEK_SECONDS = 7 * 24 * 3600


class IntervalsFile(_FileModel):
    """`intervals`: `PoolSettings`' fields of these names, with its defaults (what each means:
    activities/settings.py), and the orphan sweep's grace."""

    resync_seconds: float = Field(default=_POOL.resync_seconds, gt=0)
    health_seconds: float = Field(default=_POOL.health_seconds, gt=0)
    offline_after_seconds: float = Field(default=_POOL.offline_after_seconds, gt=0)
    startup_timeout_seconds: float = Field(default=_POOL.startup_timeout_seconds, gt=0)
    idle_grace_seconds: float = Field(default=_POOL.idle_grace_seconds, ge=0)
    failure_streak_limit: int = Field(default=_POOL.failure_streak_limit, ge=1)
    backoff_initial_seconds: float = Field(default=_POOL.backoff_initial_seconds, gt=0)
    backoff_max_seconds: float = Field(default=_POOL.backoff_max_seconds, gt=0)
    teardown_blocked_after_seconds: float = Field(
        default=_POOL.teardown_blocked_after_seconds, gt=0
    )
    node_lost_after_seconds: float = Field(default=_POOL.node_lost_after_seconds, gt=0)
    health_liveness_seconds: float = Field(default=_POOL.health_liveness_seconds, gt=0)
    # A device whose pool has no running workflow is terminated after this long
    # (the per-account orphan sweep, workflows/orphans/workflow.py).
    orphan_grace_seconds: float = Field(default=DEFAULT_ORPHAN_GRACE_SECONDS, ge=0)

    @field_validator("*")
    @classmethod
    def _at_most_a_week(cls, value: float) -> float:
        # A pass adds these to its clock: far beyond a week, the arithmetic overflows.
        if value > WEEK_SECONDS:
            raise ValueError(f"must be at most {WEEK_SECONDS} (a week)")
        return value


class WorkerCapacity(BaseModel):
    """Slot budgets and cache size of the process's Temporal workers (``worker/build.py``).

    Short activities and watches draw on separate budgets: a watch sleeps for
    up to an hour in its slot, so sharing one budget lets watches starve the
    lists, status reads and terminations every pool needs.
    """

    model_config = ConfigDict(frozen=True)

    max_concurrent_activities: int = Field(default=DEFAULT_MAX_CONCURRENT_ACTIVITIES, ge=1)
    max_concurrent_watches: int = Field(default=DEFAULT_MAX_CONCURRENT_WATCHES, ge=1)
    max_cached_workflows: int = Field(default=DEFAULT_MAX_CACHED_WORKFLOWS, ge=1)


class CapacityFile(_FileModel, WorkerCapacity):
    """`capacity`: `WorkerCapacity` in the file's names."""


class DeploymentFile(_FileModel):
    # The Temporal worker deployment this worker is a version of ("" = unversioned).
    name: str = ""
    # Its build id ("" = the package version and a digest of the workflow code).
    build_id: str = ""
    # What a workflow's runs do by default: stay on the build they started on
    # ("pinned", moving at their next hand-over) or follow the current build at
    # their next task ("autoUpgrade": one process and no older build beside it).
    behavior: Literal["pinned", "autoUpgrade"] = "pinned"

    @field_validator("name")
    @classmethod
    def _no_dot(cls, name: str) -> str:
        if "." in name:
            raise ValueError("must not contain a dot (Temporal reads it as the build id's start)")
        return name


class EncryptionFile(_FileModel):
    # Encrypted history (devicepool.codec): key files, the first encrypting, all decoding.
    key_files: list[str] = Field(default_factory=list)


class ConfigFile(_FileModel):
    accounts: dict[str, AccountFile] = Field(default_factory=dict)
    proxy_pools: dict[str, ProxyPoolFile] = Field(default_factory=dict)
    intervals: IntervalsFile = Field(default_factory=IntervalsFile)
    capacity: CapacityFile = Field(default_factory=CapacityFile)
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)
    deployment: DeploymentFile = Field(default_factory=DeploymentFile)
    encryption: EncryptionFile = Field(default_factory=EncryptionFile)


def first_error(err: pydantic.ValidationError) -> str:
    """The first problem, as `field.path: message` with the file's camelCase names."""
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"{loc}: unknown field"
    if first["type"] == "missing":
        return f"{loc}: required"
    message = first["msg"]
    if first["type"] == "value_error":  # our own validators' words, without pydantic's prefix
        message = str(first.get("ctx", {}).get("error", message))
    value = first.get("input")
    shown = "" if isinstance(value, dict | list) else f", got {value!r}"
    extra = f" ({len(err.errors()) - 1} more problem(s))" if len(err.errors()) > 1 else ""
    return f"{loc}: {message[:1].lower()}{message[1:]}{shown}{extra}"
