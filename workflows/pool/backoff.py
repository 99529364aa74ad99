"""The failure back-off: when a region keeps failing, stop creating there for a while;
and the quota hold: when the provider refuses a create for a used-up quota, stop creating
until it resets.

Only a device the provider reports `failed`, one not ready at the startup timeout, or
a `region_unavailable` answer counts; creates never answered, devices that vanished
while booting and quota refusals say nothing about the region. Pure. The rules:
docs/pools.md, 'Health: replace, do not repair'.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field

from devicepool.activities.models import PoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.errors import ErrorType
from devicepool.workflows.shared.protocol import BatchReport, QuotaRefusal

__all__ = ["QUOTA_REPROBE", "Backoff", "QuotaHold"]

# A quota no clock resets (a profile cap, the balance) is tried again after this, or as
# soon as one of the pool's own devices goes (a cap; not money: `MONEY`).
QUOTA_REPROBE = timedelta(hours=1)
# Quotas of money, not of things: a device of the pool going frees none.
MONEY = frozenset({"BalanceExhausted"})
# A reset the provider names is waited for this much longer (its clock and the pool's may
# be apart), held at most `QUOTA_HOLD_MAX`, and at least the back-off's first pause (a reset
# already past: clocks further apart, or garbled): never a 1-second loop.
QUOTA_RESET_MARGIN = timedelta(seconds=5)
QUOTA_HOLD_MAX = timedelta(days=2)
# A refusal naming a later reset this soon after the reset the pool waited for: the
# provider's day may not have turned yet (its clock behind ours), so the pool looks again
# after the back-off's first pause rather than a day later.
QUOTA_SKEW = timedelta(minutes=10)
# The batches whose quota refusal the pool took, remembered (a batch says it twice).
QUOTA_BATCHES_KEPT = 32


class QuotaHold(CamelModel):
    """Creates held for a used-up quota: which (`reason`), the provider's refusal, since
    when, and until when (`resets`: the provider's reset; else the re-probe)."""

    reason: str
    message: str
    since: datetime
    until: datetime
    resets: bool
    # The provider's reset, as it said it (`until` waits `QUOTA_RESET_MARGIN` past it).
    resets_at: datetime | None = None
    # The reset it named was past already (`Backoff.hold`: a pause, doubled if it recurs).
    stale: bool = False


class Backoff(CamelModel):
    failure_streak: int = 0
    seconds: float = 0.0
    until: datetime | None = None
    # "Reason: message" shown as ProviderAvailable=False while set
    problem: str | None = None
    # Creates held for a used-up quota (`QuotaExhausted`); kept after it ends until a
    # create lands, so the condition says when creates were tried again.
    quota: QuotaHold | None = None
    # The batches whose quota refusal was taken (`hold`), the newest `QUOTA_BATCHES_KEPT`.
    quota_batches: list[str] = Field(default_factory=list)

    def active(self, now: datetime) -> bool:
        return self.until is not None and now < self.until

    def quota_holds(self, now: datetime) -> bool:
        return self.quota is not None and now < self.quota.until

    def creates_held(self, now: datetime) -> bool:
        """No create now: the region's back-off or a quota holds them."""
        return self.active(now) or self.quota_holds(now)

    def next_at(self, now: datetime) -> datetime | None:
        """When the pool must look again without news: the back-off's end, or the quota's
        reset while it holds (a hold that ended sets no timer)."""
        due = [self.until] if self.until is not None else []
        if self.quota is not None and self.quota_holds(now):
            due.append(self.quota.until)
        return min(due, default=None)

    def hold(
        self, refusal: QuotaRefusal, *, settings: PoolSettings, now: datetime, batch: str = ""
    ) -> None:
        """A create was refused for a used-up quota: hold creates until it resets (bounded),
        or, with no reset, for `QUOTA_REPROBE` at most. A batch says so twice (when it
        reports its creates and when it ends, maybe much later): its second word is no news.
        A reset already past (the provider's clock behind ours, or a stale one) holds the
        back-off's first pause, doubled each time it comes again, up to its longest."""
        if batch and batch in self.quota_batches:
            return  # this batch's refusal was taken already
        if batch:
            self.quota_batches = [*self.quota_batches, batch][-QUOTA_BATCHES_KEPT:]
        resets = refusal.resets_at
        least = timedelta(seconds=settings.backoff_initial_seconds)
        previous = self.quota
        waited = previous.resets_at if previous is not None else None
        if resets is None:
            until = now + QUOTA_REPROBE
        elif waited is not None and waited < now <= waited + QUOTA_SKEW < resets:
            until, resets = now + least, waited  # still the reset it waited for, a little late
        elif resets + QUOTA_RESET_MARGIN <= now:
            # Past already: no clock to wait for. Again and again: wait longer each time.
            longest = timedelta(seconds=settings.backoff_max_seconds)
            span = least
            if previous is not None and previous.stale:
                span = min(2 * (previous.until - previous.since), longest)
            self.quota = QuotaHold(
                reason=refusal.reason,
                message=refusal.message,
                since=now,
                until=now + max(span, least),
                resets=True,
                resets_at=resets,
                stale=True,
            )
            return
        else:
            until = min(max(resets + QUOTA_RESET_MARGIN, now + least), now + QUOTA_HOLD_MAX)
        self.quota = QuotaHold(
            reason=refusal.reason,
            message=refusal.message,
            since=now,
            until=until,
            resets=resets is not None,
            resets_at=resets,
        )

    def room_freed(self) -> None:
        """A device of the pool went: a quota no clock resets (a cap) may have room now; a
        used-up balance has none (it waits for its re-probe)."""
        if self.quota is not None and not self.quota.resets and self.quota.reason not in MONEY:
            self.quota = self.quota.model_copy(update={"until": self.quota.since})

    def quota_passed(self, now: datetime) -> bool:
        """A create landed: a hold that ended is over (said by the condition going False)."""
        if self.quota is None or self.quota_holds(now):
            return False
        self.quota = None
        return True

    def probe_due(self, now: datetime) -> bool:
        """A pause just ended: ask the provider about the region before creating."""
        return self.until is not None and not self.active(now)

    def record(
        self,
        report: BatchReport,
        *,
        region: str,
        settings: PoolSettings,
        now: datetime,
        hold_quota: bool = False,
    ) -> str | None:
        """Count a batch's outcome; the problem if it started a pause. `hold_quota`: its
        quota refusals hold creates instead of counting as failures (runs from v0.2.0
        count them)."""
        quota = report.quota if hold_quota else None
        if quota is not None:
            self.hold(quota, settings=settings, now=now, batch=report.workflow_id)
        elif hold_quota and report.created:
            self.quota_passed(now)
        region_down = [
            r
            for r in report.failed_slots.values()
            if r.startswith(ErrorType.REGION_UNAVAILABLE.value)
        ]
        refused = len(report.failed_slots) - len(report.unanswered_slots)
        if quota is not None:
            refused -= len(set(quota.slots) - set(report.unanswered_slots))
        if report.ready:
            # Devices come up again: the region works.
            self.failure_streak, self.seconds, self.until, self.problem = 0, 0.0, None, None
        self.failure_streak += refused + len(report.failed_devices)
        if region_down:
            return self.pause(f"RegionUnavailable: {region_down[0]}", settings=settings, now=now)
        if self.failure_streak >= settings.failure_streak_limit:
            return self.pause(
                f"ReplacementsFailing: {self.failure_streak} device(s) in a row never became "
                f"ready in {region}",
                settings=settings,
                now=now,
            )
        return None

    def pause(self, problem: str, *, settings: PoolSettings, now: datetime) -> str:
        self.seconds = min(
            settings.backoff_max_seconds, max(settings.backoff_initial_seconds, 2 * self.seconds)
        )
        self.until = now + timedelta(seconds=self.seconds)
        self.problem = problem
        return problem

    def probed(
        self, answer: str, *, failed: bool, region: str, settings: PoolSettings, now: datetime
    ) -> bool:
        """What the region probe found (`answer`: the region's status, or the error if
        `failed`); whether creates stay paused."""
        if failed:
            self.pause(f"RegionProbeFailed: {answer}", settings=settings, now=now)
        elif answer == "down":
            self.pause(
                f"RegionDown: the provider reports {region} down", settings=settings, now=now
            )
        else:
            self.region_up(settings)
        return self.until is not None

    def region_up(self, settings: PoolSettings) -> None:
        """The probe found the region up (or degraded): try again, one failure from a longer pause."""
        self.until = None
        self.failure_streak = max(0, settings.failure_streak_limit - 1)
