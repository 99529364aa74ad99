"""`Reconciler`: the workflow base every pool kind's workflow class stands on.

Messages: update `scale_update`, signals `scale` and `wake`, queries `status`, `spec`,
`events`; the lease updates `lease`, `lease_claim`, `renew`, `release` and queries `leases`,
`lease_ticket`, signals `lease_ask`, `lease_give_back` (`leasing.py`); update
`lease_connect` (`connecting.py`). Continue-as-new:
`hand_over_if_due`, after each pass and between teardown steps. Demand scaling in the pass:
`autoscaler.py`; what the pool shows (search attributes, details, its memo row): `showing.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Generic

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.api import names
    from devicepool.api.v1beta1 import ConditionStatus, ConditionType, ObjectMeta, Phase
    from devicepool.workflows.reconciler import autoscaler, autoscaling
    from devicepool.workflows.reconciler.autoscaler import AUTOSCALE_PATCH
    from devicepool.workflows.reconciler.conditions import (
        ConditionUpdate,
        drop_condition,
        set_condition,
    )
    from devicepool.workflows.reconciler.connecting import (
        ConnectAnswer,
        answer_connect,
        check_connect,
    )
    from devicepool.workflows.reconciler.events import Happened, PoolEvents, record
    from devicepool.workflows.reconciler.kind import Kind, SpecT, StateT
    from devicepool.workflows.reconciler.lease_messages import (
        LeaseAnswer,
        LeaseAsk,
        LeaseRef,
        LeaseRequest,
        LeasesView,
        ReleaseAnswer,
        ReleaseRequest,
        RenewRequest,
        TicketRef,
    )
    from devicepool.workflows.reconciler.leasing import Leasing
    from devicepool.workflows.reconciler.messages import (
        Accepted,
        ApplyResult,
        ScaleRequest,
        parse_scale_signal,
        short_json,
    )
    from devicepool.workflows.reconciler.showing import ROW_AT_PATCH, ROW_MEMO_PATCH, Showing
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.errors import forget, raise_if_cancelled

__all__ = ["AUTOSCALE_PATCH", "ROW_AT_PATCH", "ROW_MEMO_PATCH", "Reconciler"]


class Reconciler(Generic[SpecT, StateT]):
    """A kind's workflow class subclasses it, calls `__init__` and sets `kind`."""

    kind: Kind[Any, Any, Any]

    def __init__(self, *, metadata: ObjectMeta, spec: SpecT, state: StateT) -> None:
        self.metadata, self.spec, self.s = metadata, spec, state
        # Why the next pass is due: a message that needs a fresh look (`dirty`), one
        # that does not (`replan`: a report the kind applies on what it knows).
        self.dirty = self.replan = False
        self.showing = Showing(self)  # search attributes, UI details, the memo row
        self.leasing = Leasing(self)
        # When the autoscaler wants a pass of its own (an idle member may go, a schedule
        # window opens or closes); None: never (every pool without `autoscale`).
        self.autoscale_due: datetime | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    # ------------------------------------------------------------------ the loop

    async def reconcile(self) -> None:
        """Passes until the pool is deleted, then its teardown; a deletion is raised
        again once torn down (the run ends cancelled). A run handed over while
        deleting only finishes the teardown, and returns."""
        if self.s.deleting:
            await self._finalize()
            return
        # Ends leases and tickets when due (no command while the book is empty).
        self._reaper = asyncio.ensure_future(self.leasing.reap_forever())
        try:
            while True:
                await self._pass()
        except (asyncio.CancelledError, ActivityError):
            # A deletion can also surface as the failure of an activity it cancelled.
            if workflow.cancellation_reason() is None:
                raise
            await self._finalize()
            raise

    async def _pass(self) -> None:
        raise_if_cancelled()  # a deletion an awaited activity absorbed
        seen = await self.kind.observe()
        raise_if_cancelled()
        self.leasing.settle()  # leases of members gone end; free members go to tickets
        self.autoscale()  # a pool that sizes itself: `replicas` from its demand
        decision = self.kind.decide(seen)
        outcome = await self.kind.act(seen, decision)
        raise_if_cancelled()
        self.kind.publish(outcome)
        self.leasing.shown(message=False)
        await self.hand_over_if_due()
        await self.kind.wait(outcome)

    async def _finalize(self) -> None:
        if not self.s.deleting:
            self.happened(Happened("Deleting", f"removing every {self.kind.member} of the pool"))
        self.s.deleting = True
        self.s.status = self.s.status.model_copy(update={"phase": Phase.DELETING})
        reaper = getattr(self, "_reaper", None)
        if reaper is not None:
            reaper.cancel()
            forget(reaper)
        self.show()
        self.kind.stop()
        # Leases are waited for (up to a grace), then ended; a second delete is no news.
        teardown = asyncio.ensure_future(self._after_leases())
        while not teardown.done():
            try:
                await asyncio.shield(teardown)
            except asyncio.CancelledError:
                # A second delete must not abort the teardown halfway.
                workflow.logger.info("pool %s: already deleting", self.name)
        teardown.result()
        self.show()

    async def _after_leases(self) -> None:
        await self.leasing.drain()
        await self.kind.tear_down()

    async def hand_over_if_due(self) -> None:
        """Continue as new with the kind's carried input, if Temporal suggests it or a
        newer build is current; once the handlers finished and the kind is quiet."""
        if not (versions.hand_over_due() or self.leasing.hand_over_due()):
            return
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() and self.kind.quiet()
        )
        if not self.s.deleting:
            raise_if_cancelled()  # never carry a deletion into a new run
            self.kind.stop()
        versions.continue_as_new(self.kind.carried())

    # ------------------------------------------------------------------ demand scaling

    def autoscale(self) -> None:
        """Set `replicas` from the pool's demand (`autoscaler.autoscale`)."""
        autoscaler.autoscale(self)

    def demand_moved(self) -> None:
        """A lease message (or the reaper) moved an autoscaled pool's demand: a pass now if
        the size it asks for moves (`autoscaler.demand_moved`)."""
        autoscaler.demand_moved(self)

    def autoscale_wake_if_due(self) -> None:
        """The reaper's wake for the autoscaler: a pass with a fresh look."""
        autoscaler.wake_if_due(self)

    def autoscaled_spec(self, new: SpecT) -> SpecT:
        """An applied spec, its `replicas` the autoscaler's size while it sets `autoscale`."""
        return autoscaling.keep_size(self.spec.replicas, new)

    # ------------------------------------------------------------------ shown

    def happened(self, *happened: Happened) -> None:
        """The pool's own events (state only: no command, no history event)."""
        now = workflow.now()
        for one in happened:
            self.s.events = record(
                self.s.events,
                now=now,
                reason=one.reason,
                message=one.message,
                warning=one.warning,
                similar=one.similar,
            )

    def set_condition(self, condition: ConditionUpdate) -> None:
        self.s.status = set_condition(
            self.s.status, condition, now=workflow.now(), generation=self.s.generation
        )

    def reject(self, message: str) -> None:
        """A `scale` signal refused: said, and `SpecRejected=True` until a change is accepted."""
        self.happened(Happened("SpecRejected", message, warning=True))
        rejected = ConditionUpdate(
            ConditionType.SPEC_REJECTED, ConditionStatus.TRUE, "InvalidScaleSignal", message
        )
        self.set_condition(rejected)

    def clear_rejection(self) -> bool:
        """An accepted change supersedes a refused `scale` signal; whether one was shown."""
        if self.s.status.condition(ConditionType.SPEC_REJECTED) is None:
            return False
        self.s.status = drop_condition(self.s.status, ConditionType.SPEC_REJECTED)
        return True

    def show(self) -> None:
        """Search attributes, UI details and the memo row, each written only when it changed
        (`showing.py`)."""
        self.showing.show()

    def show_details(
        self,
        *,
        lease_message: bool = False,
        attributes: Sequence[SearchAttributeUpdate[Any]] = (),
    ) -> None:
        """The UI's live details and the pool's row (`Showing.show_details`)."""
        self.showing.show_details(lease_message=lease_message, attributes=attributes)

    def show_row(
        self,
        *,
        lease_message: bool = False,
        attributes: Sequence[SearchAttributeUpdate[Any]] = (),
    ) -> None:
        """The pool's row in its memo, written when it changed (`Showing.show_row`)."""
        self.showing.show_row(lease_message=lease_message, attributes=attributes)

    def row_due(self) -> datetime | None:
        """When the row a lease message changed is written (None: nothing waits)."""
        return self.showing.row_due()

    def write_row_if_due(self) -> None:
        self.showing.write_row_if_due()

    # ------------------------------------------------------------------ messages

    def refuse_while_deleting(self) -> None:
        if self.s.deleting:
            raise ValueError(f"pool {self.name!r} is being deleted")

    def accepted(self, result: ApplyResult | None = None) -> Accepted:
        return Accepted(generation=self.s.generation, replicas=self.spec.replicas, result=result)

    @workflow.update(name=names.UPDATE_SCALE)
    def scale_update(self, request: ScaleRequest) -> Accepted:
        self.kind.rescale(request.replicas)
        return self.accepted()

    @scale_update.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        self.refuse_while_deleting()
        self._refuse_if_autoscaled()
        self.kind.check_replicas(request.replicas)

    def _refuse_if_autoscaled(self) -> None:
        refusal = autoscaling.scale_refusal(getattr(self.spec, "autoscale", None))
        if refusal is not None:
            raise ValueError(refusal)

    @workflow.signal(name=names.SIGNAL_SCALE)
    def scale_signal(self, payload: Any = None) -> None:
        """Signal `scale` `{"replicas": N}`: plain JSON, checked here, never trusted."""
        try:
            if self.s.deleting:
                raise ValueError("the pool is being deleted")
            self._refuse_if_autoscaled()
            request = parse_scale_signal(payload, check=self.kind.check_replicas)
        except ValueError as err:
            workflow.logger.warning("pool %s: refused scale signal: %s", self.name, err)
            self.kind.refuse_scale(f"signal scale {short_json(payload)} refused: {err}")
            return
        self.kind.rescale(request.replicas)

    @workflow.signal(name=names.SIGNAL_WAKE)
    def wake(self, payload: Any = None) -> None:
        """Signal `wake`: a pass now, with a fresh look (and an upgrade if one is due)."""
        self.dirty = True

    @workflow.query(name=names.QUERY_STATUS)
    def query_status(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.s.status.to_json_dict()
        return answer

    @workflow.query(name=names.QUERY_EVENTS)
    def query_events(self) -> PoolEvents:
        return PoolEvents(events=list(self.s.events))

    @workflow.query(name=names.QUERY_SPEC)
    def query_spec(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "metadata": self.metadata.to_json_dict(),
            "spec": self.spec.to_json_dict(),
            "generation": self.s.generation,
        }
        # The first run's start, carried on (a run's own restarts at every continue-as-new).
        if self.s.created_at is not None:
            answer["createdAt"] = self.s.created_at.isoformat()
        return answer

    # ------------------------------------------------------------------ leases (leasing.py)

    @workflow.update(name=names.UPDATE_LEASE)
    def lease(self, request: LeaseRequest) -> LeaseAnswer:
        return self.leasing.lease(request)

    @lease.validator
    def _validate_lease(self, request: LeaseRequest) -> None:
        self.leasing.check_lease(request)

    @workflow.update(name=names.UPDATE_LEASE_CLAIM)
    def lease_claim(self, request: TicketRef) -> LeaseAnswer:
        return self.leasing.claim(request)

    @lease_claim.validator
    def _validate_claim(self, request: TicketRef) -> None:
        self.leasing.check_claim(request)

    @workflow.update(name=names.UPDATE_RENEW)
    def renew(self, request: RenewRequest) -> LeaseAnswer:
        return self.leasing.renew(request)

    @renew.validator
    def _validate_renew(self, request: RenewRequest) -> None:
        self.leasing.check_renew(request)

    @workflow.update(name=names.UPDATE_RELEASE)
    def release(self, request: ReleaseRequest) -> ReleaseAnswer:
        return self.leasing.release(request)

    @release.validator
    def _validate_release(self, request: ReleaseRequest) -> None:
        self.leasing.check_release(request)

    @workflow.signal(name=names.SIGNAL_LEASE_ASK)
    def lease_ask(self, request: LeaseAsk) -> None:
        self.leasing.ask(request)

    @workflow.signal(name=names.SIGNAL_LEASE_GIVE_BACK)
    def lease_give_back(self, request: ReleaseRequest) -> None:
        self.leasing.give_back(request)

    @workflow.update(name=names.UPDATE_LEASE_CONNECT)
    async def lease_connect(self, request: LeaseRef) -> ConnectAnswer:
        return await answer_connect(self.leasing, request)

    @lease_connect.validator
    def _validate_lease_connect(self, request: LeaseRef) -> None:
        check_connect(self.leasing, request)

    @workflow.update(name=names.UPDATE_END_LEASES)
    def end_leases(self) -> str:
        return self.leasing.force()

    @end_leases.validator
    def _validate_end_leases(self) -> None:
        if not self.s.deleting:
            raise ValueError(f"pool {self.name!r} is not being deleted: release leases one by one")

    @workflow.query(name=names.QUERY_LEASES)
    def query_leases(self) -> LeasesView:
        return self.leasing.view()

    @workflow.query(name=names.QUERY_LEASE_TICKET)
    def query_lease_ticket(self, request: TicketRef) -> LeaseAnswer:
        return self.leasing.ticket(request)
