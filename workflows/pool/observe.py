"""A DevicePool pass's look at the provider (`look`, `probe_region`), the batch reports it
takes in (`take_reports`), and its wait for news (`until_due`: a message, the watch's news,
or the pass's earliest deadline).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities import models as am
    from devicepool.api import names
    from devicepool.workflows.pool import calls
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.pool.decide import wake_after
    from devicepool.workflows.pool.plan import Plan
    from devicepool.workflows.pool.state import watched_devices
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.errors import error_message, problem, wait_condition
    from devicepool.workflows.shared.placement import REREAD_NODES_PATCH, misplaced

if TYPE_CHECKING:
    from devicepool.workflows.pool.kind import DevicePoolKind

__all__ = [
    "QUOTA_HOLD_PATCH",
    "SETTINGS_FIRST_PATCH",
    "look",
    "probe_region",
    "take_reports",
    "until_due",
]

# Since the provider calls of an account served by a node worker go to that node:
# a run reads the worker's settings before its first provider call. Serves v0.1.0:
# its runs read them beside the listing (tests/replay/histories/v0.1.0).
SETTINGS_FIRST_PATCH = "settings-before-provider-calls"
# A references check answers for the spec it was asked about: an apply that changed the spec
# while it was awaited cleared the problems, and its answer is dropped (no create this pass;
# the next checks the new spec). Runs from before took it for the new spec's: Ready=False
# naming the old reference under the new generation, creates held until checked again.
REFS_OF_ITS_SPEC_PATCH = "refs-check-answers-for-its-spec"
# A batch's creates refused for a used-up quota hold the pool's creates until it resets
# (`Backoff.hold`: fewer batches, another timer); runs before it counted them as failures.
QUOTA_HOLD_PATCH = "quota-holds-creates"


async def look(k: DevicePoolKind) -> None:
    """One round trip for everything the pass must know, not one each."""
    looks = []
    if k.worker_settings is None:
        # The settings say which node worker serves the account (`account_nodes`),
        # so the provider calls wait for them; runs from before read all at once.
        if workflow.patched(SETTINGS_FIRST_PATCH):
            await k.read_settings()
        else:
            looks.append(k.read_settings())
    if k.refs_problems is None:
        looks.append(_check_refs(k))
    if k.need_observe:
        looks.append(_list(k))
    await asyncio.gather(*looks)


async def _check_refs(k: DevicePoolKind) -> None:
    spec = k.spec
    proxy = spec.proxy
    try:
        problems = await calls.check_refs(
            k.route, proxy.pool_ref if proxy else None, spec.region, spec.platform.value
        )
    except ActivityError as err:
        # Only a node worker that takes no call gets here (a node's calls are the
        # only ones bounded): not checked, so no create, checked again next pass.
        k.refs_problems, k.refs_unchecked = None, True
        workflow.logger.warning("pool %s: references not checked: %s", k.name, err)
        return
    if k.spec != spec and workflow.patched(REFS_OF_ITS_SPEC_PATCH):
        k.refs_unchecked = True  # the old spec's answer: none for the new one yet
        return
    k.refs_problems = problems
    k.refs_unchecked = False
    if k.refs_problems:  # said each time it is checked again (repeats are counted)
        reason, message = st.refs_problem(k.refs_problems)
        k.h.happened(say.Happened(reason, message, warning=True))


async def _list(k: DevicePoolKind) -> None:
    number = k.watch.begin()
    try:
        devices = await calls.list_devices(k.route, k.name)
    except ActivityError as err:
        # Keep the last observation; never create or terminate on a guess.
        workflow.logger.warning("pool %s: cannot list devices: %s", k.name, err)
        said = k.route.problem(err) or problem(err)
        if k.observe_problem != said:
            k.h.happened(say.Happened("ListFailed", said, warning=True))
        k.observe_problem = said
        if misplaced(err) and not k.settings_pinned and workflow.patched(REREAD_NODES_PATCH):
            k.worker_settings = None  # the next pass reads where the account's calls go now
        return
    if k.observe_problem is not None:
        k.h.happened(say.Happened("Listed", "the pool's devices are listed again"))
    k.observe_problem = None
    if k.watch.accept(number):
        k.take_listing(devices)


async def probe_region(k: DevicePoolKind) -> None:
    """When a back-off ends, ask the provider about the region before creating again."""
    backoff, now = k.s.backoff, workflow.now()
    if not backoff.probe_due(now):
        return
    try:
        answer = await calls.region_status(k.route, k.spec.region)
        failed = False
    except ActivityError as err:
        answer, failed = error_message(err), True
    region, settings = k.spec.region, k.settings
    if backoff.probed(answer, failed=failed, region=region, settings=settings, now=now):
        k.h.happened(say.backed_off(backoff))
    else:
        k.h.happened(say.region_up(region, answer))


async def until_due(k: DevicePoolKind, plan: Plan) -> None:
    """Wait for something worth a pass; whether devices must be listed again (`need_observe`)."""
    if k.observe_problem is None:
        k.watch.ensure(lambda: _watch_devices(k))
    now, pause, life = workflow.now(), k.s.account_pause, k.life()
    timeout = wake_after(
        now=now,
        plan=plan,
        settings=k.settings,
        deadlines=(
            k.s.backoff.next_at(now),
            pause.until if pause else None,
            life.expiry().next_at,
            life.next_window_check(
                pending=bool(
                    k.s.rollout.rolling
                    or (k.spec.rollout is not None and life.drift())
                    or life.expiry().retire
                    or plan.blocked_surplus
                )
            ),
            life.next_protection_end(),
        ),
        resync=bool(
            k.refs_problems
            or k.s.doomed
            or k.observe_problem is not None
            or k.retry_terminations
            or k.s.control.retiring
            or k.s.rollout.rolling
            # Retiring now (within the budgets): an expired device a budget holds waits
            # for the window's end (a deadline above), not for a resync.
            or life.retire()
        ),
        next_batch_check=k.s.slots.next_check_at(k.check_every),
    )
    h = k.h
    timed_out = not await wait_condition(
        lambda: h.dirty or h.replan or k.watch.answered() or versions.upgrade_due(),
        timeout=timeout,
        summary="next check",
    )
    need_observe = timed_out or h.dirty
    h.dirty = h.replan = False
    try:
        answered = k.watch.answer()
    except ActivityError as err:
        workflow.logger.warning("watch failed: %s", err)
        answered, need_observe = None, True
    if answered is not None:
        answer, news = answered
        if answer.health_ended:
            workflow.logger.warning("pool %s: health check ended; started again", k.name)
            k.h.happened(say.Happened("HealthCheckRestarted", "the health check had ended", True))
            k.neighbours.health_running = False
        if news:
            k.take_listing(answer.devices)
        else:
            workflow.logger.info("pool %s: an older watch answer dropped", k.name)
    if timed_out and k.refs_problems:
        k.refs_problems = None  # look again: the worker config may be fixed
    k.need_observe = need_observe


async def _watch_devices(k: DevicePoolKind) -> am.WatchDevicesResult:
    # Only once this run started (or found) the health check may it be missed.
    health = names.health_workflow_id(k.name) if k.neighbours.health_running else None
    return await calls.watch_devices(
        k.route,
        k.name,
        watched_devices(k.devices, k.reported_leaving),
        k.settings,
        health_workflow_id=health,
    )


def take_reports(k: DevicePoolKind, created_mark: int, done_mark: int) -> None:
    """The batch reports that arrived before the pass's look (`SlotBook.inbox.mark`): the
    quota holds they name, the creates settled, the batches finished."""
    created = k.s.slots.inbox.created[:created_mark]
    for report in created:
        # Its refused slots are free again at once: the quota holds them first; a
        # create that landed after a hold ended ends it (as at the batch's end).
        backoff = k.s.backoff
        if report.quota is not None and workflow.patched(QUOTA_HOLD_PATCH):
            backoff.hold(
                report.quota,
                settings=k.settings,
                now=workflow.now(),
                batch=report.workflow_id,
            )
        elif report.created and backoff.quota and workflow.patched(QUOTA_HOLD_PATCH):
            backoff.quota_passed(workflow.now())
    held = k.s.backoff.quota_holds(workflow.now())
    k.h.happened(*say.batches_settled(k.s.slots, created, words=k.words, held=held))
    k.s.slots.settle_created(created_mark, listed=(d.id for d in k.devices))
    for report in k.s.slots.finish(done_mark):
        # Asked only of a report that names a quota (or lands after a hold), so a run
        # that never met one records no marker.
        holding = report.quota is not None or (
            k.s.backoff.quota is not None and bool(report.created)
        )
        k.said(
            k.s.take_report(
                report,
                region=k.spec.region,
                settings=k.settings,
                now=workflow.now(),
                words=k.words,
                hold_quota=holding and workflow.patched(QUOTA_HOLD_PATCH),
            )
        )
