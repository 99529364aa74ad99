"""The pure planning step: desired spec + observed devices + in-flight creates + now → plan.

The rules: docs/pools.md, 'Converging, scaling, teardown' (members, in-flight creates,
what goes first), 'Spend: what a pool costs, and a cap' (a cap stops creates, never
terminates) and 'One device by hand, and lifetime' (retiring, surge, no room beside).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from devicepool.activities import models as am

# Statuses that count as a member of the pool toward `replicas`.
COUNTED_STATUSES = frozenset({am.PROVISIONING, am.READY, am.BUSY, am.OFFLINE, am.REBOOTING})


@dataclass(frozen=True)
class Plan:
    create: int
    # Surplus to terminate: booting devices newest first, then idle ones oldest first.
    terminate: list[str]
    # Devices that will never serve (status `failed`): removed and replaced.
    remove_failed: list[str]
    counts: dict[str, int]
    # Members counted toward replicas (observed + in flight).
    members: int
    # Surplus that could not be removed because too few devices are idle.
    blocked_surplus: int
    # When the next not-yet-idle surplus device becomes idle (to re-plan then).
    next_idle_at: datetime | None = None
    # Creates the spend cap held back (the pool wants them; the cap says no).
    capped: int = 0
    # Of `blocked_surplus`, devices a disruption budget held (they could have gone).
    budget_held: int = 0
    # Replacements of retiring devices that still serve which the cap leaves no room for
    # beside them, with nothing departing that would make room (not in `capped`).
    capped_beside: int = 0
    # Replacements of `left` devices the cap holds until they are gone (not in `capped`).
    capped_after: int = 0


def plan_pool(
    *,
    replicas: int,
    devices: list[am.DeviceInfo],
    in_flight: int,
    now: datetime,
    idle_grace: timedelta,
    allow_create: bool = True,
    unseen: int = 0,
    cap: int | None = None,
    protected: Collection[str] = (),
    retiring: Collection[str] = (),
    max_terminate: int | None = None,
    surge: int | None = None,
    departing: int = 0,
    left: int = 0,
) -> Plan:
    """Decide what to create and what to terminate to bring the pool to `replicas`."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    if in_flight < 0:
        raise ValueError(f"in_flight must be >= 0, got {in_flight}")

    by_status = Counter(d.status for d in devices)
    counted = [d for d in devices if d.status in COUNTED_STATUSES]
    failed = sorted((d for d in devices if d.status == am.FAILED), key=_age_key)
    # A retiring device (to be replaced once idle) still serves and is counted as
    # what it is, but not as a member: its replacement is planned beside it.
    leaving = sum(1 for d in counted if d.id in retiring)
    members = len(counted) - leaving + in_flight + unseen

    create = max(0, replicas - members) if allow_create else 0
    # Growth and repairs: what the pool would create if the devices leaving of its own
    # accord (`retiring`, and the `left` ones still terminating) were members. The rest
    # replaces them: a rollout's or a retirement's own doing.
    repair = min(create, max(0, replicas - members - leaving - left))
    beside = create - repair
    # Every device not terminated yet bills, whether it counts toward replicas or not.
    billing = members + leaving + len(failed) + departing
    if surge is not None:
        # With a rollout, its replacements never make more than `replicas + surge` bill:
        # one of a device that left (terminating, still billing) waits as one beside it
        # does, and so do they while repairs or growth bill above.
        beside = min(beside, max(0, replicas + surge - billing - repair))
    create = repair + beside
    capped = capped_beside = capped_after = 0
    if cap is not None:
        room = max(0, cap - billing)
        held_beside = max(0, beside - max(0, room - repair))
        capped, create = max(0, create - room), min(create, room)
        if not departing and not failed:
            # Nothing billing will be gone soon to make room: replacements come first, one
            # after another, while one fits beside them or is there already; only when
            # none can is none coming first (docs/pools.md, 'One device by hand, and lifetime').
            if room - repair <= 0 and members + leaving <= replicas:
                capped_beside = min(held_beside, leaving)
            else:
                capped_after = min(held_beside, leaving)  # each once a device is gone
        else:
            capped_after = min(held_beside, left)  # each comes once its device is gone
        capped -= capped_beside + capped_after

    # Devices created but not listed yet count, but cannot be picked: a surplus
    # they make waits until a listing shows them (booting, they go first then),
    # rather than taking a serving device now.
    surplus = max(0, members - replicas - unseen)
    # A protected device (`devicepool protect`) is never picked for scale-down.
    pickable = [d for d in counted if d.id not in protected and d.id not in retiring]
    # Ready and without a session: idle once `idle_grace` has passed since its last use.
    free = [d for d in pickable if d.status == am.READY and not d.session_active]
    idle = sorted((d for d in free if now - d.idle_since >= idle_grace), key=_age_key)
    # Still coming up and serving nobody: removed before any idle device.
    booting = sorted(
        (d for d in pickable if d.status == am.PROVISIONING and not d.session_active),
        key=_age_key,
        reverse=True,
    )
    # A disruption budget may hold a scale-down to fewer devices a pass (None: no limit).
    removable = surplus if max_terminate is None else min(surplus, max_terminate)
    candidates = [*booting, *idle]
    terminate = [d.id for d in candidates[:removable]]
    budget_held = min(surplus, len(candidates)) - len(terminate)
    blocked = surplus - len(terminate)

    next_idle_at: datetime | None = None
    if blocked:
        # Ready devices without a session that are still inside the grace period
        # will become idle on their own: the pool should look again then. One idle
        # already (a budget held it) is no deadline: a past one would wake every second.
        waiting = [
            d.idle_since + idle_grace
            for d in free
            if d.id not in terminate and d.idle_since + idle_grace > now
        ]
        next_idle_at = min(waiting) if waiting else None

    counts = {
        "ready": by_status[am.READY],
        "busy": by_status[am.BUSY],
        "provisioning": by_status[am.PROVISIONING] + by_status[am.REBOOTING],
        "pending": in_flight + unseen,
        "offline": by_status[am.OFFLINE],
        "failed": by_status[am.FAILED],
    }
    return Plan(
        create=create,
        terminate=terminate,
        remove_failed=[d.id for d in failed],
        counts=counts,
        members=members,
        blocked_surplus=blocked,
        next_idle_at=next_idle_at,
        capped=capped,
        budget_held=budget_held,
        capped_beside=capped_beside,
        capped_after=capped_after,
    )


def _age_key(device: am.DeviceInfo) -> tuple[datetime, str]:
    return (device.created_at, device.id)


def offline_ids(devices: Sequence[am.DeviceInfo]) -> list[str]:
    """The devices a listing shows offline (what `lost_offline` compares the next one with)."""
    return sorted(d.id for d in devices if d.status == am.OFFLINE)


def lost_offline(offline_before: Collection[str], after: Sequence[am.DeviceInfo]) -> list[str]:
    """Devices offline in the previous listing (`offline_ids`) that `after` shows gone
    (terminating, terminated or absent): removed by someone else — the health check,
    whose report may come after the listing, or a person — so what replaces them is a
    replacement."""
    now = {d.id: d.status for d in after}
    gone = (am.TERMINATING, am.TERMINATED)
    return sorted(d for d in offline_before if now.get(d, am.TERMINATED) in gone)
