"""What the pool's events say: one pure function per kind of thing that happens to a pool.
Messages name devices and counts, never secrets, and read as kubectl's do.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from devicepool.activities.models import PoolSettings
from devicepool.api.durations import format_duration
from devicepool.api.v1beta1 import Condition, ConditionStatus, LifetimeSpec
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.reconciler.events import Happened
from devicepool.workflows.shared.protocol import BatchReport, HealthReport

__all__ = [
    "PHONES",
    "REST",
    "Happened",
    "Words",
    "applied",
    "backed_off",
    "batch_done",
    "batch_started",
    "batches_settled",
    "batches_started",
    "created",
    "expired_forced",
    "health",
    "ids",
    "quota",
    "region_up",
    "termination_failed",
    "terminations",
    "words_of",
]

# Device ids named in one message, before "and N more".
NAMED = 5
# What the scale-down's re-check says of a device already being removed.
_LEAVING = frozenset({"status terminating", "status terminated"})


@dataclass(frozen=True)
class Words:
    """How the events name what the pool's provider does to a device."""

    devices: str = "device(s)"
    device: str = "device"
    removed: str = "terminated"  # a removal, done
    scaled_down: str = "ScaledDown"  # a scale-down's reason
    kept: str = ""  # what becomes of a device a scale-down removed, if it is kept
    creating: str = "creating"
    created: str = "created"
    created_reason: str = "Created"


REST = Words()
# BitBrowser Local API cloud phones: a removal shuts the phone down and keeps its profile (in
# the pool's reserve, or retired: the API has no delete); a create powers one on (a reserve
# profile first). Said as the provider's client says it.
PHONES = Words(
    devices="phone(s)",
    device="phone",
    removed="shut down",
    scaled_down="ShutDown",
    kept=" (kept powered off, as spec.reserve says)",
    creating="powering on",
    created="powered on",
    created_reason="PoweredOn",
)


def words_of(settings: PoolSettings, account: str) -> Words:
    """The words of `account`'s provider (`PoolSettings.phone_accounts`: cloud phones)."""
    return PHONES if account in settings.phone_accounts else REST


def ids(device_ids: Iterable[str]) -> str:
    """`a, b, c` — or the first few and how many more."""
    listed = sorted(device_ids)
    shown = ", ".join(listed[:NAMED])
    return shown + (f" and {len(listed) - NAMED} more" if len(listed) > NAMED else "")


def created(replicas: int) -> Happened:
    return Happened("Created", f"pool created with {replicas} replica(s)")


def applied(*, old_replicas: int, new_replicas: int, generation: int) -> Happened:
    """A spec change was accepted (apply, scale): `Scaled` when the size changed."""
    if old_replicas != new_replicas:
        return Happened(
            "Scaled", f"replicas {old_replicas} -> {new_replicas} (generation {generation})"
        )
    return Happened("Configured", f"spec changed (generation {generation})")


def backed_off(backoff: Backoff) -> Happened:
    """Creates paused in the region (the problem, and for how long)."""
    reason, _, message = (backoff.problem or "BackOff").partition(": ")
    return Happened(
        "BackOff", f"creates paused {backoff.seconds:g}s: {reason}: {message}", warning=True
    )


def quota(before: Condition | None, after: Condition | None) -> list[Happened]:
    """`QuotaExhausted` turned True (or to another quota), or back to False."""
    was = before is not None and before.status == ConditionStatus.TRUE
    if after is None:
        return []
    if after.status == ConditionStatus.TRUE and not (
        was and before and before.reason == after.reason
    ):
        return [Happened("QuotaExhausted", f"{after.reason}: {after.message}", warning=True)]
    if after.status == ConditionStatus.FALSE and was:
        return [Happened("QuotaAvailable", after.message)]
    return []


def region_up(region: str, status: str) -> Happened:
    return Happened("CreatesResumed", f"the provider reports {region} {status}; creating again")


def batch_started(
    count: int, *, replacement: bool, words: Words = REST, batches: int = 1
) -> Happened:
    what = f"replacement {words.devices}" if replacement else words.devices
    said = f"{words.creating} {count} {what}"
    return Happened("Creating", said + (f" in {batches} batches" if batches > 1 else ""))


def batches_started(orders: Iterable[tuple[int, bool]], *, words: Words = REST) -> list[Happened]:
    """The batches one pass starts, as (size, replacement): one event for the replacements,
    one for the rest, however many batches each takes."""
    out = []
    for replacement in (True, False):
        sizes = [n for n, r in orders if r is replacement]
        if sizes:
            out.append(
                batch_started(sum(sizes), replacement=replacement, words=words, batches=len(sizes))
            )
    return out


def batches_settled(
    book: SlotBook, reports: Iterable[BatchReport], *, words: Words = REST, held: bool = False
) -> list[Happened]:
    """`batch_created` reports about to be applied to `book` (read before `settle_created`):
    a batch reports everything so far each time, so only slots the book waits on are news.
    `held`: a quota holds the pool's creates (what was withdrawn, it withdrew)."""
    out: list[Happened] = []
    for report in reports:
        batch = book.batch(report.workflow_id)
        if batch is None:
            continue
        waiting = set(batch.slots)
        created = [report.created[s] for s in sorted(waiting & set(report.created))]
        failed = {s: why for s, why in report.failed_slots.items() if s in waiting}
        withdrawn = sorted(waiting & set(report.withdrawn))
        if created:
            said = f"{words.created} {len(created)} {words.devices}: {ids(created)}"
            out.append(Happened(words.created_reason, said))
        if failed:
            first = next(iter(failed.values()))
            unanswered = len(set(failed) & set(report.unanswered_slots))
            note = f" ({unanswered} never answered)" if unanswered else ""
            out.append(
                Happened(
                    "CreateFailed",
                    f"{len(failed)} create(s) failed{note}, retried: {first}",
                    warning=True,
                )
            )
        if withdrawn:
            out.append(
                Happened(
                    "Withdrawn",
                    f"{len(withdrawn)} create(s) not yet rented dropped "
                    + (
                        "(a quota holds them: see QuotaExhausted)"
                        if held
                        else "(fewer replicas wanted)"
                    ),
                )
            )
    return out


def batch_done(
    report: BatchReport, *, ours: Collection[str] = (), words: Words = REST
) -> list[Happened]:
    """A batch ended: how its devices came up. `ours`: booting devices a scale-down
    terminated (their vanishing is no news: `ScaledDown` said it)."""
    vanished = {d: why for d, why in report.vanished_devices.items() if d not in ours}
    if report.cancelled:
        return []
    out: list[Happened] = []
    if report.ready:
        out.append(Happened("Ready", f"{len(report.ready)} {words.devices} ready"))
    if report.failed_devices:
        what = f"{words.devices} never became ready, removed"
        out.append(_counted("BootFailed", what, report.failed_devices, warning=True))
    if report.offline_devices:
        what = f"{words.devices} went offline before they booted, left to the health check"
        out.append(
            _counted("OfflineWhileBooting", what, report.offline_devices, why=False, warning=True)
        )
    if vanished:
        gone = f"{words.devices} gone before they booted, replaced"
        out.append(_counted("Vanished", gone, vanished))
    return out


def health(old: HealthReport | None, new: HealthReport, *, max_unhealthy: str) -> list[Happened]:
    """A health report: devices replaced, remediation paused or resumed."""
    out: list[Happened] = []
    if new.terminated:
        # `replaced dev-1 (offline for 185s (threshold 180s))`: triage writes "Kind: detail",
        # and the detail reads on its own.
        replaced = ids(f"{d} ({why.split(': ', 1)[-1]})" for d, why in new.terminated.items())
        out.append(Happened("Replaced", f"replaced {replaced}"))
    was_paused = old is not None and old.paused
    if new.paused and not was_paused:
        out.append(
            Happened(
                "RemediationPaused",
                f"{new.unhealthy} of {new.devices} devices unhealthy, more than maxUnhealthy "
                f"({max_unhealthy} = {new.max_unhealthy}); replacements wait",
                warning=True,
            )
        )
    elif was_paused and not new.paused:
        out.append(
            Happened("RemediationResumed", f"{new.unhealthy} of {new.devices} devices unhealthy")
        )
    return out


def terminations(
    *,
    surplus: Iterable[str],
    doomed: Iterable[str],
    skipped: Mapping[str, str],
    reasons: Mapping[str, str] | None = None,
    first: Collection[str] = (),
    words: Words = REST,
) -> list[Happened]:
    """What one round of terminations removed (and kept): a device with a reason is said
    under it, not as a scale-down; one the re-check found on its way out is no news.
    `words`: the provider's (cloud phones are shut down, not terminated)."""
    out: list[Happened] = []
    reasons = reasons or {}
    leaving = {d for d, why in skipped.items() if why in _LEAVING}
    skipped = {d: why for d, why in skipped.items() if d not in leaving}
    went = set(surplus) - set(skipped) - leaving
    for reason in sorted({reasons[d] for d in went if d in reasons}):
        for ahead, order in ((False, "replacement first"), (True, "before its replacement")):
            these = sorted(d for d in went if reasons.get(d) == reason and (d in first) == ahead)
            if these:
                left = _LEFT.get(reason, "{removed}").format(removed=words.removed, of=words)
                said = f"{left}, {order}: {ids(these)}"
                out.append(Happened(reason, said))
    # Forced out (past `maxAge + gracePeriod`): its Warning was said when it was doomed.
    forced = sorted(d for d in set(doomed) if d in reasons)
    for reason in sorted({reasons[d] for d in forced}):
        these = [d for d in forced if reasons[d] == reason]
        out.append(Happened(reason, f"{words.removed} {ids(these)}, busy or not"))
    gone = sorted(set(surplus) - set(skipped) - leaving - set(reasons))
    if gone:
        said = f"{words.removed} {len(gone)} {words.devices}: {ids(gone)}{words.kept}"
        out.append(Happened(words.scaled_down, said))
    removed = sorted(set(doomed) - set(reasons))
    if removed:
        out.append(
            Happened(
                "Removed",
                f"{words.removed} {len(removed)} failed {words.devices}: {ids(removed)}",
            )
        )
    if skipped:
        out.append(_counted("Kept", "device(s) busy since the plan", skipped))
    return out


# How a device leaving of the pool's own accord is said (`terminations`).
_LEFT = {
    "Expired": "{removed} past lifetime.maxAge",
    "Replaced": "{removed} as asked",
    "Drifted": "{removed} an older template's {of.device}",
}


def termination_failed(failed: Mapping[str, object]) -> Happened:
    """Terminations the provider did not take: tried again (a surplus one re-checked first)."""
    return _counted("TerminateFailed", "termination(s) failed, tried again", failed, warning=True)


def _counted(
    reason: str,
    what: str,
    devices: Mapping[str, object],
    *,
    why: bool = True,
    warning: bool = False,
) -> Happened:
    """`N <what>: a, b, c (the first one's reason)`."""
    said = f"{len(devices)} {what}: {ids(devices)}"
    if why:
        said += f" ({next(iter(devices.values()))})"
    return Happened(reason, said, warning=warning)


def profiles_retired(count: int) -> Happened:
    """A deletion on a provider with no delete: what it kept, and why."""
    noun = "profile" if count == 1 else "profiles"
    return Happened(
        "ProfilesRetired",
        f"{count} cloud-phone {noun} kept, powered off and marked retired: the BitBrowser"
        " Local API has no delete (delete them in the client to be rid of them)",
    )


def expired_forced(devices: Collection[str], lifetime: LifetimeSpec | None) -> Happened:
    """Devices past `maxAge + gracePeriod`: replaced even if busy (said as a Warning)."""
    past = ""
    if lifetime is not None:
        grace = lifetime.grace_period or 0
        past = f" (past maxAge {format_duration(lifetime.max_age)} + gracePeriod {format_duration(grace)})"
    return Happened("Expired", f"replacing {ids(devices)} even if busy{past}", warning=True)
