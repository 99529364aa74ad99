"""The pool's decision, pure: what it sees and wants → the commands of one pass (`decide`),
and when to look again without news (`wake_after`). What one pass knows is one frozen
`Observed` (cluster-api's scope); `decision_for` builds `decide`'s arguments from it and
the carried state.

The commands are carried out in the order listed: withdrawals, terminations (what may
go only if still idle first, then what must go), and batches, replacements first in
batches of their own. The slot book given is not changed; the decision holds the new one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from devicepool.activities import models as am
from devicepool.api.names import LABEL_SLOT, provision_workflow_id
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.leasable import leased_busy
from devicepool.workflows.pool.lifecycle import Lifecycle, every_patch
from devicepool.workflows.pool.plan import Plan, plan_pool
from devicepool.workflows.pool.slots import SlotBook, observed_slots
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler.autoscaling import kept_from_scale_down

__all__ = ["BatchOrder", "Decision", "Observed", "decide", "decision_for", "wake_after"]


@dataclass(frozen=True)
class BatchOrder:
    """Start provisioning child `child_id` for `slots` under `generation`'s keys."""

    child_id: str
    generation: int
    slots: list[int]
    replacement: bool


@dataclass
class Decision:
    plan: Plan
    generation: int  # the spec's generation it was made for
    slots: SlotBook
    replacements_owed: int
    # batch id -> slots it is asked to drop (not landed; the pool needs fewer)
    withdraw: dict[str, list[int]] = field(default_factory=dict)
    # surplus first (terminated only if still idle: `only_if_idle`), then what must go
    terminate: list[str] = field(default_factory=list)
    only_if_idle: set[str] = field(default_factory=set)
    batches: list[BatchOrder] = field(default_factory=list)
    # Of `terminate`, those leaving of the pool's own accord: device id -> why
    # (`Expired`, `Replaced`, `Drifted`), said as that rather than as a scale-down.
    reasons: dict[str, str] = field(default_factory=dict)
    # Of those, the ones going before their replacement (the cap leaves no room beside).
    first: set[str] = field(default_factory=set)
    # Of `only_if_idle`, those retired (expired, replaced when idle, drifted, or past
    # `maxAge` when a scale-down takes them), not merely scaled down: never kept for a
    # later create (`TerminateDeviceInput.retiring`).
    retiring: set[str] = field(default_factory=set)


def decide(
    *,
    pool: str,
    replicas: int,
    generation: int,
    devices: list[am.DeviceInfo],
    doomed: Collection[str],
    slots: SlotBook,
    observed_slots: set[str],
    replacements_owed: int,
    settings: am.PoolSettings,
    now: datetime,
    allow_create: bool,
    act: bool,
    cap: int | None = None,
    retire: Collection[str] = (),
    protected: Collection[str] = (),
    rolling: Collection[str] = (),
    unavailable: int = 0,
    scale_down_limit: int | None = None,
    surge: int | None = None,
    reasons: Mapping[str, str] | None = None,
    left: Collection[str] = (),
    withdraw_all: bool = False,
) -> Decision:
    """What this pass does. `act` False (the listing failed): only the plan, for the status.
    `retire` (`reasons` says why) and `rolling` devices are replaced beside them, then
    terminated as below; `left`: devices that went before their replacement. `withdraw_all`
    (a quota holds creates): every create still waiting for a permit is withdrawn."""
    book = slots.model_copy(deep=True)
    members = [d for d in devices if d.id not in doomed]  # those on their way out are not
    # Doomed and terminating devices count toward nothing, but bill until they are gone.
    departing = sum(
        1
        for d in devices
        if d.status != am.TERMINATED and (d.id in doomed or d.status == am.TERMINATING)
    )
    gone_of_own_accord = sum(
        1 for d in devices if d.status == am.TERMINATING and d.id in left and d.id not in doomed
    )

    def planned() -> Plan:
        return plan_pool(
            replicas=replicas,
            devices=members,
            in_flight=book.pending(observed_slots),
            unseen=len(book.unseen),
            now=now,
            idle_grace=timedelta(seconds=settings.idle_grace_seconds),
            allow_create=allow_create,
            cap=cap,
            protected=protected,
            retiring=[*retire, *rolling],
            max_terminate=scale_down_limit,
            surge=surge,
            departing=departing,
            left=gone_of_own_accord,
        )

    plan = planned()
    decision = Decision(
        plan=plan, generation=generation, slots=book, replacements_owed=replacements_owed
    )
    if not act:
        return decision
    surplus = plan.members - replicas
    if withdraw_all:
        # A create sent now would spend a request on a refusal.
        surplus = max(surplus, sum(len(b.slots) for b in book.in_flight))
    if surplus > 0:
        # Shrink what is not yet rented before touching a serving device.
        decision.withdraw = book.withdraw(surplus, observed_slots)
        if decision.withdraw:
            decision.plan = plan = planned()
    must_go = sorted(set(doomed) | set(plan.remove_failed))
    why = dict(reasons or {})
    # Leaving of the pool's own accord: idle ones, oldest first, as many as can go
    # while `replicas - unavailable` serve without them (a busy one waits for idle).
    # A cap under `replicas` holds the pool there: what may be away is counted from it.
    ceiling = replicas if cap is None else min(replicas, cap)
    serving = sum(
        1 for d in members if d.status in (am.READY, am.BUSY) and d.id not in plan.terminate
    )
    spare = max(0, serving - (ceiling - unavailable))
    wanted = set(retire) | set(rolling)
    # No room beside them, and none coming: they go first, one at a time at least. Not on
    # the account's spendCap: going first on its word drained the pool a device a pass
    # while the replacements waited for permits.
    held = plan.capped_beside
    if held:
        ahead = max(0, serving - (ceiling - max(1, unavailable)))
        spare = max(spare, min(ahead, spare + held))
    idle = sorted(
        (
            d
            for d in members
            if d.id in wanted
            and d.id not in must_go
            and d.status == am.READY
            and not d.session_active
        ),
        key=lambda d: (d.id not in retire, d.created_at, d.id),
    )
    leaving = [d.id for d in idle[:spare]]
    for device_id in leaving:
        why.setdefault(device_id, "Replaced" if device_id in retire else "Drifted")
    decision.terminate = plan.terminate + leaving + must_go
    decision.only_if_idle = set(plan.terminate) | set(leaving)
    # And a scale-down's pick past `maxAge` (a budget held its retirement): said as a
    # scale-down, but kept for a later create it would come back as new, its age reset.
    aged = {d for d in plan.terminate if why.get(d) in ("Expired", "Replaced")}
    decision.retiring = set(leaving) | aged
    # Said by its reason: a device leaving of the pool's own accord, or forced out; not
    # a scale-down's or a failed device's, whatever its age.
    failed = {d.id for d in devices if d.status == am.FAILED}
    said = [*leaving, *(d for d in must_go if d not in failed)]
    decision.reasons = {d: why[d] for d in said if d in why}
    # Those that take the serving below `replicas` go before their replacement.
    decision.first = set(leaving[max(0, serving - replicas) :])
    count, owed = plan.create, replacements_owed
    while count > 0:
        n = min(settings.provision_batch_size, count, owed or count)
        batch_generation, taken = book.take(n, generation=generation, observed_slots=observed_slots)
        child_id = provision_workflow_id(pool, generation, book.next_batch_number())
        book.open_batch(child_id, batch_generation, taken, now)
        decision.batches.append(BatchOrder(child_id, batch_generation, taken, owed > 0))
        owed -= len(taken) if owed else 0
        count -= len(taken)
    decision.replacements_owed = owed
    return decision


def wake_after(
    *,
    now: datetime,
    plan: Plan,
    settings: am.PoolSettings,
    deadlines: Collection[datetime | None],
    resync: bool,
    next_batch_check: datetime | None,
) -> timedelta | None:
    """How long the pool waits without news: a timer only when a deadline exists (an idle,
    converged pool sets none). `resync`: something must be looked at again (a failed
    listing, devices that must go, a failed scale-down, unknown references)."""
    due: list[datetime] = [d for d in (plan.next_idle_at, *deadlines) if d]
    if resync:
        due.append(now + timedelta(seconds=settings.resync_seconds))
    if next_batch_check is not None:
        due.append(next_batch_check + timedelta(seconds=1))
    if not due:
        return None
    return max(timedelta(seconds=1), min(due) - now)


@dataclass(frozen=True)
class Observed:
    """One pass's view of the world: what it decides on."""

    # The devices the pool goes by (its last listing, less those reported gone).
    devices: Sequence[am.DeviceInfo]
    # Reported terminated by the health check and still listed: not members, but billing.
    reported_leaving: Sequence[am.DeviceInfo]
    settings: am.PoolSettings
    # What one device costs an hour (the account's `pricePerHour`).
    price: float
    now: datetime
    # The listing's error (None: it worked): never create or terminate on a guess.
    observe_problem: str | None = None
    # References the worker does not know (None: not checked yet), or not checked at
    # all (a node worker took no call): no create until they are known.
    refs_problems: Sequence[str] | None = None
    refs_unchecked: bool = False


def decision_for(
    seen: Observed,
    *,
    pool: str,
    spec: DevicePoolSpec,
    state: PoolState,
    incarnation: str,
    act: bool,
    patched: Callable[[str], bool] = every_patch,
) -> Decision:
    """This pass's decision (`act` False: only the plan, as the status shows it).

    `patched`: `workflow.patched` in the workflow, so a later change gated inside the
    lifecycle is asked there too; pure callers leave it out and take every change."""
    now = seen.now
    # A leased device is in use: taken by nothing that waits for idle devices.
    devices = leased_busy(seen.devices, state.leases.devices())
    life = Lifecycle(spec, state, devices, now, patched)
    return decide(
        pool=pool,
        replicas=spec.replicas,
        generation=state.generation,
        devices=[*devices, *seen.reported_leaving],
        doomed=state.doomed,
        slots=state.slots,
        observed_slots=observed_slots((d.labels for d in devices), LABEL_SLOT, incarnation),
        replacements_owed=state.replacements_owed,
        settings=seen.settings,
        now=now,
        allow_create=not seen.refs_problems
        and not seen.refs_unchecked
        and not state.backoff.creates_held(now),
        act=act and seen.observe_problem is None,
        cap=spec.spend_cap.devices_allowed(seen.price) if spec.spend_cap else None,
        retire=life.retire(),
        # An autoscaled pool's scale-down takes only devices unleased for `scaleDownAfter`.
        protected=life.protected()
        | kept_from_scale_down(
            spec.autoscale,
            members=(d.id for d in devices),
            leases=state.leases.devices(),
            idle_since=state.leases.idle_since,
            now=now,
        ),
        rolling=state.rollout.rolling,
        unavailable=life.limits()[1],
        scale_down_limit=life.scale_down_limit(),
        surge=life.surge(),
        reasons=life.reasons(),
        left=life.left(),
        withdraw_all=state.backoff.quota_holds(now),
    )
