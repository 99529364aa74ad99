"""Demand scaling at work in a pool's workflow (both kinds): the shell's `Reconciler.autoscale`
each pass, `demand_moved` after a lease message, and the reaper's wake (`wake_if_due`). What
they decide is `autoscaling.py`'s (pure); here it is read from the pool and written back into
its spec, status and events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.api.v1beta1 import ConditionStatus, ConditionType
    from devicepool.workflows.reconciler import autoscaling
    from devicepool.workflows.reconciler.conditions import ConditionUpdate, drop_condition
    from devicepool.workflows.reconciler.events import Happened

if TYPE_CHECKING:
    from devicepool.workflows.reconciler.shell import Reconciler

__all__ = ["AUTOSCALE_PATCH", "autoscale", "demand_moved", "wake_if_due"]

# Demand scaling (`autoscaling.py`): only a pool whose spec sets `autoscale` reaches it, so
# no history from before has it; the gate keeps it so should one.
AUTOSCALE_PATCH = "autoscale"


def autoscale(h: Reconciler[Any, Any]) -> None:
    """Set `replicas` from the pool's demand (`autoscaling.resize`), said as an event
    when it moves, shown as `desiredFromDemand` and the `Autoscaling` condition."""
    spec = getattr(h.spec, "autoscale", None)
    if spec is None:
        h.autoscale_due = None
        _shown(h, None, None, None)
        return
    if not workflow.patched(AUTOSCALE_PATCH):
        return
    resized, known = _resize(h, spec, dry=False)
    current = h.spec.replicas
    h.autoscale_due = resized.wake
    why = resized.sizing.describe()
    if resized.held_for_idle:
        why += (
            f"; {resized.held_for_idle} kept until idle for scaleDownAfter"
            f" ({autoscaling.idle_for(spec)})"
        )
    if resized.target != current:
        h.happened(Happened("Autoscaled", f"replicas {current} -> {resized.target}: {why}"))
        h.spec = autoscaling.with_replicas(h.spec, resized.target)
    _shown(
        h, resized.sizing.desired, autoscaling.schedule_shown(resized.schedule), why, known=known
    )


def demand_moved(h: Reconciler[Any, Any]) -> None:
    """A lease message (or the reaper) moved an autoscaled pool's demand: a pass now
    (`replan`: on what the pool knows) if the size it asks for moves; else the
    autoscaler's wake brought forward if it must (a member given back may go after
    `scaleDownAfter`). A quiet pool's watch answers only after an hour: without this a
    ticket would wait for it. Nothing on a pool without `autoscale`: its commands are
    those of before."""
    spec = getattr(h.spec, "autoscale", None)
    if spec is None or h.s.deleting or not workflow.patched(AUTOSCALE_PATCH):
        return
    resized, _ = _resize(h, spec, dry=True)
    if resized.target != h.spec.replicas:
        h.replan = True
        return
    due, wake = h.autoscale_due, resized.wake
    if wake is not None and (due is None or wake < due):
        h.autoscale_due = wake


def _resize(h: Reconciler[Any, Any], spec: Any, *, dry: bool) -> tuple[autoscaling.Resize, bool]:
    """This moment's `resize`, and whether the members are known. `dry`: nothing of the
    book (idle members, stabilization) is written, as a handler asks between passes."""
    now, book = workflow.now(), h.leasing.book
    members = h.kind.autoscale_members()
    leased_ids = book.devices()
    free = [c.id for c in h.kind.lease_candidates() if c.id not in leased_ids]
    idle_since = autoscaling.track_idle(
        book.idle_since, members=members, free=free, leased=leased_ids, now=now
    )
    stabilization = book.stabilization
    if dry:
        stabilization = stabilization.model_copy(deep=True)
    else:
        book.idle_since = idle_since
    known = members is not None
    queued = autoscaling.queued_demand(book.tickets, h.kind.grows_for)
    resized = autoscaling.resize(
        autoscale=spec,
        schedule=getattr(h.spec, "schedule", None) or (),
        leased=len(book.leases) if known else None,
        queued=queued if known else None,
        members=members,
        leases=leased_ids,
        idle_since=idle_since,
        stabilization=stabilization,
        current=h.spec.replicas,
        now=now,
        order=h.kind.scale_down_order(),
    )
    return resized, known


def _shown(
    h: Reconciler[Any, Any],
    desired: int | None,
    window: str | None,
    why: str | None,
    *,
    known: bool = True,
) -> None:
    status = h.s.status
    wanted = {"desired_from_demand": desired, "active_schedule": window}
    if any(getattr(status, k, None) != v for k, v in wanted.items()):
        h.s.status = status = status.model_copy(update=wanted)
    if why is None:
        if status.condition(ConditionType.AUTOSCALING) is not None:
            h.s.status = drop_condition(status, ConditionType.AUTOSCALING)
        return
    condition = (
        ConditionUpdate(ConditionType.AUTOSCALING, ConditionStatus.TRUE, "FromDemand", why)
        if known
        else ConditionUpdate(
            ConditionType.AUTOSCALING, ConditionStatus.UNKNOWN, "DemandUnknown", why
        )
    )
    h.set_condition(condition)


def wake_if_due(h: Reconciler[Any, Any]) -> None:
    """The reaper's wake for the autoscaler: a pass with a fresh look."""
    due = h.autoscale_due
    if due is not None and workflow.now() >= due:
        h.autoscale_due = None
        h.dirty = True
