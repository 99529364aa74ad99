"""`LeaseChecks`: the validators of the lease updates (`lease`, `lease_claim`, `renew`,
`release`; `Leasing` in leasing.py answers those that pass), and the error types they and the
answers carry.

A validator reads the book and never changes it (it is not replayed: a refusal writes no
history). A `lease` is answered on a copy of the book first, so none is accepted that the
handler would turn down; past `UPDATE_BUDGET` lease updates in a run, every one is turned
away for a moment (`LeaseBusy`), before Temporal's 2,000 a run would refuse them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from devicepool.api.v1beta1 import DEFAULT_LEASES, LeaseSpec
    from devicepool.workflows.reconciler.kind import Kind
    from devicepool.workflows.reconciler.lease_messages import (
        LeaseRequest,
        ReleaseRequest,
        RenewRequest,
        TicketRef,
        ended_message,
    )
    from devicepool.workflows.reconciler.lease_records import Candidate, NotGranted
    from devicepool.workflows.reconciler.leases import LeaseBook

if TYPE_CHECKING:
    from devicepool.workflows.reconciler.shell import Reconciler

__all__ = [
    "LEASE_BUSY",
    "LEASE_GONE",
    "LEASE_NOT_GRANTED",
    "LEASE_REFUSED",
    "UPDATE_BUDGET",
    "LeaseChecks",
    "current_update_id",
]

# Error types a refused update carries (the CLI's exit codes: docs/leases.md).
LEASE_REFUSED = "LeaseRefused"  # can never be granted, queue full, pool deleting: exit 3
LEASE_NOT_GRANTED = "LeaseNotGranted"  # none free, and no wait: exit 4
LEASE_GONE = "LeaseGone"  # a renew or claim of what is no longer held: exit 3
LEASE_BUSY = "LeaseBusy"  # the run hands over: sent again in a moment (clients retry)
# The most lease updates a run takes while its hand-over (`leasing.UPDATES_PER_RUN`) waits
# for a pass to end (then: `LeaseBusy`; Temporal refuses past 2,000 a run).
UPDATE_BUDGET = 1800


class LeaseChecks:
    """What the lease updates' validators and handlers share: the book, its rules, the kind,
    and the checks. `Leasing` is one, with the run's counts."""

    h: Reconciler[Any, Any]
    updates: int  # lease updates this run

    @property
    def book(self) -> LeaseBook:
        book: LeaseBook = self.h.s.leases
        return book

    @property
    def rules(self) -> LeaseSpec:
        return getattr(self.h.spec, "leases", None) or DEFAULT_LEASES

    @property
    def kind(self) -> Kind[Any, Any, Any]:
        return self.h.kind

    # ------------------------------------------------------------------ checks

    def check_lease(self, request: LeaseRequest) -> None:
        self._refuse_while_deleting()
        self._refuse_past_update_budget()
        if self.book.made_by(current_update_id()) is not None:
            return  # a resend: answered with what its first send made (`lease`)
        problem = self.kind.lease_problem(request.selector)
        if problem is not None:
            raise ApplicationError(problem, type=LEASE_REFUSED, non_retryable=True)
        # What the handler would answer, on a copy (no id drawn: a validator is not replayed).
        outcome = self.book.model_copy(deep=True).request(
            **self._asked(request), new_id=lambda: "dry-run"
        )
        if isinstance(outcome, NotGranted):
            kind = LEASE_REFUSED if outcome.full else LEASE_NOT_GRANTED
            raise ApplicationError(outcome.message, type=kind, non_retryable=True)

    def check_claim(self, request: TicketRef) -> None:
        self._refuse_while_deleting()
        self._refuse_past_update_budget()
        if self.book.offer_for(request.ticket) is None:
            raise self._gone(request.ticket, what="ticket")

    def check_renew(self, request: RenewRequest) -> None:
        self._refuse_past_update_budget()
        if self.book.lease(request.lease) is None:
            raise self._gone(request.lease, what="lease")

    def check_release(self, request: ReleaseRequest) -> None:
        self._refuse_past_update_budget()
        known = (
            self.book.lease(request.lease)
            or self.book.offer_for(request.lease)
            or self.book.ended_as(request.lease)
            or self.book.position(request.lease)
        )
        if not known:
            raise ApplicationError(
                f"pool {self.h.name!r} has no lease or ticket {request.lease!r}",
                type=LEASE_GONE,
                non_retryable=True,
            )

    # ------------------------------------------------------------------ inside

    def _asked(
        self, request: LeaseRequest, candidates: Sequence[Candidate] | None = None
    ) -> dict[str, Any]:
        rules = self.rules
        duration = rules.max_duration if request.duration is None else request.duration
        return {
            "candidates": self.kind.lease_candidates() if candidates is None else candidates,
            "selector": request.selector,
            "holder": request.holder,
            "duration": timedelta(seconds=duration),
            "wait": timedelta(seconds=request.wait),
            "now": workflow.now(),
            "rules": rules,
            # Told to wait only where a ticket of it would grow the pool (R18).
            "autoscaled": getattr(self.h.spec, "autoscale", None) is not None
            and self.kind.grows_for(request.selector),
        }

    def _refuse_past_update_budget(self) -> None:
        """Past `UPDATE_BUDGET` lease updates in this run (its hand-over waits for a pass
        that may take minutes), updates are turned away, to be sent again in a moment, before
        Temporal's 2,000 a run would refuse every update of the pool (scale, apply too)."""
        if self.updates >= UPDATE_BUDGET:
            raise ApplicationError(
                f"pool {self.h.name!r} is handing over to a new run; send it again in a second",
                type=LEASE_BUSY,
            )

    def _refuse_while_deleting(self) -> None:
        if self.h.s.deleting:
            raise ApplicationError(
                f"pool {self.h.name!r} is being deleted", type=LEASE_REFUSED, non_retryable=True
            )

    def _gone(self, some_id: str, *, what: str) -> ApplicationError:
        ended = self.book.ended_as(some_id)
        message = (
            ended_message(ended) if ended else f"pool {self.h.name!r} has no {what} {some_id!r}"
        )
        return ApplicationError(message, type=LEASE_GONE, non_retryable=True)


def current_update_id() -> str:
    """The id of the update being handled ("" outside one)."""
    info = workflow.current_update_info()
    return info.id if info is not None else ""
