"""Pool settings for tests: the intervals a pool runs at when a test must see it act quickly."""

from __future__ import annotations

from devicepool.activities.models import PoolSettings

# Resync every 0.3 s, health checks every second, offline after 3 s, no idle grace,
# a failing teardown shown blocked after 3 s.
FAST = PoolSettings(
    resync_seconds=0.3,
    health_seconds=1,
    offline_after_seconds=3,
    startup_timeout_seconds=15,
    idle_grace_seconds=0,
    provision_batch_size=4,
    watch_max_seconds=20,
    health_liveness_seconds=2,
    teardown_blocked_after_seconds=3,
)
