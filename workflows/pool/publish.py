"""A DevicePool pass's publish: the pool as the pass left it (`status.PoolView`, made the
status by the pure `status.published`), and the cost its devices accrued (`Cost.accrue`).

Then the host writes search attributes and UI details (`Host.show`), each only when it changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities import models as am
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.pool.lifecycle import protected_now
    from devicepool.workflows.pool.plan import COUNTED_STATUSES, Plan
    from devicepool.workflows.pool.state import billed_devices, running_devices

if TYPE_CHECKING:
    from devicepool.workflows.pool.kind import DevicePoolKind

__all__ = ["publish"]


def publish(k: DevicePoolKind, plan: Plan) -> None:
    """The status of the pass, its events, and the cost accrued since the last one."""
    k.blocked_surplus = plan.blocked_surplus
    pause, now = k.s.account_pause, workflow.now()
    if pause is not None and pause.until <= now:
        k.s.account_pause = None  # over: said by the condition going back to True
    drift = k.life().drift()
    doomed = k.s.doomed
    view = st.PoolView(
        spec=k.spec,
        generation=k.s.generation,
        plan=plan,
        # A batch whose creates all landed only waits for boots: its devices
        # are counted by observation (as provisioning), not as creates.
        creating=k.s.slots.creating() or plan.create > 0,
        # Members: not those on their way out (doomed, or terminating at the provider).
        device_ids=sorted(
            d.id for d in k.devices if d.id not in doomed and d.status != am.TERMINATING
        ),
        refs_problems=k.refs_problems,
        backoff=k.s.backoff,
        health=k.s.health,
        now=now,
        observe_problem=k.observe_problem,
        account_pause=k.s.account_pause,
        account_cap=k.s.cost.account_cap,
        price_per_hour=k.price,
        paused_by_user=k.s.control.remediation_paused,
        protected=sorted(protected_now(k.s.control.protected, now)),
        drifted=len(drift) if k.spec.rollout is not None else None,
        updated=sum(
            1
            for d in k.devices
            if d.status in COUNTED_STATUSES and d.id not in doomed and d.id not in drift
        ),
        settings=k.settings,
    )
    billing = billed_devices(k.devices, k.reported_leaving)
    running = running_devices(k.devices, k.reported_leaving)
    model = k.settings.billing_of(k.account)  # by the hour for every account before it
    k.s.cost.accrue(now, billing, k.price, running=running, billing=model)
    k.said(k.s.publish(st.published(k.s.status, view)))
    k.h.show()
