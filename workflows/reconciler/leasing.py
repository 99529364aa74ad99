"""`Leasing`: the lease book at work in a pool's workflow (both kinds): the updates' changes
(their validators: `LeaseChecks`, lease_checks.py), the signals, the reaper that ends what is
due, and what the status shows of them.

No handler waits for a device (Temporal allows 10 updates in flight per workflow): a
`lease` that finds none free leaves a ticket, which the client polls with the `lease_ticket`
query (no history) and claims with `lease_claim` once offered. The signals `lease_ask` and
`lease_give_back` do the same without an update in flight (Temporal's 10 a workflow do not
bound how many clients ask at once): the asker names its ticket, reads it with
`lease_ticket`, and claims an offer by sending the same ask again. A run hands over after
`UPDATES_PER_RUN` lease updates (Temporal allows 2,000 per run) or `SIGNALS_PER_RUN` lease
signals. How it fits the pass: docs/leases.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.workflows.reconciler.events import Happened
    from devicepool.workflows.reconciler.lease_checks import (
        LEASE_GONE,
        LEASE_NOT_GRANTED,
        LeaseChecks,
        current_update_id,
    )
    from devicepool.workflows.reconciler.lease_messages import (
        ASK_PATTERN,
        LeaseAnswer,
        LeaseAsk,
        LeaseRequest,
        LeasesView,
        ReleaseAnswer,
        ReleaseRequest,
        RenewRequest,
        TicketRef,
        ended_answer,
        ended_message,
        granted,
    )
    from devicepool.workflows.reconciler.lease_records import (
        ASK_NOT_GRANTED,
        ASK_REFUSED,
        EXPIRING,
        Candidate,
        Ended,
        EndReason,
        Lease,
        NotGranted,
        Queued,
    )
    from devicepool.workflows.reconciler.lease_views import details, ticket_answer
    from devicepool.workflows.shared.errors import wait_condition

if TYPE_CHECKING:
    from devicepool.workflows.reconciler.shell import Reconciler

__all__ = ["Leasing"]

# Lease updates a run takes before it hands over (Temporal refuses past 2,000 a run; the
# most it takes while the hand-over waits for a pass to end: `lease_checks.UPDATE_BUDGET`).
UPDATES_PER_RUN = 1000
# Lease signals a run takes before it hands over: history kept short to replay (Temporal
# takes 10,000 signals a run by default; none is ever turned away here).
SIGNALS_PER_RUN = 2000
# The gate of the lease signals: a pool's run that began on a build without them (its history
# holds an ask that build left unhandled) ignores them until its next run, as that build did.
LEASE_SIGNALS_PATCH = "lease-signals"
# A deleted pool waits this long at most for its leases to be released (`delete --force`:
# not at all); past it they end and the teardown starts.
DELETE_GRACE = timedelta(minutes=5)
# The reaper never wakes more often than this (a burst of deadlines is one pass).
REAP_GAP = timedelta(seconds=1)


class Leasing(LeaseChecks):
    """One per run; the book itself is carried in the kind's state (`s.leases`)."""

    def __init__(self, host: Reconciler[Any, Any]) -> None:
        self.h = host
        self.updates = 0  # lease updates this run
        self.signals = 0  # lease signals this run
        self.forced = False  # `end_leases`: a deletion waits for no lease

    # ------------------------------------------------------------------ updates

    def lease(self, request: LeaseRequest) -> LeaseAnswer:
        self._count()
        update_id = current_update_id()
        made = self.book.made_by(update_id)
        if made is not None:
            return self._made_again(made)
        seen = self.settle()
        outcome = self.book.request(**self._asked(request, seen), new_id=self._new_id)
        self.shown()
        self.h.demand_moved()  # a grant or a ticket: an autoscaled pool may grow now
        if isinstance(outcome, Lease):
            self.book.remember_asked(update_id, outcome.id)
            self._said_granted(outcome)
            return LeaseAnswer(granted=granted(self.h.name, outcome))
        if isinstance(outcome, Queued):
            ticket = outcome.ticket
            self.book.remember_asked(update_id, ticket.id)
            return LeaseAnswer(
                ticket=ticket.id,
                position=outcome.position,
                deadline=ticket.deadline,
                message=f"queued {outcome.position}: no ready device matching is free",
            )
        # The validator refused this on the same state: only a handler run without one.
        return LeaseAnswer(ended=LEASE_NOT_GRANTED, message=outcome.message)

    def ask(self, request: LeaseAsk) -> None:
        """Signal `lease_ask`: `lease` under the asker's id, its outcome kept in the book (a
        lease whose `ticket` is the id, a ticket of that id, or an end: `Refused`, or
        `NotGranted` when nothing is free and it would not wait). Sent again, it changes
        nothing, but that it claims the offer its ticket was made (its asker read it)."""
        if not workflow.patched(LEASE_SIGNALS_PATCH):
            return
        self._count_signal()
        book, now = self.book, workflow.now()
        if book.knows(request.ask):
            offer = book.offer_for(request.ask)
            if offer is not None and not offer.claimed:  # its asker read the offer: claimed
                book.claim(request.ask, now=now, rules=self.rules)
                self.shown()
            return
        holder = request.holder
        problem = (
            f"pool {self.h.name!r} is being deleted"
            if self.h.s.deleting
            else self.kind.lease_problem(request.selector)
        )
        if problem is not None:
            book.refuse(request.ask, holder=holder, refusal=ASK_REFUSED, message=problem, now=now)
            return
        seen = self.settle()
        outcome = book.request(**self._asked(request, seen), new_id=self._new_id, ask=request.ask)
        if isinstance(outcome, Lease):
            self._said_granted(outcome)
        elif isinstance(outcome, NotGranted):
            refusal = ASK_REFUSED if outcome.full else ASK_NOT_GRANTED
            book.refuse(
                request.ask, holder=holder, refusal=refusal, message=outcome.message, now=now
            )
        self.shown()
        self.h.demand_moved()

    def give_back(self, request: ReleaseRequest) -> None:
        """Signal `lease_give_back`: `release` without an answer. An id the pool does not
        know is remembered as given back: an ask under it that comes later (sent before,
        overtaken on the way) changes nothing."""
        if not workflow.patched(LEASE_SIGNALS_PATCH):
            return
        self._count_signal()
        answer = self._release(request)
        if answer.reason == LEASE_GONE and re.fullmatch(ASK_PATTERN, request.lease):
            self.book.remember_given_back(request.lease)

    def _made_again(self, made: str) -> LeaseAnswer:
        """A `lease` sent again: the lease its first send granted, or the state of the ticket
        it queued (one offered a device since is claimed as any: answered as a ticket)."""
        held = self.book.lease(made)
        if held is not None:
            return LeaseAnswer(granted=granted(self.h.name, held))
        answer = self.ticket(TicketRef(ticket=made))
        if answer.granted is not None:
            return LeaseAnswer(ticket=made, message="offered a device: claim it")
        return answer

    def claim(self, request: TicketRef) -> LeaseAnswer:
        self._count()
        lease = self.book.claim(request.ticket, now=workflow.now(), rules=self.rules)
        if lease is None:  # withdrawn between the validator and here: cannot be, said anyway
            return self.ticket(request)
        self.shown()
        return LeaseAnswer(granted=granted(self.h.name, lease))

    def renew(self, request: RenewRequest) -> LeaseAnswer:
        self._count()
        duration = None if request.duration is None else timedelta(seconds=request.duration)
        lease = self.book.renew(
            request.lease, duration=duration, now=workflow.now(), rules=self.rules
        )
        if lease is None:
            ended = self.book.ended_as(request.lease)
            return ended_answer(ended) if ended else LeaseAnswer(ended=LEASE_GONE)
        self.shown()
        return LeaseAnswer(granted=granted(self.h.name, lease))

    def release(self, request: ReleaseRequest) -> ReleaseAnswer:
        self._count()
        return self._release(request)

    def _release(self, request: ReleaseRequest) -> ReleaseAnswer:
        now = workflow.now()
        # A ticket's id: its holder gives up. The ticket goes, or the offer it had ends
        # unused (never replaced, whatever `onRelease` says).
        cancelled = self.book.cancel(request.lease, now=now)
        if cancelled is not None:
            if cancelled.device:
                self._ended([cancelled], replace=False)
                self.settle()  # the device goes to the next ticket
            self.shown()
            self.h.demand_moved()
            said = f"ticket {request.lease} dropped" + (
                f" (its offer of {cancelled.device} ended)" if cancelled.device else ""
            )
            return ReleaseAnswer(reason=cancelled.reason.value, message=said, released_now=True)
        # A ticket's id also names the lease it was granted and claimed (all a script on
        # the stock `temporal` CLI may know).
        claimed = self.book.offer_for(request.lease)
        lease_id = claimed.id if claimed is not None else request.lease
        held = self.book.lease(lease_id) is not None
        ended = self.book.release(lease_id, now=now)
        if ended is None:
            return ReleaseAnswer(reason=LEASE_GONE, message=f"no lease {request.lease!r}")
        if not held:  # released before, or ended otherwise: said, and nothing changes
            return ReleaseAnswer(reason=ended.reason.value, message=ended_message(ended))
        replace = request.replace or self.rules.on_release.value == "replace"
        self._ended([ended], replace=replace)
        self.settle()  # the member may go straight to a waiting ticket
        self.shown()
        self.h.demand_moved()  # an autoscaled pool's member may go after scaleDownAfter
        said = f"{ended.device} released" + (", and replaced" if replace else "")
        return ReleaseAnswer(reason=ended.reason.value, message=said, released_now=True)

    # ------------------------------------------------------------------ queries

    def view(self) -> LeasesView:
        return LeasesView(
            leases=list(self.book.leases), tickets=list(self.book.tickets), now=workflow.now()
        )

    def ticket(self, request: TicketRef) -> LeaseAnswer:
        """A ticket's state, read only: offered (claim it), waiting, or ended."""
        return ticket_answer(self.h.name, self.book, request.ticket, gone=LEASE_GONE)

    # ------------------------------------------------------------------ the book kept

    def settle(self) -> Sequence[Candidate] | None:
        """End what is due, and offer free members to the waiting tickets. State only: no
        command (an empty book changes nothing). The kind's candidates, if it worked them
        out (a lease asked next takes them as they are: nothing here changes them after)."""
        book = self.book
        if book.empty():
            return None
        now = workflow.now()
        ended = book.reap(now=now, rules=self.rules, members=self.kind.lease_members())
        if ended:
            leases = [e for e in ended if e.device]
            self._ended(leases, replace=self.rules.on_release.value == "replace")
        seen: Sequence[Candidate] | None = None
        offers = []
        if book.tickets:  # the kind's candidates are not free to work out (a sort, labels)
            seen = self.kind.lease_candidates()
            offers = book.assign(seen, now=now, rules=self.rules, new_id=self._new_id)
        for lease in offers:
            self._said_granted(lease)
        if ended or offers:
            self.shown()
        return seen

    def end_device(self, device: str, reason: EndReason) -> None:
        """A lease on `device` ends (a person replaced it now)."""
        ended = self.book.end_device(device, reason, now=workflow.now())
        if ended:
            self._ended(ended, replace=False)
            self.shown()

    async def drain(self) -> None:
        """The pool is being deleted: tickets go now; leases are waited for until released,
        ended (expiry, idle) or `DELETE_GRACE` (none once `force`d: `end_leases`), then end.
        State only, and no timer, while none is held."""
        book = self.book
        if book.empty():
            return
        now = workflow.now()
        # Offers nobody claimed yet go with the tickets: none is claimed on a deleted pool.
        self._ended(book.withdraw_offers(EndReason.POOL_DELETED, now=now), replace=False)
        book.drop_tickets(EndReason.POOL_DELETED, now=now)
        if book.leases and not self.forced:
            held = len(book.leases)
            grace = min(DELETE_GRACE, timedelta(seconds=self.rules.max_duration))
            self.h.happened(
                Happened(
                    "WaitingForLeases",
                    f"{held} lease(s) held: teardown waits up to {grace} for their release"
                    " (`devicepool delete --force` ends them now)",
                )
            )
            self.shown()
            self.h.show()
            deadline = now + grace
            while book.leases and not self.forced and workflow.now() < deadline:
                timeout = max(deadline - workflow.now(), REAP_GAP)
                due = book.next_deadline(self.rules)
                if due is not None:
                    timeout = min(timeout, max(due - workflow.now(), REAP_GAP))
                await wait_condition(
                    lambda: not book.leases or self.forced, timeout=timeout, summary="leases"
                )
                self.settle()
        ended = book.end_all(EndReason.POOL_DELETED, now=workflow.now())
        self._ended(ended, replace=False)
        self.shown()

    def force(self) -> str:
        """Update `end_leases` (`delete --force`): a deleted pool's leases end now."""
        self.forced = True
        held = len(self.book.leases)
        return f"{held} lease(s) ended" if held else "no lease was held"

    async def reap_forever(self) -> None:
        """End leases and tickets when they fall due (a timer only while the book has
        something that will; an earlier deadline wakes it sooner), and write the memo row a
        lease message left waiting (`Reconciler.row_due`)."""
        while True:
            due = self._next_wake()
            if due is None:
                await workflow.wait_condition(
                    lambda: (
                        not self.book.empty()
                        or self.h.row_due() is not None
                        or self.h.autoscale_due is not None
                    )
                )
                continue
            timeout = max(due - workflow.now(), REAP_GAP)

            def earlier(due: Any = due) -> bool:
                next_due = self._next_wake()
                return next_due is not None and next_due < due

            await wait_condition(earlier, timeout=timeout, summary="lease deadline")
            self.settle()
            self.h.demand_moved()  # tickets and leases ended, offers made
            self.h.write_row_if_due()
            self.h.autoscale_wake_if_due()

    def _next_wake(self) -> datetime | None:
        """The book's next deadline, the memo row's or the autoscaler's, whichever is first
        (None: none)."""
        wakes = [
            t
            for t in (self.book.next_deadline(self.rules), self.h.row_due(), self.h.autoscale_due)
            if t
        ]
        return min(wakes) if wakes else None

    def shown(self, *, message: bool = True) -> None:
        """The status's lease fields, as the book stands (`message`: a lease message moved
        them, so the memo row may wait for its gap: `Reconciler.show_row`)."""
        book, status = self.book, self.h.s.status
        wanted = {
            "leased_devices": len(book.leases),
            "leases_queued": len(book.tickets),
            "oldest_queued_seconds": book.oldest_wait(workflow.now()),
            "leases_expired": book.expired_total,
        }
        if any(getattr(status, k) != v for k, v in wanted.items()):
            self.h.s.status = status.model_copy(update=wanted)
        # The lease list in the Web UI; the memo row if it changed.
        self.h.show_details(lease_message=message)

    def details(self) -> str:
        """The Web UI's section for the leases (`lease_views.details`)."""
        return details(self.book)

    def hand_over_due(self) -> bool:
        return self.updates >= UPDATES_PER_RUN or self.signals >= SIGNALS_PER_RUN

    # ------------------------------------------------------------------ inside

    def _new_id(self) -> str:
        return workflow.uuid4().hex[:16]

    def _count(self) -> None:
        self.updates += 1
        if self.updates == UPDATES_PER_RUN:
            self.h.dirty = True  # a pass now, and the hand-over after it

    def _count_signal(self) -> None:
        self.signals += 1
        if self.signals == SIGNALS_PER_RUN:
            self.h.dirty = True

    def _said_granted(self, lease: Lease) -> None:
        holder = lease.holder or "a holder"
        if lease.claimed:
            said = f"{lease.device} to {holder} (lease {lease.id})"
            self.h.happened(Happened("Leased", said, similar=True))
        else:
            message = f"{lease.device} offered to {holder}, waiting (lease {lease.id})"
            self.h.happened(Happened("Leased", message, similar=True))

    def _ended(self, ended: Sequence[Ended], *, replace: bool) -> None:
        if getattr(self.h.spec, "autoscale", None) is not None:
            # A member given back is idle from now (`autoscaling.track_idle`).
            now = workflow.now()
            for one in ended:
                if one.device:
                    self.book.idle_since[one.device] = now
        for one in ended:
            if one.reason in EXPIRING:
                warning = one.reason == EndReason.DEVICE_LOST
                said = Happened("LeaseExpired", ended_message(one), warning=warning, similar=True)
                self.h.happened(said)
            else:
                holder = one.holder or "its holder"
                back = f"{one.device} back from {holder} (lease {one.id}, {one.reason.value})"
                self.h.happened(Happened("LeaseReleased", back, similar=True))
        if ended:
            self.kind.leases_ended(ended, replace=replace)
