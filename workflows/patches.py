"""`workflow.patched` ids of the pool workflow: behaviour changes that recorded runs replay without.

Each id guards the one place where the new behaviour issues other commands
than the old one did. A run that started before a change replays (and, on
its first call, keeps) the old path; new runs record a marker and take the
new one. Once no run from before a change can exist any more, its id moves to
`workflow.deprecate_patch` and then goes.
"""

from __future__ import annotations

# A watch answer older than the applied listing is dropped.
ORDERED_OBSERVATIONS = "ordered-observations"
# The health check is told the desired size too.
HEALTH_KNOWS_REPLICAS = "health-knows-replicas"
# A quiet batch is asked after (running_workflows), never forgotten while it runs.
BATCH_LIVENESS = "batch-liveness"
# The finalizer retries any provider error instead of failing the pool.
FINALIZER_NEVER_GIVES_UP = "finalizer-never-gives-up"
# A new pool's first health start replaces a check left by a dead pool of its name.
REPLACE_STALE_HEALTH = "replace-stale-health"
# A scale-down first withdraws slots that hold no permit yet.
WITHDRAW_UNRENTED = "withdraw-unrented"
# A deletion that surfaced as a cancelled activity's failure runs the finalizer
# (before, the run ended CANCELED at once and left its devices billing).
DELETE_ON_ABSORBED_CANCEL = "delete-on-absorbed-cancel"
# A scale-down removes a device still booting before an idle one.
SCALE_DOWN_BOOTING_FIRST = "scale-down-booting-first"

# A failed device the pool removed before its batch read it counts as a failed
# boot (the batch reports it vanished); asked only when that happens.
REMOVED_FAILED_COUNTS = "removed-failed-counts"
# An offline device the pool's listing shows gone before the health check's
# report arrived is owed a replacement then (its create asks ahead of growth);
# asked only when that happens.
LOST_OFFLINE_IS_REPLACEMENT = "lost-offline-is-replacement"

# PoolHealth (`workflows/health.py`): one long `watch_health` activity on the
# watch queue instead of a pool_running + list + status reads + timer cycle
# every interval; it returns only when a suspect appears, changes or goes, at
# the earliest offline deadline, or when the pool is gone.
HEALTH_WATCH = "health-watch"
# The pool's listings (list_devices, watch_devices) come as compact rows
# (`activities.models.device_rows`): ~50 KB of history at 500 devices, not ~145 KB.
COMPACT_LISTINGS = "compact-listings"
# A batch whose pool has ended rents nothing more (it asks before each grant).
BATCH_ENDS_WITH_POOL = "batch-ends-with-pool"
# A device the batch sees offline while it boots (a region outage, a device the
# provider cannot reach) is handed to the health check, which pauses for an
# outage, instead of being removed as a failed boot at the startup timeout;
# asked only when that happens.
OFFLINE_AT_BOOT_TO_HEALTH = "offline-at-boot-to-health"
# A health report needs no fresh listing: its replacements are planned on the
# pool's last listing less the devices the report says were terminated (also
# dropped from a listing that was on its way), one `list_devices` less between
# the offline threshold and the create; asked when a report arrives.
HEALTH_REPORT_PLANS_AT_ONCE = "health-report-plans-at-once"

# AccountLedger (`workflows/ledger.py`): announcements hold dealing for at most
# 5 s per busy spell, not 5 s from each new one (a stream of them starved it).
LEDGER_HOLD_BOUNDED = "ledger-hold-bounded"
# Grants go out in the background: a round no longer waits for every grant's
# delivery before the next (a delivery the server never completed, seen on an
# overloaded dev server at 1,000 pools, stopped the account's creates for good).
LEDGER_SENDS_IN_BACKGROUND = "ledger-sends-in-background"
# A first window that starts with replacement requests only is dealt at once,
# not after the `margin` that lets growing pools share it (replacements go
# first anyway); asked only when that happens.
LEDGER_REPLACEMENTS_UNHELD = "ledger-replacements-unheld"
