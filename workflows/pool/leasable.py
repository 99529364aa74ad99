"""What a DevicePool tells its lease book (`reconciler/leasing.py`): which devices may be
leased now, which a selector can never match, and what a lease's end does to a device.

Pure. A device's selector labels are its provider labels and `region`, `platform`, `device`
(its id): `devicepool lease POOL --selector device=ID` asks for one device. Under
`onRelease: reset` a used device waits in `PoolState.resets` until its reset is asked
(`reset_used`, `resets_due`, `take_resets`): docs/leases.md, "onRelease: reset"."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from devicepool.activities import models as am
from devicepool.api.names import (
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_SLOT,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
)
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.events import Happened, ids
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.state import PendingReset, PoolState
from devicepool.workflows.reconciler.lease_records import NOT_USED, Candidate, Ended, EndReason

__all__ = [
    "RESET_ATTEMPTS",
    "RESET_IS_REPLACE",
    "candidates",
    "grows_for",
    "labels_of",
    "leased_busy",
    "members",
    "problem",
    "replace_used",
    "replaced_while_leased",
    "reset_used",
    "resets_due",
    "take_resets",
    "used",
]

# Keys every device of a pool carries, whatever the provider adds.
_OWN_KEYS = {
    "region",
    "platform",
    "device",
    LABEL_POOL,
    LABEL_MANAGED_BY,
    LABEL_SLOT,
    LABEL_TEMPLATE_HASH,
}
# Resets of one device that may fail in a row before it is replaced instead.
RESET_ATTEMPTS = 3
# The event that says a pool's `onRelease: reset` replaces (its provider has no reset).
RESET_IS_REPLACE = "ResetIsReplace"


def labels_of(device: am.DeviceInfo, spec: DevicePoolSpec) -> dict[str, str]:
    return {
        **device.labels,
        "region": device.region or spec.region,
        "platform": spec.platform.value,
        "device": device.id,
    }


def candidates(
    devices: Sequence[am.DeviceInfo],
    *,
    spec: DevicePoolSpec,
    state: PoolState,
    leaving: Collection[str],
    drifted: Collection[str],
) -> list[Candidate]:
    """Ready devices with no session that stay (not doomed, retiring, rolling or expired:
    `leaving`) and wait for no reset; from the current template first, then the oldest
    (they have served)."""
    gone = {*state.doomed, *state.control.retiring, *state.rollout.rolling, *leaving}
    gone.update(r.device for r in state.resets)  # used, not yet reset
    ready = [
        d for d in devices if d.status == am.READY and not d.session_active and d.id not in gone
    ]
    ready.sort(key=lambda d: (d.id in drifted, d.created_at, d.id))
    return [Candidate(d.id, labels_of(d, spec)) for d in ready]


def members(devices: Sequence[am.DeviceInfo]) -> set[str]:
    return {d.id for d in devices if d.status not in (am.TERMINATING, am.TERMINATED)}


def problem(
    selector: Mapping[str, str], *, spec: DevicePoolSpec, devices: Sequence[am.DeviceInfo]
) -> str | None:
    """Why no device of this pool can ever match `selector` (None: one can, now or later)."""
    fixed = {"region": spec.region, "platform": spec.platform.value}
    for key, value in selector.items():
        if key in fixed and value != fixed[key]:
            return (
                f"selector {key}={value} can never match: the pool's devices are {key} {fixed[key]}"
            )
    device = selector.get("device")
    present = members(devices)
    if device is not None and device not in present:
        listed = ids(sorted(present)) if present else "none"
        return f"selector device={device} can never match: not a device of the pool (its devices: {listed})"
    known = set(_OWN_KEYS)
    for d in devices:
        known.update(d.labels)
    unknown = sorted(k for k in selector if k not in known)
    # A label no listed device carries; with none listed yet, nothing is known to refuse.
    if unknown and devices:
        return (
            f"selector key {unknown[0]} can never match: the pool's devices carry no such label"
            f" (they carry {', '.join(sorted(known))})"
        )
    return None


def grows_for(
    selector: Mapping[str, str],
    *,
    pool: str,
    spec: DevicePoolSpec,
    devices: Sequence[am.DeviceInfo],
) -> bool:
    """Whether a device the pool makes could serve a ticket of `selector`: what an autoscaled
    pool counts as demand. A new device carries what the pool writes (`region`, `platform`,
    its `pool` and `managed-by` labels, the current template's `template-hash`), never a
    listed device's slot; any other label it carries as the listed devices do (made from the
    same template, it gets the provider's labels as they did). So with none listed, a ticket
    for `model=pixel` rents nothing, one for the region counts; a ticket for `model=pixel` in
    a pool of `model: galaxy` devices rents nothing, nor one for an old template's hash."""
    wanted = {k: v for k, v in selector.items() if k != "device"}
    if LABEL_SLOT in wanted:
        return False  # a listed device's slot: a new device takes its own
    made = {
        "region": spec.region,
        "platform": spec.platform.value,
        LABEL_POOL: pool,
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    if LABEL_TEMPLATE_HASH in wanted:  # hashed only when asked (once per selector, per message)
        made[LABEL_TEMPLATE_HASH] = am.template_hash(am.device_template(spec))
    if any(made[k] != v for k, v in wanted.items() if k in made):
        return False
    rest = {k: v for k, v in wanted.items() if k not in made}
    if not rest:
        return True
    # Only devices of the current template (or of no known one) say what a new one carries: an
    # old device's provider labels (`android=13` before an osVersion change) a new one lacks.
    current = made.get(LABEL_TEMPLATE_HASH) or am.template_hash(am.device_template(spec))
    alike = [d for d in devices if d.labels.get(LABEL_TEMPLATE_HASH) in (None, current)]
    return any(all(d.labels.get(k) == v for k, v in rest.items()) for d in alike)


def leased_busy(devices: Sequence[am.DeviceInfo], leased: Collection[str]) -> list[am.DeviceInfo]:
    """`devices` with the leased ones in use (a session): idle to nothing that takes devices."""
    if not leased:
        return list(devices)
    return [d.model_copy(update={"session_active": True}) if d.id in leased else d for d in devices]


def replace_used(
    state: PoolState, ended: Sequence[Ended], *, listed: Collection[str], now: datetime
) -> list[Happened]:
    """Doom the devices of `ended` leases (`onRelease: replace`, `release --replace`)."""
    used = sorted({e.device for e in ended if e.reason not in NOT_USED and e.device in listed})
    used = [d for d in used if d not in state.doomed]
    if not used:
        return []
    state.fates.set(used, Fate.DOOMED)
    state.replaced_after_use += [d for d in used if d not in state.replaced_after_use]
    return [Happened("ReplaceRequested", f"{ids(used)} replaced after use (lease released)")]


def _used(ended: Sequence[Ended], listed: Collection[str]) -> list[str]:
    return sorted({e.device for e in ended if e.reason not in NOT_USED and e.device in listed})


def used(state: PoolState) -> set[str]:
    """The devices a removal is told were used (`onRelease: reset|replace`): replaced after
    a lease, waiting for their reset, or ended by a person's replace while leased. A cloud
    phone's profile is then fresh-started before it is kept (or retired), whatever takes
    it away: its reset, a lifetime, a scale-down, a rollout or a person."""
    return {*state.replaced_after_use, *(r.device for r in state.resets)}


def replaced_while_leased(
    state: PoolState, ended: Sequence[Ended], *, listed: Collection[str]
) -> None:
    """Devices a person replaced while leased: removed as used (`used`)."""
    for e in ended:
        if e.reason == EndReason.REPLACED and e.device in listed:
            if e.device not in state.replaced_after_use:
                state.replaced_after_use.append(e.device)


def reset_used(state: PoolState, ended: Sequence[Ended], *, listed: Collection[str]) -> list[str]:
    """Hold the devices of `ended` leases for a reset (`onRelease: reset`): a lease released,
    expired or idle ran on them; not an offer never claimed, nor a device lost or replaced.
    The devices added."""
    pending = {r.device for r in state.resets}
    added = [d for d in _used(ended, listed) if d not in state.doomed and d not in pending]
    state.resets += [PendingReset(device=d) for d in added]
    return added


def resets_due(
    state: PoolState, *, members: Collection[str], leaving: Collection[str]
) -> list[str]:
    """The devices to reset now. One no longer a member, or doomed, needs none (it goes
    anyway) and is forgotten; one this pass terminates (`leaving`) waits. Devices replaced
    after use are forgotten once gone."""
    doomed = set(state.doomed)
    state.resets = [r for r in state.resets if r.device in members and r.device not in doomed]
    state.replaced_after_use = [d for d in state.replaced_after_use if d in members]
    return [r.device for r in state.resets if r.device not in leaving]


def take_resets(state: PoolState, results: Mapping[str, Any]) -> list[Happened]:
    """What came of the resets asked: device -> its `ResetDeviceResult`, or the error its
    activity failed with (a string). Reset or gone: forgotten. No reset at the provider,
    none left this month, or `RESET_ATTEMPTS` failures: replaced (doomed). Other failures
    are tried again on a later pass."""
    pending = {r.device: r for r in state.resets}
    reset: list[str] = []
    unsupported: list[str] = []
    replaced: list[str] = []
    said: list[Happened] = []
    for device, result in sorted(results.items()):
        entry = pending.get(device)
        if entry is None:
            continue
        if isinstance(result, str):
            entry.failures += 1
            if entry.failures < RESET_ATTEMPTS:
                tries = f"attempt {entry.failures} of {RESET_ATTEMPTS}"
                said.append(Happened("ResetFailed", f"{device}: {result} ({tries})", True))
                continue
            replaced.append(device)
            message = f"{device}: {result}; replaced after {RESET_ATTEMPTS} failed resets"
            said.append(Happened("ResetFailed", message, warning=True))
        elif result.outcome == am.ResetOutcome.RESET:
            reset.append(device)
        elif result.outcome == am.ResetOutcome.UNSUPPORTED:
            unsupported.append(device)
        elif result.outcome == am.ResetOutcome.QUOTA_USED:
            replaced.append(device)
            why = f" ({result.message})" if result.message else ""
            message = f"{device}: no reset left for it this month{why}; replaced instead"
            said.append(Happened("ResetQuotaUsed", message, warning=True))
        state.resets.remove(entry)  # reset, gone, or replaced
    if reset:
        said.insert(0, Happened("Reset", f"{ids(reset)} reset for their next holder"))
    if unsupported:
        if any(e.reason == RESET_IS_REPLACE for e in state.events):
            message = f"{ids(unsupported)} replaced after use (lease released; no reset here)"
            said.append(Happened("ReplaceRequested", message))
        else:  # said once (while among the pool's recent events)
            message = (
                f"{ids(unsupported)} replaced after use: the account's provider has no reset,"
                " so onRelease: reset makes a new device"
            )
            said.append(Happened(RESET_IS_REPLACE, message))
    doomed = [d for d in [*unsupported, *replaced] if d not in state.doomed]
    state.fates.set(doomed, Fate.DOOMED)
    state.replaced_after_use += [d for d in doomed if d not in state.replaced_after_use]
    return said
