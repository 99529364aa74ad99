"""A DevicePool pass's act: withdrawals, then terminations, then batches (`carry_out`).

What news landing while terminations were awaited does is kept as v0.1.0 did it (its
histories replay only if the same batches start under the same child ids); the patches
below say when a newer run does otherwise.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities import models as am
    from devicepool.api import names
    from devicepool.workflows.pool import calls, children, leasable
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool.decide import BatchOrder, Decision
    from devicepool.workflows.pool.fates import Fate
    from devicepool.workflows.pool.slots import SlotBook, observed_slots
    from devicepool.workflows.shared.protocol import ProvisionBatchInput

if TYPE_CHECKING:
    from devicepool.workflows.pool.kind import DevicePoolKind

__all__ = [
    "OWED_SPLIT_AS_DECIDED_PATCH",
    "RESPEC_HOLDS_BATCHES_PATCH",
    "TERMINATED_LEAVE_PATCH",
    "TERMINATE_OUTDATES_WATCH_PATCH",
    "UNSTARTED_BATCHES_LEAVE_PATCH",
    "carry_out",
    "reset_used",
]

# The three patches below serve v0.1.0 (each old branch reruns what v0.1.0 did; the
# histories it recorded are tests/replay/histories/v0.1.0/upgrade/).
# The devices a pass terminated leave its view at once, and its status is the plan made
# after them. v0.1.0 kept them as members until a listing said otherwise: a pass with no
# listing in between terminated them again, and the next listing upserted the counts.
TERMINATED_LEAVE_PATCH = "terminated-devices-leave-the-pass"
# A spec change while a pass awaits its terminations leaves the decided batches to the
# next pass (same keys); v0.1.0 took the creates from its book once the terminations
# returned: under the new generation's child ids and keys (retries under their own, none
# of an older create body).
RESPEC_HOLDS_BATCHES_PATCH = "respec-during-terminations-holds-batches"
# A pass's creates are split into batches (replacements first, in batches of their own) as
# decided, before its terminations; v0.1.0 split them once the terminations returned, with
# what was owed then: a health report in between made it start a replacement batch more.
OWED_SPLIT_AS_DECIDED_PATCH = "batches-split-as-decided"
# A pass deleted while it awaits its terminations leaves the batches it decided (opened in
# its book, never started) out of the teardown; v0.2.0 asked them to cancel, was told they
# did not exist, and waited `startupTimeout` + `batchCheckGrace` for their report.
UNSTARTED_BATCHES_LEAVE_PATCH = "unstarted-batches-leave-at-delete"
# A watch begun before the pass's terminations answers as older than them (dropped): it
# may show a device the pass terminated shut down (offline) yet listed, a member again,
# which made a surplus withdrawn and then a second replacement. Runs from before (v0.2.0
# and earlier) applied it.
TERMINATE_OUTDATES_WATCH_PATCH = "terminate-outdates-the-watch"


async def carry_out(k: DevicePoolKind, decision: Decision) -> None:
    """Withdrawals, then terminations, then batches: the decision's order."""
    s = k.s
    book, owed = s.slots, s.replacements_owed  # what the decision was made on
    s.slots, s.replacements_owed = decision.slots, decision.replacements_owed
    for batch_id, slots in decision.withdraw.items():
        k.neighbours.withdraw(batch_id, slots)
    if decision.terminate:
        try:
            await terminate(
                k,
                decision.terminate,
                only_if_idle=decision.only_if_idle,
                reasons=decision.reasons,
                first=decision.first,
                retiring=decision.retiring,
            )
        except asyncio.CancelledError:
            # Deleted meanwhile: the decided batches are in the book, yet none was (or
            # will be) started, so nothing can create for them and no report will come.
            if workflow.cancellation_reason() is not None and workflow.patched(
                UNSTARTED_BATCHES_LEAVE_PATCH
            ):
                _unstarted(k, decision.batches)
            raise
        removed = [d for d in decision.plan.remove_failed if d not in s.doomed]
        s.fates.set(removed, Fate.REMOVED_FAILED)
    batches = decision.batches
    # What a v0.1.0 run owed as it took these creates: once the terminations returned.
    owed_then = owed + s.replacements_owed - decision.replacements_owed
    if batches and s.replacements_owed != decision.replacements_owed:
        # Owed more since the decision (a health report during the terminations):
        # this pass's batches stand as decided, the next pass serves the rest.
        batches = _split_as_v0_1_0(k, decision, book, owed_then)
    if batches and s.generation != decision.generation:
        if workflow.patched(RESPEC_HOLDS_BATCHES_PATCH):
            # The spec changed while terminating: these batches' keys and body would
            # disagree. Their slots are planned again (same keys) by the next pass.
            _unstarted(k, batches)
            k.h.dirty, batches = True, []
        else:
            orders, taken, left = _taken_as_v0_1_0(k, decision, book, owed_then, s.generation)
            batches = _adopt_as_v0_1_0(k, batches, orders, taken, left)
    sizes = [(len(order.slots), order.replacement) for order in batches]
    k.h.happened(*say.batches_started(sizes, words=k.words))
    for order in batches:
        input = children.batch_input(
            pool=k.name,
            spec=k.spec,
            settings=k.settings,
            generation=order.generation,
            slots=order.slots,
            replacement=order.replacement,
        )
        # Not awaited: the child reports through signals, to this run or the next.
        k.neighbours.later(start_child(k, order.child_id, input))


async def reset_used(k: DevicePoolKind, decision: Decision) -> None:
    """Reset the devices given back under `onRelease: reset` (`PoolState.resets`): commands
    only while some wait, which no run before leases ever had (no patch). A device reset
    reads rebooting until a listing says otherwise: the running watch, which may have
    listed it before its reset, is dropped (a new one starts from this view)."""
    if k.observe_problem is not None:
        return  # never on a guess: the devices are not seen
    due = leasable.resets_due(
        k.s, members=leasable.members(k.devices), leaving=set(decision.terminate)
    )
    if not due:
        return
    results = await calls.reset_devices(k.route, k.name, due)
    doomed = set(k.s.doomed)
    k.h.happened(*leasable.take_resets(k.s, results))
    reset = {
        d
        for d, r in results.items()
        if not isinstance(r, str) and r.outcome == am.ResetOutcome.RESET
    }
    if reset:
        k.devices = [
            d.model_copy(update={"status": am.REBOOTING}) if d.id in reset else d for d in k.devices
        ]
        k.watch.drop()
    # A device now replaced goes, and a failed reset is tried again, on the next pass.
    if set(k.s.doomed) != doomed or any(r.device in results for r in k.s.resets):
        k.h.dirty = True


def _unstarted(k: DevicePoolKind, batches: list[BatchOrder]) -> None:
    """These batches, opened in the book, will not be started: their slots are planned
    again under their keys, and the replacements among them are owed again."""
    for order in batches:
        k.s.slots.lost(order.child_id)
        k.s.replacements_owed += len(order.slots) if order.replacement else 0


def _split_as_v0_1_0(
    k: DevicePoolKind, decision: Decision, book: SlotBook, owed: int
) -> list[BatchOrder]:
    """The decision's batches, or those a v0.1.0 run started instead (`book`: what the
    decision was made on; `owed`: what was owed once the terminations returned)."""
    orders, taken, left = _taken_as_v0_1_0(k, decision, book, owed, decision.generation)
    live = k.s.slots
    if (
        orders == decision.batches
        and left == k.s.replacements_owed
        and taken.retry_slots == live.retry_slots
    ) or workflow.patched(OWED_SPLIT_AS_DECIDED_PATCH):
        return decision.batches
    return _adopt_as_v0_1_0(k, decision.batches, orders, taken, left)


def _taken_as_v0_1_0(
    k: DevicePoolKind, decision: Decision, book: SlotBook, owed: int, generation: int
) -> tuple[list[BatchOrder], SlotBook, int]:
    """v0.1.0's `_start_batch` loop once the terminations returned, on a copy of `book`
    as v0.1.0 had it then (its withdrawals asked, the create body of now): the batches,
    the book after them, and what is still owed. After a spec change during the
    terminations (`generation` the new one) v0.1.0 took them under the new generation's
    child ids, fresh slots under its keys and retried ones under their own, from a book
    whose new create body no longer retries older keys."""
    book = book.model_copy(deep=True)
    book.body_generation = k.s.slots.body_generation
    for batch_id, slots in decision.withdraw.items():
        withdrawn = book.batch(batch_id)
        if withdrawn is not None:
            withdrawn.withdrawing += slots
    observed = observed_slots(
        (d.labels for d in k.devices), names.LABEL_SLOT, children.incarnation()
    )
    orders: list[BatchOrder] = []
    count = decision.plan.create
    while count > 0:
        n = min(k.settings.provision_batch_size, count, owed or count)
        taken_generation, taken = book.take(n, generation=generation, observed_slots=observed)
        child_id = names.provision_workflow_id(k.name, generation, book.next_batch_number())
        book.open_batch(child_id, taken_generation, taken, workflow.now())
        orders.append(BatchOrder(child_id, taken_generation, taken, owed > 0))
        owed -= len(taken) if owed else 0
        count -= len(taken)
    return orders, book, owed


def _adopt_as_v0_1_0(
    k: DevicePoolKind,
    batches: list[BatchOrder],
    orders: list[BatchOrder],
    book: SlotBook,
    owed: int,
) -> list[BatchOrder]:
    """The live book holds `orders` (taken into `book`) instead of `batches`."""
    live, replaced = k.s.slots, {order.child_id for order in batches}
    started = [b for b in book.in_flight if b.workflow_id in {o.child_id for o in orders}]
    live.in_flight = [b for b in live.in_flight if b.workflow_id not in replaced] + started
    live.next_slot, live.next_batch = book.next_slot, book.next_batch
    live.retry_slots = book.retry_slots
    k.s.replacements_owed = owed
    return orders


async def start_child(k: DevicePoolKind, child_id: str, input: ProvisionBatchInput) -> None:
    if not await children.start_batch(child_id, input):
        k.s.slots.drop(child_id)  # planned again on the next pass
        k.h.dirty = True


async def terminate(
    k: DevicePoolKind,
    device_ids: list[str],
    *,
    only_if_idle: set[str],
    reasons: dict[str, str],
    first: set[str] | None = None,
    retiring: set[str] | None = None,
) -> None:
    seen = {d.id: d.idle_since for d in k.devices if d.id in only_if_idle}
    reserve = k.spec.reserve
    done = await calls.terminate_devices(
        k.route,
        device_ids,
        only_if_idle=only_if_idle,
        idle_since=seen,
        reserve_keep=reserve.keep if reserve is not None else None,
        used=leasable.used(k.s),
        retiring=retiring or set(),
    )
    k.said(
        k.s.take_terminations(
            device_ids,
            only_if_idle=only_if_idle,
            failed=done.failed,
            skipped=done.skipped,
            devices=k.devices,
            reasons=reasons,
            first=first or set(),
            words=k.words,
        )
    )
    # What went is leaving, as the next listing will say: not counted any more.
    if workflow.patched(TERMINATED_LEAVE_PATCH):
        gone = set(device_ids) - set(done.failed) - set(done.skipped)
        k.devices = [
            d.model_copy(update={"status": am.TERMINATING}) if d.id in gone else d
            for d in k.devices
        ]
        if gone and workflow.patched(TERMINATE_OUTDATES_WATCH_PATCH):
            # A listing begun before this view is older than it: the next watch starts here.
            k.watch.accept(k.watch.begin())
    for device_id, err in done.failed.items():
        workflow.logger.warning("terminate %s failed: %s", device_id, err)
    for device_id, why in done.skipped.items():
        workflow.logger.info("pool %s: kept %s (%s)", k.name, device_id, why)
    # A failed scale-down is planned again after a resync; a device found busy
    # since the listing is kept, and a fresh look decides again.
    k.retry_terminations = any(d in only_if_idle for d in done.failed)
    k.h.dirty = k.h.dirty or bool(done.skipped)
