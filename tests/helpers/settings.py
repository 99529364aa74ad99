"""Pool settings for tests: the intervals a pool runs at when a test must see it act quickly,
and the one proxy pool the stacks' workers are given."""

from __future__ import annotations

from pydantic import SecretStr

from devicepool.activities.models import PoolSettings, ProxyPoolSettings

# Resync every second, health checks every second, offline after 3 s, no idle grace,
# a failing teardown shown blocked after 3 s. (A resync every 0.3 s cost the workflow
# tests 54 of their 197 CPU-s, every watch listing three times a second, and no test
# needed it: each change a test makes reaches the pool through its watch.)
FAST = PoolSettings(
    resync_seconds=1.0,
    health_seconds=1,
    offline_after_seconds=3,
    startup_timeout_seconds=15,
    idle_grace_seconds=0,
    provision_batch_size=4,
    watch_max_seconds=20,
    health_liveness_seconds=2,
    teardown_blocked_after_seconds=3,
)
# The cloud-phone stacks' intervals: phones boot slower than emulated devices, so a
# resync every second, a 30-s startup timeout, a failing teardown blocked after 5 s.
PHONES = FAST.model_copy(
    update={
        "resync_seconds": 1.0,
        "health_seconds": 1.0,
        "startup_timeout_seconds": 30,
        "teardown_blocked_after_seconds": 5,
    }
)


def proxy_pools(password: str) -> dict[str, ProxyPoolSettings]:
    """The stacks' one proxy pool, `proxyseller-us` on a test gateway, with `password`
    (each test names its own, so a leak check knows whose it finds)."""
    return {
        "proxyseller-us": ProxyPoolSettings(
            name="proxyseller-us",
            host="gw.proxy.test",
            port=1080,
            password=SecretStr(password),
        )
    }
