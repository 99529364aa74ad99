"""The failure back-off: when a region keeps failing, stop creating there for a while.

Only a device the provider reports `failed`, one not ready at the startup timeout, or
a `region_unavailable` answer counts; creates never answered and devices that vanished
while booting say nothing about the region. Pure. The rule: docs/pools.md, 'Health:
replace, do not repair'.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from devicepool.activities.models import PoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.errors import ErrorType
from devicepool.workflows.shared.protocol import BatchReport

__all__ = ["Backoff"]


class Backoff(CamelModel):
    failure_streak: int = 0
    seconds: float = 0.0
    until: datetime | None = None
    # "Reason: message" shown as ProviderAvailable=False while set
    problem: str | None = None

    def active(self, now: datetime) -> bool:
        return self.until is not None and now < self.until

    def probe_due(self, now: datetime) -> bool:
        """A pause just ended: ask the provider about the region before creating."""
        return self.until is not None and not self.active(now)

    def record(
        self, report: BatchReport, *, region: str, settings: PoolSettings, now: datetime
    ) -> str | None:
        """Count a batch's outcome; the problem if it started a pause."""
        region_down = [
            r
            for r in report.failed_slots.values()
            if r.startswith(ErrorType.REGION_UNAVAILABLE.value)
        ]
        refused = len(report.failed_slots) - len(report.unanswered_slots)
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
