"""What the workflows tell each other: the messages that cross from one workflow type to another.

The pool and its batches, its health check and the account's ledger talk in these
(each class says who sends it); signal names are in `devicepool.api.names`. Each
workflow sub-package imports these from here and nothing from another sub-package.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from devicepool.activities.models import DeviceTemplate, PoolSettings, fold_template
from devicepool.api.base import CamelModel

__all__ = [
    "AccountCap",
    "AccountPause",
    "BatchReport",
    "HealthConfig",
    "HealthInput",
    "HealthReport",
    "PermitGrant",
    "PermitIntent",
    "PermitRequest",
    "PermitsUsed",
    "ProvisionBatchInput",
    "QuotaRefusal",
    "WithdrawSlots",
]


class ProvisionBatchInput(CamelModel):
    """Input of the `ProvisionBatch` child: create these slots, wait until they boot."""

    pool: str
    parent_workflow_id: str
    account: str
    # what each device is created from, handed whole to every create
    template: DeviceTemplate
    generation: int
    slots: list[int]
    # the pool's first run id, shortened: part of every create's idempotency key
    incarnation: str = ""
    startup_timeout_seconds: float = 300.0
    poll_seconds: float = 5.0
    # Replaces unhealthy devices: the account's ledger serves it before growth.
    replacement: bool = False
    # The node worker serving the account ("" for none; `placement.py`).
    node: str = ""
    # The pool's `spec.reserve.keep`, 0 when unset (None: a batch an older build started),
    # handed to every create (`CreateDeviceInput.reserve_keep`).
    reserve_keep: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _fold_v0_1_0(cls, data: Any) -> Any:
        return fold_template(data)


class QuotaRefusal(CamelModel):
    """Creates of a batch the provider refused for a used-up quota (`BatchReport.quota`)."""

    # The quota's name (`DailyCreateQuota`, `DailyOpenQuota`, `ProfileCap`, ...; else
    # `QuotaExceeded`), the last refusal's reason, and when the quota resets (None: no clock).
    reason: str
    message: str
    resets_at: datetime | None = None
    slots: list[int] = Field(default_factory=list)


class BatchReport(CamelModel):
    """What a provisioning child tells its pool (`batch_created`, then `batch_done`)."""

    workflow_id: str
    slots: list[int]
    # slot -> device id, for every slot whose create the provider accepted
    created: dict[int, str] = Field(default_factory=dict)
    ready: list[str] = Field(default_factory=list)
    # slots whose create failed for good, with the reason
    failed_slots: dict[int, str] = Field(default_factory=dict)
    # the subset of `failed_slots` the provider never refused (lost with a worker, timed
    # out, rate-limited past its budget): no verdict on the region, no back-off.
    unanswered_slots: list[int] = Field(default_factory=list)
    # devices created that never became ready: the provider says `failed`, or
    # the startup timeout ran out (the pool removes them; they count towards a back-off)
    failed_devices: dict[str, str] = Field(default_factory=dict)
    # devices created that left the provider before they booted (not found, or removed
    # by a scale-down or by hand): no verdict on the region.
    vanished_devices: dict[str, str] = Field(default_factory=dict)
    # devices created that the provider showed offline before they booted: left to the
    # health check; neither a failed boot nor a verdict on the region.
    offline_devices: dict[str, str] = Field(default_factory=dict)
    cancelled: bool = False
    # slots dropped with no create sent: before they held a permit (the pool needs fewer
    # devices), or, in a cancelled batch, a create its cancel stopped before it started
    withdrawn: list[int] = Field(default_factory=list)
    # the pool incarnation that started the batch: a pool terminated by hand and
    # applied again (same workflow id) ignores what an earlier one's batches say
    incarnation: str = ""
    # of `failed_slots`, those refused for a used-up quota (the pool holds its creates)
    quota: QuotaRefusal | None = None


class WithdrawSlots(CamelModel):
    """Signal `withdraw_slots` to a batch: the pool no longer needs these slots."""

    slots: list[int]


class HealthConfig(CamelModel):
    """What the health child needs from the pool's spec (sent again when it changes)."""

    max_unhealthy: int | str = "40%"
    # The pool's desired size (percentages resolve against it); None from an older pool.
    replicas: int | None = None
    # The pool's own thresholds (v1beta1 `spec.health`). None: the worker's setting.
    offline_after_seconds: float | None = None
    startup_timeout_seconds: float | None = None
    # `devicepool pause`: unhealthy devices are found and reported, not replaced.
    paused: bool = False
    # The pool's `spec.reserve.keep` (None: unset, keep every profile): a power-billed
    # account's replacement parks the broken profile in reserve only below it.
    reserve_keep: int | None = None

    def applied_to(self, settings: PoolSettings) -> PoolSettings:
        """`settings` with this pool's own thresholds in place of the worker's."""
        own = {"offline_after_seconds", "startup_timeout_seconds"}
        return settings.model_copy(
            update=self.model_dump(include=own, exclude_none=True, by_alias=False)
        )


class HealthInput(CamelModel):
    """Input of the pool's health child (and of its own continue-as-new)."""

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
    # Also carried: whether the last check paused remediation, and whether it told the
    # pool anything (so a recovery a new run sees first still clears RemediationPaused).
    paused: bool = False
    was_reporting: bool = False
    # The pool's first run id (a pool applied again under its name has another); learned
    # at the first check when the pool did not pass it.
    pool_first_run_id: str = ""


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


class PermitRequest(CamelModel):
    """A batch asks for `count` create permits; grants come back by signal."""

    request_id: str
    requester: str  # workflow id to signal `permits_granted` to
    pool: str
    count: int = Field(ge=1)
    replacement: bool = False
    # How long one create may keep its permit without reporting (its retry budget).
    lease_seconds: float = Field(default=600.0, gt=0)


class PermitIntent(CamelModel):
    """A pool announces a permit request on its way (`expecting`), or withdraws it."""

    pool: str
    expecting: bool = True
    # How long the ledger holds the round for the announced request at most.
    ttl_seconds: float = Field(default=5.0, gt=0, le=60)


class PermitGrant(CamelModel):
    """The ledger's answer to a `PermitRequest` (signal `permits_granted`)."""

    request_id: str
    grant_id: str
    count: int


class PermitsUsed(CamelModel):
    """Every permit of a grant is accounted for: when each create finished, and failures."""

    grant_id: str
    done_at: list[datetime] = Field(default_factory=list)
    failed: int = 0
    # Permits handed back without a create (more than the batch still needed,
    # or it was cancelled first): they leave the window at once.
    unused: int = 0


class AccountCap(CamelModel):
    """Signal `account_capped` from the account's ledger: the account's `spendCap` (worker
    config) holds this pool's creates back (`reached`), or no longer does."""

    account: str
    reached: bool
    message: str = ""


class AccountPause(CamelModel):
    """Signal `account_paused` from the account's ledger: the provider asked it to wait
    longer than a window (a 429's Retry-After); the pool says so until `until`."""

    account: str
    until: datetime
    reason: str = ""
