"""What a pool shows: its status counts, conditions and phase. Pure functions of what a pass
knows (`PoolView`); the shell writes what changed. Its search attributes, its UI details and a
deleted pool's final status: `shown.py` (named here too).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from devicepool.activities.models import PoolSettings
from devicepool.api.v1beta1 import (
    ConditionStatus,
    ConditionType,
    DevicePoolSpec,
    DevicePoolStatus,
    Phase,
)
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.plan import Plan
from devicepool.workflows.pool.shown import deleted, details, teardown_blocked, wanted
from devicepool.workflows.reconciler.conditions import (
    ConditionUpdate,
    drop_condition,
    set_condition,
)
from devicepool.workflows.shared.protocol import AccountCap, AccountPause, HealthReport

__all__ = [
    "ConditionUpdate",
    "PoolView",
    "deleted",
    "details",
    "drop_condition",
    "published",
    "set_condition",
    "teardown_blocked",
    "wanted",
]

TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE


@dataclass(frozen=True)
class PoolView:
    """Everything one pass knows that the status shows."""

    spec: DevicePoolSpec
    generation: int
    plan: Plan
    # creates that have not landed (in flight or planned this pass)
    creating: bool
    device_ids: list[str]
    refs_problems: list[str] | None
    backoff: Backoff
    health: HealthReport | None
    now: datetime
    # `Reason: message` while the devices cannot be listed: the counts are the last listing's.
    observe_problem: str | None = None
    account_pause: AccountPause | None = None
    account_cap: AccountCap | None = None
    price_per_hour: float = 0.10
    paused_by_user: bool = False
    protected: tuple[str, ...] | list[str] = ()
    # With `spec.rollout`: members made from an older template, and from the current one.
    drifted: int | None = None
    updated: int = 0
    # The settings the pool goes by (the worker's, with what its spec sets): the status
    # shows their intervals. None: not shown (a caller without them).
    settings: PoolSettings | None = None


# ---------------------------------------------------------------- conditions


def refs_problem(problems: list[str]) -> tuple[str, str]:
    """The reason and message (of `Ready` and the Warning event) of references the worker
    does not know or cannot serve."""
    kinds = (
        ("platform", "UnsupportedPlatform"),  # checked first: its message names the account
        ("cloud phone's proxy", "ProxyIncomplete"),  # a known proxy pool the Local API refuses
        ("account", "UnknownAccount"),
        ("region", "UnknownRegion"),
    )
    reason = next((r for word, r in kinds if any(word in p for p in problems)), "UnknownProxyPool")
    return reason, "; ".join(problems) + " — provisioning stopped"


def ready_condition(view: PoolView) -> ConditionUpdate:
    if view.refs_problems:
        reason, message = refs_problem(view.refs_problems)
        return ConditionUpdate(ConditionType.READY, FALSE, reason, message)
    if view.observe_problem:
        return ConditionUpdate(
            ConditionType.READY,
            ConditionStatus.UNKNOWN,
            "NotObserved",
            "the pool's devices cannot be listed; the counts are from the last listing",
        )
    serving = _serving(view.plan)
    if serving >= view.spec.replicas:
        return ConditionUpdate(ConditionType.READY, TRUE, "Converged")
    account = view.account_cap
    if view.plan.capped or (account is not None and account.reached):
        held = (
            f"the spend cap allows {view.plan.members}"
            if view.plan.capped or account is None
            else f"account {account.account!r}'s spend cap holds the rest"
        )
        return ConditionUpdate(
            ConditionType.READY,
            FALSE,
            "SpendCapReached",
            f"{serving}/{view.spec.replicas} devices ready; {held} (see SpendCapReached)",
        )
    held = " (creates held: see QuotaExhausted)" if view.backoff.quota_holds(view.now) else ""
    return ConditionUpdate(
        ConditionType.READY,
        FALSE,
        "BelowDesired",
        f"{serving}/{view.spec.replicas} devices ready{held}",
    )


def progressing_condition(view: PoolView) -> ConditionUpdate:
    plan = view.plan
    # True while anything is being created or booting, not only while creates
    # are on their way: a first start's devices boot for a minute after them.
    provisioning, pending = plan.counts["provisioning"], _pending(view)
    if view.creating or provisioning or pending:
        message = f"{provisioning} device(s) provisioning"
        if pending:
            message += f", {pending} pending"
        return ConditionUpdate(ConditionType.PROGRESSING, TRUE, "Provisioning", message)
    if plan.terminate:
        return ConditionUpdate(ConditionType.PROGRESSING, TRUE, "ScalingDown")
    return ConditionUpdate(ConditionType.PROGRESSING, FALSE, "Stable")


def provider_condition(view: PoolView) -> ConditionUpdate:
    if view.observe_problem:
        reason, _, message = view.observe_problem.partition(": ")
        return ConditionUpdate(
            ConditionType.PROVIDER_AVAILABLE,
            FALSE,
            reason,
            f"cannot list the pool's devices: {message}",
        )
    backoff, pause = view.backoff, view.account_pause
    if not backoff.problem and pause is not None and pause.until > view.now:
        return ConditionUpdate(
            ConditionType.PROVIDER_AVAILABLE,
            FALSE,
            "ProviderRateLimited",
            f"the provider asked account {pause.account!r} to wait: creates resume at "
            f"{iso(pause.until)}" + (f" ({pause.reason})" if pause.reason else ""),
        )
    if not backoff.problem:
        return ConditionUpdate(ConditionType.PROVIDER_AVAILABLE, TRUE, "Available")
    reason, _, message = backoff.problem.partition(": ")
    if backoff.until:
        message += f"; next try at {iso(backoff.until)}"
    return ConditionUpdate(ConditionType.PROVIDER_AVAILABLE, FALSE, reason, message)


def remediation_condition(view: PoolView) -> ConditionUpdate:
    if view.paused_by_user:
        unhealthy = view.health.unhealthy if view.health is not None else 0
        return ConditionUpdate(
            ConditionType.REMEDIATION_PAUSED,
            TRUE,
            "PausedByUser",
            f"remediation paused by `devicepool pause`; {unhealthy} device(s) unhealthy, "
            "shown and not replaced until `devicepool resume`",
        )
    health = view.health
    if health is None or not health.paused:
        return ConditionUpdate(ConditionType.REMEDIATION_PAUSED, FALSE, "Healthy")
    return ConditionUpdate(
        ConditionType.REMEDIATION_PAUSED,
        TRUE,
        "TooManyUnhealthy",
        f"{health.unhealthy} of {health.devices} devices unhealthy, more than "
        f"maxUnhealthy ({view.spec.health.max_unhealthy} = {health.max_unhealthy}); "
        "replacements wait until the count drops",
    )


def scale_down_condition(view: PoolView) -> ConditionUpdate | None:
    blocked, held = view.plan.blocked_surplus, view.plan.budget_held
    if not blocked:
        return None
    if held:
        return ConditionUpdate(
            ConditionType.SCALE_DOWN_BLOCKED,
            TRUE,
            "DisruptionBudget",
            f"{blocked} device(s) above the desired size wait: {held} held by "
            "spec.disruption's budgets (they go when a budget allows), "
            f"{blocked - held} busy, leased or recently used",
        )
    return ConditionUpdate(
        ConditionType.SCALE_DOWN_BLOCKED,
        TRUE,
        "DevicesBusy",
        f"{blocked} device(s) above the desired size are busy, leased or recently used; "
        "they are removed once idle (a leased one once released)",
    )


# What a `QuotaExhausted` reason speaks of (the provider's quota names, `QuotaRefusal`).
_QUOTAS = {
    "DailyCreateQuota": "the account's daily create quota is used",
    "DailyOpenQuota": "the account's daily open quota (phone starts) is used",
    "ProfileCap": "the plan's profile cap is reached",
    "BalanceExhausted": "the account's balance is used up",
}


def quota_condition(view: PoolView, *, shown: bool) -> ConditionUpdate | None:
    """`QuotaExhausted` while a used-up quota holds creates, until a create lands after it;
    then False (`shown`: the status has the condition); None for a pool that never met one."""
    hold = view.backoff.quota
    if hold is None:
        if not shown:
            return None
        return ConditionUpdate(
            ConditionType.QUOTA_EXHAUSTED, FALSE, "QuotaAvailable", "creates succeed again"
        )
    what = _QUOTAS.get(hold.reason, f"the provider refused a create for a quota ({hold.reason})")
    until = iso(hold.until).replace("+00:00", "Z")
    holds = view.backoff.quota_holds(view.now)
    if not holds and not view.creating:
        # The hold ended and no create waits (scaled down meanwhile): nothing is held.
        return ConditionUpdate(
            ConditionType.QUOTA_EXHAUSTED,
            FALSE,
            "QuotaAvailable",
            f"the hold for {hold.reason} ended at {until}; no create waits for it",
        )
    if not holds:
        message = f"{what}; creates are tried again since {until}"
    elif hold.resets and hold.resets_at is not None:
        resets = iso(hold.resets_at).replace("+00:00", "Z")
        message = f"{what} until {resets}; creates resume at {until}"
    else:
        message = (
            f"{what} and no clock resets it: creates are tried again when a device of this "
            f"pool goes, or at {until}"
        )
    return ConditionUpdate(ConditionType.QUOTA_EXHAUSTED, TRUE, hold.reason, message)


def spend_cap_condition(view: PoolView) -> ConditionUpdate | None:
    """`SpendCapReached` while the cap holds creates back; None for a pool without a cap."""
    cap, account = view.spec.spend_cap, view.account_cap
    plan = view.plan
    if cap is not None and (plan.capped_beside or plan.capped_after) and not plan.capped:
        allowed = cap.devices_allowed(view.price_per_hour)
        if plan.capped_beside:
            what = (
                f"no room for the replacement of {plan.capped_beside} retiring device(s) "
                "beside it; each goes first once idle, one at a time, and its replacement "
                "once it is gone"
            )
        else:
            what = (
                f"the replacement of {plan.capped_after} leaving device(s) is created once "
                "the provider has terminated it (or another leaving device: one that went "
                "first, or one whose replacement serves)"
            )
        return ConditionUpdate(
            ConditionType.SPEND_CAP_REACHED,
            TRUE,
            "NoRoomBeside",
            f"spendCap ({cap.describe(view.price_per_hour)}) allows {allowed} device(s): " + what,
        )
    if cap is None or not view.plan.capped:
        if account is not None and account.reached:
            return ConditionUpdate(
                ConditionType.SPEND_CAP_REACHED, TRUE, "AccountCapReached", account.message
            )
        if cap is None and account is None:
            return None
        return ConditionUpdate(ConditionType.SPEND_CAP_REACHED, FALSE, "WithinCap")
    allowed = cap.devices_allowed(view.price_per_hour)
    return ConditionUpdate(
        ConditionType.SPEND_CAP_REACHED,
        TRUE,
        "CapReached",
        f"spendCap ({cap.describe(view.price_per_hour)}) allows {allowed} device(s); "
        f"{view.spec.replicas} desired, {view.plan.capped} create(s) held back — "
        "raise spendCap to grow (running devices are kept)",
    )


def rollout_condition(view: PoolView) -> ConditionUpdate | None:
    """`RollingOut` while devices of an older template are replaced; None without a rollout."""
    if view.drifted is None:
        return None
    if not view.drifted:
        return ConditionUpdate(ConditionType.ROLLING_OUT, FALSE, "Complete")
    return ConditionUpdate(
        ConditionType.ROLLING_OUT,
        TRUE,
        "Drifted",
        # Of the devices it has (a surge makes them more than desired): the figures add up.
        f"{view.drifted} of {view.drifted + view.updated} devices from an older template to "
        f"replace, {view.updated} on the current one ({view.spec.replicas} desired; idle ones "
        "first, within maxSurge and maxUnavailable)",
    )


def phase_of(view: PoolView) -> Phase:
    counts, replicas = view.plan.counts, view.spec.replicas
    serving = _serving(view.plan)
    paused = view.health is not None and view.health.paused
    if view.refs_problems or view.backoff.problem or view.observe_problem:
        return Phase.DEGRADED
    if counts["offline"] or counts["failed"] or paused:
        return Phase.DEGRADED
    if view.plan.capped and not view.creating and not counts["provisioning"]:
        return Phase.DEGRADED  # held below its size by its spend cap: not fine, not failing
    if view.backoff.quota_holds(view.now) and serving < replicas and not view.creating:
        return Phase.DEGRADED  # held below its size by a provider's quota
    if serving + counts["provisioning"] + counts["pending"] < replicas or view.creating:
        return Phase.PROVISIONING
    if view.plan.members > replicas:
        return Phase.SCALING_DOWN
    if serving >= replicas:
        return Phase.READY
    return Phase.PROVISIONING


def published(status: DevicePoolStatus, view: PoolView) -> DevicePoolStatus:
    """The status after a pass: conditions, phase and counts."""
    now, generation = view.now, view.generation
    for cond in (
        ready_condition(view),
        progressing_condition(view),
        provider_condition(view),
        remediation_condition(view),
    ):
        status = set_condition(status, cond, now=now, generation=generation)
    for type_, optional in (
        (ConditionType.SCALE_DOWN_BLOCKED, scale_down_condition(view)),
        (ConditionType.SPEND_CAP_REACHED, spend_cap_condition(view)),
        (ConditionType.ROLLING_OUT, rollout_condition(view)),
        (
            ConditionType.QUOTA_EXHAUSTED,
            quota_condition(
                view, shown=status.condition(ConditionType.QUOTA_EXHAUSTED) is not None
            ),
        ),
    ):
        if optional is None:
            status = drop_condition(status, type_)
        else:
            status = set_condition(status, optional, now=now, generation=generation)
    counts = view.plan.counts
    return status.model_copy(
        update={
            "phase": phase_of(view),
            "desired_replicas": view.spec.replicas,
            "ready_devices": counts["ready"],
            "busy_devices": counts["busy"],
            "provisioning_devices": counts["provisioning"],
            "offline_devices": counts["offline"],
            "pending_devices": _pending(view),
            # Reconciled means observed: not while the devices cannot be listed.
            "last_reconciled": status.last_reconciled if view.observe_problem else view.now,
            "observed_generation": view.generation,
            "device_ids": view.device_ids,
            "protected_devices": list(view.protected),
            "updated_devices": view.updated,
            **_intervals(view.settings),
        }
    )


def _intervals(settings: PoolSettings | None) -> dict[str, float]:
    """The intervals the pool goes by, where its spec sets none the worker's (`describe`)."""
    if settings is None:
        return {}
    return {
        "offline_after_seconds": settings.offline_after_seconds,
        "startup_timeout_seconds": settings.startup_timeout_seconds,
        "idle_grace_seconds": settings.idle_grace_seconds,
    }


def iso(when: datetime) -> str:
    """A moment as conditions and events say it (to the second)."""
    return when.isoformat(timespec="seconds")


def _serving(plan: Plan) -> int:
    return plan.counts["ready"] + plan.counts["busy"]


def _pending(view: PoolView) -> int:
    """Creates in flight whose devices are not seen yet, plus those this pass plans."""
    return view.plan.counts["pending"] + view.plan.create
