"""The Prometheus metrics that activities (and the worker's interceptors) record.

`Metrics` owns its collectors on one `CollectorRegistry` that a worker (or a test)
builds and passes down; nothing registers globally at import. Recorded by activities
(never replayed, so a counter counts real provider calls) and the replay-safe
interceptor in `worker/metrics.py`. What each means: docs/operations.md, "Metrics,
alerts and the dashboard".
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from devicepool.activities.models import DeviceStatus
from devicepool.api.errors import ErrorType
from devicepool.api.v1beta1 import Platform

__all__ = ["Metrics", "replacement_reason"]

PROVISIONING_BUCKETS = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)
RECONCILE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# A lease granted at once waited 0; a ticket waits at most `queue.maxWait` (5m by default).
LEASE_WAIT_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
# Devices whose create this process saw, waiting to be seen ready (bounded).
_MAX_TRACKED = 10_000

# Replacement reasons by the status the device had when it was removed; other
# statuses (ready, busy) mean a scale-down, which is not a replacement.
_REASON_BY_STATUS: dict[str, str] = {
    DeviceStatus.OFFLINE: "offline",
    DeviceStatus.REBOOTING: "offline",
    DeviceStatus.FAILED: "failed",
    DeviceStatus.PROVISIONING: "startup_timeout",
}
# Statuses that mean a device has booted: the first one seen ends its provisioning time.
_BOOTED = frozenset({DeviceStatus.READY, DeviceStatus.BUSY})


def replacement_reason(status: str | None) -> str | None:
    """The replacement reason for removing a device in `status`, or None (not a replacement)."""
    return _REASON_BY_STATUS.get(status or "")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.api_requests = Counter(
            "devicepool_api_requests",
            "Provider API calls made, by operation.",
            ["operation"],
            registry=r,
        )
        self.api_errors = Counter(
            "devicepool_api_errors",
            "Provider API calls that failed, by error type (api.errors.ErrorType).",
            ["type"],
            registry=r,
        )
        # Every series exists from the start, so rate() and alerts see 0, not nothing.
        for error_type in ErrorType:
            self.api_errors.labels(type=error_type.value)
        self.provisioning = Histogram(
            "devicepool_provisioning_seconds",
            "Time from a device's create to the first time it is seen ready.",
            buckets=PROVISIONING_BUCKETS,
            registry=r,
        )
        self.replacements = Counter(
            "devicepool_replacements",
            "Unhealthy devices removed so that the pool replaces them, by reason.",
            ["pool", "reason"],
            registry=r,
        )
        self.reconcile = Histogram(
            "devicepool_reconcile_duration_seconds",
            "Wall time of one DevicePool reconcile pass (observe, plan, act, publish); "
            "live executions only, never replays.",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.lease_wait = Histogram(
            "devicepool_lease_wait_seconds",
            "How long a granted lease waited in its pool's queue (0: granted at once), by "
            "pool; live executions only, never replays.",
            ["pool", "kind"],
            buckets=LEASE_WAIT_BUCKETS,
            registry=r,
        )
        self.orphans_terminated = Counter(
            "devicepool_orphans_terminated",
            "Devices the orphan sweep terminated: labelled managed-by=devicepool, "
            "their pool without a running workflow for longer than the grace period "
            "(or `devicepool orphans --delete`).",
            ["account", "platform"],
            registry=r,
        )
        self.parked_shut_down = Counter(
            "devicepool_parked_phones_shut_down",
            "Parked cloud phones (reserve or retired profiles) the orphan sweep found still "
            "powered past a grace after their removal's shutdown, and sent a shutdown again.",
            ["account"],
            registry=r,
        )
        self.foreign_marks = Counter(
            "devicepool_foreign_marks",
            "Sightings of a provider object named like devicepool's whose mark does not "
            "parse (a remark edited by hand, another tool's): skipped as foreign, never "
            "managed; counted at each listing that meets it.",
            ["family"],
            registry=r,
        )
        self._created: OrderedDict[str, tuple[datetime | None, float]] = OrderedDict()

    # ------------------------------------------------------------ provider calls

    def api_call(self, operation: str) -> None:
        self.api_requests.labels(operation=operation).inc()

    def api_error(self, error_type: ErrorType) -> None:
        self.api_errors.labels(type=error_type.value).inc()

    # ------------------------------------------------------------ provisioning latency

    def device_created(self, device_id: str, created_at: datetime | None) -> None:
        """A create answered; remember when, to time it when it turns ready."""
        if device_id in self._created:
            return  # an idempotent replay of the same create
        self._created[device_id] = (created_at, time.monotonic())
        while len(self._created) > _MAX_TRACKED:
            self._created.popitem(last=False)

    def device_seen(
        self,
        device_id: str,
        status: str,
        *,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
    ) -> None:
        """A status observation of a device; the first `ready`/`busy` after a create is timed."""
        if status not in _BOOTED:
            return
        entry = self._created.pop(device_id, None)
        if entry is None:
            return  # not created by this process, or already timed
        local_created_at, created_mono = entry
        created_at = created_at or local_created_at
        if created_at is not None and updated_at is not None and updated_at >= created_at:
            # The provider's own clock: exact, whatever our polling interval.
            seconds = (updated_at - created_at).total_seconds()
        else:
            seconds = time.monotonic() - created_mono
        self.provisioning.observe(seconds)

    def device_replaced(self, pool: str, reason: str) -> None:
        self.replacements.labels(pool=pool, reason=reason).inc()

    def orphan_accounts(self, accounts: Iterable[str]) -> None:
        """Start every (account, platform) orphan series at 0, so the first sweep is an increase."""
        for account in accounts:
            for platform in Platform:
                self.orphans_terminated.labels(account=account, platform=platform.value)
            self.parked_shut_down.labels(account=account)

    def orphan_terminated(self, account: str, platform: str) -> None:
        self.orphans_terminated.labels(account=account, platform=platform or "unknown").inc()

    def parked_phone_shut_down(self, account: str) -> None:
        self.parked_shut_down.labels(account=account).inc()

    def foreign_mark(self, family: str) -> None:
        self.foreign_marks.labels(family=family).inc()
