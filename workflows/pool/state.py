"""`PoolState`: everything a pool run hands to the next one, and the reducers that change it.

Its groups added after v0.1.0 (`Cost`, `Control`, `Rollout`, `PendingReset`) are in
`groups.py`. Each reducer (`take_listing`, `take_report`, `take_health`, ...) answers what to
say about the news (`Said`). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from devicepool.activities import models as am
from devicepool.activities.device_models import UNKNOWN_STATUS_REASON
from devicepool.api.base import CamelModel
from devicepool.api.v1beta1 import ConditionStatus, ConditionType, DevicePoolSpec, DevicePoolStatus
from devicepool.workflows.pool import events as say
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.fates import LEFT, Fate, Fates
from devicepool.workflows.pool.groups import (
    BILLED_HOURS_KEPT,
    MAX_DAY_BILLED,
    Control,
    Cost,
    PendingReset,
    Rollout,
)
from devicepool.workflows.pool.plan import lost_offline, offline_ids
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.reconciler.events import PoolEvent, record
from devicepool.workflows.reconciler.leases import LeaseBook
from devicepool.workflows.shared.protocol import (
    AccountCap,
    AccountPause,
    BatchReport,
    HealthConfig,
    HealthReport,
)

__all__ = [
    "BILLED_HOURS_KEPT",
    "MAX_DAY_BILLED",
    "Control",
    "Cost",
    "PendingReset",
    "PoolState",
    "Rollout",
    "Said",
    "leaving_by_report",
    "running_devices",
]

# The id lists of state carried by v0.1.0, each now a fate in `PoolState.fates`.
_V010_FATES = (
    ("replacing", Fate.REPLACED),
    ("scaledDownBooting", Fate.SCALED_DOWN),
    ("scaled_down_booting", Fate.SCALED_DOWN),
    ("removedFailed", Fate.REMOVED_FAILED),
    ("removed_failed", Fate.REMOVED_FAILED),
    ("doomed", Fate.DOOMED),
)


def leaving_by_report(
    devices: Collection[am.DeviceInfo], reported_gone: Collection[str]
) -> list[am.DeviceInfo]:
    """Of a listing, the devices the health check reported terminated that the provider
    still lists: not members, but billing until gone (a cap or surge counts them)."""
    return [
        d.model_copy(update={"status": am.TERMINATING})
        for d in devices
        if d.id in reported_gone and d.status != am.TERMINATED
    ]


def watched_devices(
    devices: Sequence[am.DeviceInfo], reported_leaving: Sequence[am.DeviceInfo]
) -> list[am.DeviceInfo]:
    """What the watch is told the provider lists now: also the devices the health check
    reported terminated that are still listed (else every watch answers at once)."""
    return [*devices, *reported_leaving]


def billed_devices(
    devices: Sequence[am.DeviceInfo], reported_leaving: Sequence[am.DeviceInfo]
) -> int:
    """How many devices bill now: every one the provider has not terminated, those the
    health check removed included until they are gone."""
    return sum(1 for d in [*devices, *reported_leaving] if d.status != am.TERMINATED)


# Not powered on: what a per-minute account does not bill (on GeeLark, offline is a phone
# shut down and failed an expired one; offline for a status the adapter does not know may be
# powered on, and bills).
_NOT_RUNNING = frozenset({am.OFFLINE, am.FAILED, am.TERMINATED})


def _running(device: am.DeviceInfo) -> bool:
    unknown = (device.reason or "").startswith(UNKNOWN_STATUS_REASON)
    return device.status not in _NOT_RUNNING or (device.status == am.OFFLINE and unknown)


def running_devices(
    devices: Sequence[am.DeviceInfo], reported_leaving: Sequence[am.DeviceInfo]
) -> list[str]:
    """The ids of the devices that bill per running minute (`Billing` `perMinute`): powered
    on (booting too), those the health check removed included until they are gone."""
    return sorted({d.id for d in [*devices, *reported_leaving] if _running(d)})


@dataclass
class Said:
    """What a reducer found worth saying: events for `describe`, a line for the log."""

    events: list[say.Happened] = field(default_factory=list)
    warning: str | None = None


class PoolState(CamelModel):
    # the spec's generation (each accepted change adds one)
    generation: int = 1
    created_at: datetime | None = None
    status: DevicePoolStatus = Field(default_factory=DevicePoolStatus)
    slots: SlotBook = Field(default_factory=SlotBook)
    backoff: Backoff = Field(default_factory=Backoff)
    # device id -> what the pool decided or learned about it (`workflows/pool/fates.py`)
    fates: Fates = Field(default_factory=Fates)
    replaced_total: int = 0
    # replacements not yet handed to a batch (the ledger serves them before growth)
    replacements_owed: int = 0
    # set once the pool is deleted: a run continued while deleting only finishes the finalizer
    deleting: bool = False
    # This chain of runs started its health check: the first start replaces a check an
    # earlier pool of its name left running.
    health_started: bool = False
    events: list[PoolEvent] = Field(default_factory=list)
    # The health check's last report, without its device lists (it reports only changes,
    # so a new run must still know remediation is paused).
    health: HealthReport | None = None
    # Devices the last listing showed offline (`plan.lost_offline`).
    offline_seen: list[str] = Field(default_factory=list)
    # The last listing (`activities.models.device_rows`), written at a hand-over only:
    # the next run shows it until its own first listing lands.
    listing: list[list[Any]] = Field(default_factory=list)
    # What the health check was last told, and whether the ledger is still to hear of
    # more permits: a change that landed in a handing-over pass is told by the next run.
    health_told: HealthConfig | None = None
    announce: bool = False
    # The provider's long pause of the account's creates (from the ledger), until it ends.
    account_pause: AccountPause | None = None
    # Added after v0.1.0, grouped.
    cost: Cost = Field(default_factory=Cost)
    control: Control = Field(default_factory=Control)
    rollout: Rollout = Field(default_factory=Rollout)
    # Doomed devices whose replacement is already credited (a device has one fate, and
    # `doomed` wins); `replaced` once the termination went through.
    doomed_replaced: list[str] = Field(default_factory=list)
    # Who holds which device, who waits for one (`reconciler/leases.py`).
    leases: LeaseBook = Field(default_factory=LeaseBook)
    # Devices back from a lease to reset before they are leased again (`leasable.reset_used`).
    resets: list[PendingReset] = Field(default_factory=list)
    # Devices doomed after a lease, unreset (`onRelease: replace`, a reset not possible):
    # their removal tells the provider (`TerminateDeviceInput.used`); forgotten once gone.
    replaced_after_use: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _fates_from_v010(cls, data: Any) -> Any:
        """State handed over by a v0.1.0 run kept four id lists; they are fates now."""
        if not isinstance(data, dict) or not any(k in data for k, _ in _V010_FATES):
            return data
        data = dict(data)
        fates = Fates.model_validate(data.get("fates", {}))
        doomed = set(data.get("doomed") or ())
        replacing = data.get("replacing") or ()
        for key, fate in _V010_FATES:
            fates.set(data.pop(key, None) or (), fate)
        data["fates"] = fates
        if doomed & set(replacing):
            data["doomed_replaced"] = [d for d in replacing if d in doomed]
        return data

    @property
    def doomed(self) -> list[str]:
        return self.fates.of(Fate.DOOMED)

    def _doom(self, device_ids: Collection[str]) -> None:
        """Terminated whatever their state, every pass until it goes through; a credited
        replacement is remembered beside (`doomed_replaced`)."""
        credited = [d for d in device_ids if self.fates.has(d, Fate.REPLACED)]
        self.doomed_replaced += [d for d in credited if d not in self.doomed_replaced]
        self.fates.set(device_ids, Fate.DOOMED)

    # ------------------------------------------------------------ reducers

    def record(self, now: datetime, *happened: say.Happened) -> None:
        for one in happened:
            self.events = record(
                self.events, now=now, reason=one.reason, message=one.message, warning=one.warning
            )

    def take_pause(self, pause: AccountPause, now: datetime) -> None:
        self.account_pause = pause
        message = f"creates of account {pause.account!r} wait until {st.iso(pause.until)}"
        self.record(now, say.Happened("ProviderRateLimited", message, warning=True))

    def take_cap(self, cap: AccountCap, now: datetime) -> None:
        self.cost.account_cap = cap
        if not cap.reached:
            self.record(
                now,
                say.Happened(
                    "SpendCapReleased",
                    f"account {cap.account!r}: its spendCap allows this pool's creates again",
                ),
            )

    def deleted(self, now: datetime, *, profiles_retired: int) -> None:
        """The teardown finished: billing counted to `now` and stopped; the deleted status."""
        self.cost.accrue(now, 0, 0.0)
        final = st.deleted(self.status, now, profiles_retired=profiles_retired)
        self.status = final.model_copy(update={"cost_to_date": round(self.cost.to_date, 4)})

    def publish(self, status: DevicePoolStatus) -> Said:
        """Take the status a pass published; say what it newly shows that needs a word."""
        before = self.status.condition(ConditionType.SPEND_CAP_REACHED)
        quota_before = self.status.condition(ConditionType.QUOTA_EXHAUSTED)
        self.status = status.model_copy(
            update={
                "hourly_cost": round(self.cost.rate, 4),
                "cost_to_date": round(self.cost.to_date, 4),
            }
        )
        after = self.status.condition(ConditionType.SPEND_CAP_REACHED)
        reached = after is not None and after.status == ConditionStatus.TRUE
        said = Said(say.quota(quota_before, self.status.condition(ConditionType.QUOTA_EXHAUSTED)))
        if reached and (before is None or before.status != ConditionStatus.TRUE):
            assert after is not None
            # More devices wanted than the cap allows: said once, when it starts.
            said.events.append(say.Happened("SpendCapReached", after.message, warning=True))
        return said

    def respec(
        self, old: DevicePoolSpec, new: DevicePoolSpec, *, body_changed: bool, now: datetime | None
    ) -> None:
        """A new spec is accepted as the next generation (`now`: said as an event; None for
        the spec the pool was created with). Creates under an older body are not retried."""
        if now is not None:
            self.record(
                now,
                say.applied(
                    old_replicas=old.replicas,
                    new_replicas=new.replicas,
                    generation=self.generation + 1,
                ),
            )
        self.announce = self.announce or new.replicas > old.replicas
        self.generation += 1
        if body_changed:
            self.slots.body_changed(self.generation)

    def take_listing(
        self, devices: list[am.DeviceInfo], *, reported_gone: Collection[str]
    ) -> list[am.DeviceInfo]:
        """The devices the pool goes by now: `devices` less those the health check reported
        gone (a listing may have started before their termination). An offline device the
        listing shows gone is owed a replacement (`plan.lost_offline`)."""
        self.slots.seen(d.id for d in devices)
        listed = {d.id for d in devices if d.status != am.TERMINATED}
        for fate in LEFT.values():
            self.fates.clear([d for d in self.fates.of(fate) if d not in listed], fate)
        self.rollout.left_first = [d for d in self.rollout.left_first if d in listed]
        devices = [d for d in devices if d.id not in reported_gone]
        gone = lost_offline(self.offline_seen, devices)
        fresh = [
            d
            for d in gone
            if not (self.fates.has(d, Fate.REPLACED) or self.fates.has(d, Fate.DOOMED))
        ]
        self.fates.clear(gone, Fate.REPLACED)  # credited by the health check's report first
        self.doomed_replaced = [d for d in self.doomed_replaced if d not in gone]
        if fresh and not self.deleting:
            self.replacements_owed += len(fresh)
            self.fates.set(fresh, Fate.REPLACED)
        self.offline_seen = offline_ids(devices)
        return devices

    def take_report(
        self,
        report: BatchReport,
        *,
        region: str,
        settings: am.PoolSettings,
        now: datetime,
        words: say.Words = say.REST,
        hold_quota: bool = False,
    ) -> Said:
        """A batch ended: its failed devices are doomed, its failed boots may pause creates,
        its quota refusals hold them (`hold_quota`: this run may; `Backoff.record`)."""
        removed = [d for d in report.vanished_devices if self.fates.has(d, Fate.REMOVED_FAILED)]
        for device_id in removed:
            # A failed device this pool removed first is still a failed boot.
            report.vanished_devices.pop(device_id)
            report.failed_devices[device_id] = "failed (removed by the pool)"
        self.fates.clear(removed, Fate.REMOVED_FAILED)
        said = Said(say.batch_done(report, ours=self.fates.of(Fate.SCALED_DOWN), words=words))
        self.fates.clear(report.vanished_devices, Fate.SCALED_DOWN)
        self._doom(sorted(report.failed_devices))
        problem = self.backoff.record(
            report, region=region, settings=settings, now=now, hold_quota=hold_quota
        )
        if problem:
            said.warning = f"creates paused: {problem}"
            said.events.append(say.backed_off(self.backoff))
        return said

    def take_health(self, report: HealthReport, *, max_unhealthy: str) -> Said:
        """The health check's report: the devices it terminated are owed replacements."""
        said = Said(say.health(self.health, report, max_unhealthy=max_unhealthy))
        self.health = report.model_copy(update={"terminated": {}, "offline": []})
        self.replaced_total += len(report.terminated)
        # A device the pool's listing already showed gone while offline was credited then.
        credited = set(self.doomed_replaced)
        fresh = sorted(
            d
            for d in report.terminated
            if not self.fates.has(d, Fate.REPLACED) and d not in credited
        )
        self.fates.clear(report.terminated, Fate.REPLACED)
        self.doomed_replaced = [d for d in self.doomed_replaced if d not in report.terminated]
        # A doomed device stays doomed (as v0.1.0 did): the credit is remembered beside it.
        doomed = set(self.doomed)
        self.fates.set([d for d in fresh if d not in doomed], Fate.REPLACED)
        self.doomed_replaced += [d for d in fresh if d in doomed]
        self.replacements_owed += len(fresh)
        return said

    def take_terminations(
        self,
        device_ids: list[str],
        *,
        only_if_idle: Collection[str],
        failed: Mapping[str, object],
        skipped: Mapping[str, str],
        devices: list[am.DeviceInfo],
        reasons: Mapping[str, str] | None = None,
        first: Collection[str] = (),
        words: say.Words = say.REST,
    ) -> Said:
        """What came of terminating `device_ids`: one that must go and could not is doomed;
        a failed or kept scale-down leaves a member like any other. `reasons`: why devices
        leaving of the pool's own accord went (`Fate.LEFT_*`); `first`: those of them that
        went before their replacement."""
        booting = {d.id for d in devices if d.status == am.PROVISIONING}
        known = self.fates.of(Fate.SCALED_DOWN)
        scaled_down = (booting & set(only_if_idle)) - set(failed) - set(skipped) - set(known)
        self.fates.set(sorted(scaled_down), Fate.SCALED_DOWN)
        said = Said(
            say.terminations(
                surplus=[d for d in device_ids if d in only_if_idle and d not in failed],
                doomed=[d for d in device_ids if d not in only_if_idle and d not in failed],
                skipped=dict(skipped),
                reasons=reasons,
                first=first,
                words=words,
            )
        )
        for device_id, why in (reasons or {}).items():
            went = device_id in only_if_idle and device_id not in failed
            if went and device_id not in skipped and why in LEFT:
                self.fates.set([device_id], LEFT[why])
                if device_id in first and device_id not in self.rollout.left_first:
                    self.rollout.left_first.append(device_id)
        if failed:
            said.events.append(say.termination_failed(failed))
        if any(d not in failed and d not in skipped for d in device_ids):
            self.backoff.room_freed()
        for device_id in device_ids:
            if device_id in failed and device_id not in only_if_idle:
                self._doom([device_id])
            elif device_id not in failed and device_id not in skipped:
                self.fates.clear([device_id], Fate.DOOMED)
                if device_id in self.doomed_replaced:  # gone: its credit stands
                    self.doomed_replaced.remove(device_id)
                    self.fates.set([device_id], Fate.REPLACED)
        return said
