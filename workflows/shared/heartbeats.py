"""The heartbeat timeout of the long watches (a pool's `watch_devices`, its health check's
`watch_health`): what it buys, a crashed worker's watch noticed and run again elsewhere,
against what it costs, a billed Action on Temporal Cloud for each heartbeat the server gets
(one per 0.8 × the timeout). A quiet pool's watch waits long; one whose devices are in motion
is watched closely. The choice and its price: docs/scaling.md, 'Heartbeats'.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from temporalio import workflow

from devicepool.activities import models as am

__all__ = [
    "WATCH_HEARTBEAT_PATCH",
    "settled",
    "watch_heartbeat_timeout",
    "watch_heartbeat_timeout_of_run",
]

# Runs from before this build scheduled every watch with max(30 s, 3 × interval).
WATCH_HEARTBEAT_PATCH = "watch-heartbeat-by-cost"

# A quiet pool's crashed watch is run again elsewhere at most this late...
LONGEST = timedelta(minutes=10)
# ...or after this many polls, if sooner: a pool told to look often is watched closely.
POLLS = 20
# Never under three polls (the watch beats once a poll) nor 30 s (a busy event loop's stall):
# the timeout of a watch whose pool is in motion.
FLOOR_POLLS = 3
FLOOR = timedelta(seconds=30)

_SETTLED = frozenset({am.READY, am.BUSY})


def settled(devices: Iterable[am.DeviceInfo]) -> bool:
    """No device in motion (booting, offline, rebooting, leaving, failed): what the pool's
    watch waits for is nothing it expects soon."""
    return all(d.status in _SETTLED for d in devices)


def watch_heartbeat_timeout(poll_seconds: float, *, quiet: bool = True) -> timedelta:
    """Quiet: twenty polls, at most ten minutes; never under three polls or 30 s (in motion:
    only that floor)."""
    poll = timedelta(seconds=poll_seconds)
    floor = max(FLOOR, FLOOR_POLLS * poll)
    return max(floor, min(LONGEST, POLLS * poll)) if quiet else floor


def watch_heartbeat_timeout_of_run(poll_seconds: float, *, quiet: bool) -> timedelta:
    """The timeout this run schedules a watch with: the chosen one, or (a run from before
    the patch, replaying) the one its history has."""
    if workflow.patched(WATCH_HEARTBEAT_PATCH):
        return watch_heartbeat_timeout(poll_seconds, quiet=quiet)
    return timedelta(seconds=max(30.0, 3 * poll_seconds))
