"""A DevicePool pass's wait: for a message, the watch's news, or the next deadline.

Run on the pass's `DevicePoolKind` (`kind.py`). The watch (`watch.py`) runs beside
the passes and answers when the provider's listing changed; the timeout is the
earliest deadline the pass knows (`decide.wake_after`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities import models as am
    from devicepool.api import names
    from devicepool.workflows.pool import calls
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool.decide import wake_after
    from devicepool.workflows.pool.plan import Plan
    from devicepool.workflows.pool.state import watched_devices
    from devicepool.workflows.shared import versions

if TYPE_CHECKING:
    from devicepool.workflows.pool.kind import DevicePoolKind

__all__ = ["until_due"]


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
            k.s.backoff.until,
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
    try:
        await workflow.wait_condition(
            lambda: h.dirty or h.replan or k.watch.answered() or versions.upgrade_due(),
            timeout=timeout,
            timeout_summary="next check",
        )
        timed_out = False
    except TimeoutError:
        timed_out = True
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
