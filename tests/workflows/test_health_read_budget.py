"""The provider's read budget of one idle pool, whichever workers run its two watches.

The pool's `watch_devices` lists every `resyncSeconds`; its health check's
`watch_health` reuses that listing on the same worker while it is about as fresh
as a poll (`triage.reuse_listing_seconds`) and otherwise reads for itself, at
most once per `triage.own_read_seconds`. At the default intervals
that keeps an idle pool within 150 provider reads an hour (README, Scaling), and
the spacing never exceeds the offline threshold: a device going offline is
still seen by its deadline (its clock starts at the provider's `updatedAt`).
"""

from __future__ import annotations

import pytest

from devicepool.activities.models import PoolSettings
from devicepool.workflows.health.triage import own_read_seconds, reuse_listing_seconds

READ_BUDGET_PER_POOL_HOUR = 150


def reads_per_pool_hour(settings: PoolSettings) -> float:
    """The pool's own watch, plus the health check's reads when they run on different workers."""
    spacing = own_read_seconds(
        health_seconds=settings.health_seconds,
        offline_after_seconds=settings.offline_after_seconds,
    )
    return 3600 / settings.resync_seconds + 3600 / spacing


def test_an_idle_pool_stays_within_the_read_budget_at_the_defaults() -> None:
    # Before: one health read per 60-s poll on another worker, 120 + 60 = 180.
    assert reads_per_pool_hour(PoolSettings()) <= READ_BUDGET_PER_POOL_HOUR


@pytest.mark.parametrize(
    ("health", "offline_after", "expected"),
    [
        (60, 180, 180),  # the defaults: three polls apart, the threshold itself
        (60, 120, 120),  # a shorter threshold caps it (bench/scale.py's 120 s)
        (60, 30, 60),  # never closer than one poll
        (5, 120, 15),  # fast test settings
    ],
)
def test_the_spacing_is_a_few_polls_never_past_the_offline_threshold(
    health: float, offline_after: float, expected: float
) -> None:
    assert own_read_seconds(health_seconds=health, offline_after_seconds=offline_after) == expected


@pytest.mark.parametrize(
    ("resync", "health", "expected"),
    [
        (30, 60, 45),  # the defaults: every listing of the pool's watch, as before
        (0.3, 1, 0.45),  # FAST: likewise
        (30, 2, 3),  # issue 23: resync 30, health 2 reused listings up to 45 s old
        (15, 1, 1.5),
    ],
)
def test_a_listing_of_the_pools_watch_is_reused_while_about_as_fresh_as_a_poll(
    resync: float, health: float, expected: float
) -> None:
    # Older, it let the resync interval, not healthSeconds, decide how late an
    # offline device is seen (tests/workflows/test_health_sighting.py).
    reuse = reuse_listing_seconds(resync_seconds=resync, health_seconds=health)
    assert reuse == pytest.approx(expected)
