"""The lease book: who holds which member of a pool, who waits for one, and until when.

Pure (no Temporal, no clock: `now` is given); carried in each kind's state, so leases and
tickets survive continue-as-new. The rules (docs/leases.md):

- a member is granted only while ready, matching the selector, and held by no lease;
- tickets are served first come, first served: a member that frees up is offered to the
  oldest ticket whose selector it matches, before any new request sees it;
- an offer is claimed by its holder within `CLAIM_WINDOW`, or it goes to the next ticket
  (a ticket asked for by signal, `lease_ask`, is named by its asker's id and claimed by the
  same ask sent again: a waiter that died is not waited for past the window);
- a lease ends on release, at `expiresAt` (never past `maxDuration` from its grant), when
  its holder is silent past `idleTimeout`, or when its member is gone; the lease id is the
  fencing token: a renew or release names it, and an ended lease stays ended.

What it keeps and answers (`Lease`, `Ticket`, `Ended`, `EndReason`, ...): `lease_records.py`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import Field

from devicepool.api.base import CamelModel
from devicepool.api.labels import selector_matches
from devicepool.api.v1beta1 import LeaseSpec
from devicepool.workflows.reconciler.demand import Stabilization
from devicepool.workflows.reconciler.lease_records import (
    EXPIRING,
    Ended,
    EndReason,
    Lease,
    NotGranted,
    Queued,
    Ticket,
)

if TYPE_CHECKING:
    from devicepool.workflows.reconciler.lease_records import Candidate

__all__ = ["CLAIM_WINDOW", "LeaseBook"]

# How long an offer to a ticket waits for its holder to claim it (a client polls every
# second or two; one that stopped polling has died or given up).
CLAIM_WINDOW = timedelta(seconds=30)
# Ended leases and tickets remembered, so a late renew, release or poll learns why.
ENDED_KEPT = 500
# `lease` updates whose answer the book remembers (`made_by`): a resend comes within seconds.
ASKED_KEPT = 100
# Ids given back before the pool knew them (an ask overtaken by its give-back), remembered
# apart from the ends: a stream of give-backs of ids nobody holds pushes out only these.
GIVEN_BACK_KEPT = 100
# Why an ask that would not wait is not granted (on an autoscaled pool, with what would be).
_NONE_FREE = "no ready device matching the selector is free"
_GROWS_IF_WAITED = (
    "the pool is autoscaled and grows only for a lease that waits: ask with --wait 5m"
)


class LeaseBook(CamelModel):
    leases: list[Lease] = Field(default_factory=list)
    tickets: list[Ticket] = Field(default_factory=list)
    ended: list[Ended] = Field(default_factory=list)
    granted_total: int = 0
    # Leases ended by `EXPIRING` reasons, over the pool's life (carried across runs).
    expired_total: int = 0
    # The latest `lease` updates answered: a digest of the update id -> the lease or ticket
    # id it made. A resend under the same id (the SDK's or a client's retry) answers that
    # again instead of granting twice, also on a new run, which Temporal's dedup misses.
    asked: dict[str, str] = Field(default_factory=dict)
    # Ids given back before any ask or lease had them (`GIVEN_BACK_KEPT`, the latest).
    given_back: list[str] = Field(default_factory=list)
    # Demand scaling (`autoscaling.py`; only while the spec sets `autoscale`): since when
    # each member is unleased, and the sizes wanted lately.
    idle_since: dict[str, datetime] = Field(default_factory=dict)
    stabilization: Stabilization = Field(default_factory=Stabilization)

    # ------------------------------------------------------------------ reading

    def empty(self) -> bool:
        return not self.leases and not self.tickets

    def devices(self) -> set[str]:
        """The members held by a lease (offered ones too): busy to whatever takes members away."""
        return {lease.device for lease in self.leases}

    def lease(self, lease_id: str) -> Lease | None:
        return next((x for x in self.leases if x.id == lease_id), None)

    def ended_as(self, some_id: str) -> Ended | None:
        """Why a lease (by id) or a ticket (by ticket id) ended; None if it did not."""
        return next(
            (e for e in reversed(self.ended) if some_id in (e.id, e.ticket) and some_id), None
        )

    def made_by(self, update_id: str) -> str | None:
        """The lease or ticket id a `lease` update made (None: not one the book remembers)."""
        return self.asked.get(_digest(update_id)) if update_id else None

    def remember_asked(self, update_id: str, made: str) -> None:
        if update_id:
            self.asked[_digest(update_id)] = made
            for oldest in list(self.asked)[:-ASKED_KEPT]:
                del self.asked[oldest]

    def knows(self, ask: str) -> bool:
        """Whether a lease, a ticket or an end under this id is held or remembered (a
        `lease_ask` sent again is answered by what its first send made)."""
        return (
            any(ask in (x.id, x.ticket) for x in self.leases)
            or self.position(ask) is not None
            or self.ended_as(ask) is not None
            or ask in self.given_back
        )

    def remember_given_back(self, some_id: str) -> None:
        """An id given back that nothing here had: an ask under it that comes later changes
        nothing."""
        if some_id not in self.given_back:
            self.given_back.append(some_id)
            del self.given_back[:-GIVEN_BACK_KEPT]

    def offer_for(self, ticket_id: str) -> Lease | None:
        return next((x for x in self.leases if x.ticket == ticket_id and ticket_id), None)

    def position(self, ticket_id: str) -> int | None:
        for i, ticket in enumerate(self.tickets):
            if ticket.id == ticket_id:
                return i + 1
        return None

    def oldest_wait(self, now: datetime) -> float | None:
        """Seconds the oldest ticket has waited (None: none waits)."""
        if not self.tickets:
            return None
        return max(0.0, (now - self.tickets[0].created_at).total_seconds())

    def next_deadline(self, rules: LeaseSpec) -> datetime | None:
        """The next moment something here ends of its own (None: nothing will)."""
        idle = timedelta(seconds=rules.idle_timeout)
        due = [t.deadline for t in self.tickets]
        for x in self.leases:
            due.append(x.expires_at)
            due.append(x.renewed_at + (idle if x.claimed else CLAIM_WINDOW))
        return min(due, default=None)

    # ------------------------------------------------------------------ changes

    def request(
        self,
        *,
        candidates: Sequence[Candidate],
        selector: Mapping[str, str],
        holder: str,
        duration: timedelta,
        wait: timedelta,
        now: datetime,
        rules: LeaseSpec,
        new_id: Callable[[], str],
        ask: str = "",
        autoscaled: bool = False,
    ) -> Lease | Queued | NotGranted:
        """A lease now, a ticket in the queue (`wait` > 0), or why neither. Tickets already
        waiting are served first (`assign`), so a free member matching this selector is one
        no earlier ticket wants. `ask`: the asker's id (`lease_ask`): the ticket's, and the
        lease's `ticket` when granted at once, so that it is found by it either way.
        `autoscaled`: the pool grows for a waiting ticket only, which a refusal says."""
        self.assign(candidates, now=now, rules=rules, new_id=new_id)
        seconds = min(duration.total_seconds(), rules.max_duration)
        member = self._free(candidates, selector)
        if member is not None:
            lease = self._grant(member, holder, dict(selector), seconds, now, rules, new_id())
            lease.ticket = ask
            return lease
        if wait <= timedelta(0):
            if autoscaled:  # it grows for a ticket, never for an ask that would not wait
                return NotGranted(f"{_NONE_FREE}: {_GROWS_IF_WAITED}")
            return NotGranted(_NONE_FREE)
        if len(self.tickets) >= rules.queue.max:
            return NotGranted(
                f"the queue is full ({len(self.tickets)} waiting, queue.max {rules.queue.max})",
                full=True,
            )
        wait = min(wait, timedelta(seconds=rules.queue.max_wait))
        ticket = Ticket(
            id=ask or new_id(),
            holder=holder,
            selector=dict(selector),
            duration=seconds,
            created_at=now,
            deadline=now + wait,
        )
        self.tickets.append(ticket)
        return Queued(ticket, len(self.tickets))

    def assign(
        self,
        candidates: Sequence[Candidate],
        *,
        now: datetime,
        rules: LeaseSpec,
        new_id: Callable[[], str],
    ) -> list[Lease]:
        """Offer free members to the waiting tickets, oldest first; the offers made.

        Linear in tickets and candidates, not their product: hundreds of tickets wait on a
        busy pool, and this runs on every ask and give-back (a workflow task that takes
        seconds is failed by the SDK's deadlock check, and is failed again when retried)."""
        offers: list[Lease] = []
        if not self.tickets:
            return offers
        free = self._unheld(candidates)
        # Selectors that nothing free matches: what is free only shrinks while offers are made.
        missed: set[tuple[tuple[str, str], ...]] = set()
        for ticket in list(self.tickets):
            if not free:
                break
            wanted = tuple(sorted(ticket.selector.items()))
            if wanted in missed:
                continue
            member = next((c for c in free if selector_matches(ticket.selector, c.labels)), None)
            if member is None:
                missed.add(wanted)
                continue
            free = [c for c in free if c.id != member.id]  # a device listed twice: once
            self.tickets.remove(ticket)
            lease = self._grant(
                member, ticket.holder, ticket.selector, ticket.duration, now, rules, new_id()
            )
            lease.ticket, lease.claimed, lease.queued_at = ticket.id, False, ticket.created_at
            offers.append(lease)
        return offers

    def claim(self, ticket_id: str, *, now: datetime, rules: LeaseSpec) -> Lease | None:
        """The holder of a ticket takes the lease offered to it (its clocks start now)."""
        lease = self.offer_for(ticket_id)
        if lease is None:
            return None
        if not lease.claimed:
            lease.claimed, lease.renewed_at = True, now
            lease.expires_at = _expiry(lease, now, lease.duration, rules)
        return lease

    def renew(
        self, lease_id: str, *, duration: timedelta | None, now: datetime, rules: LeaseSpec
    ) -> Lease | None:
        """The lease, renewed for `duration` (None: as long as it was taken for), never past
        `maxDuration` from its grant; None if it is not held (see `ended_as`)."""
        lease = self.lease(lease_id)
        if lease is None:
            return None
        seconds = lease.duration if duration is None else duration.total_seconds()
        lease.claimed, lease.renewed_at = True, now
        lease.expires_at = _expiry(lease, now, seconds, rules)
        return lease

    def release(self, lease_id: str, *, now: datetime) -> Ended | None:
        """End a lease by its holder's word; an ended one answers how it ended (releasing
        twice is no error); None: never known here."""
        lease = self.lease(lease_id)
        if lease is None:
            return self.ended_as(lease_id)
        return self._end(lease, EndReason.RELEASED, now)

    def refuse(
        self,
        ask: str,
        *,
        holder: str,
        message: str,
        now: datetime,
        refusal: str = "",
        reason: EndReason = EndReason.TIMED_OUT,
    ) -> Ended:
        """A `lease_ask` answered without a ticket or a lease (`refusal`), or given back
        before it came (`Cancelled`): remembered under its id, for its asker to read and so
        that a late ask under it changes nothing."""
        ended = Ended(
            id=ask,
            ticket=ask,
            holder=holder,
            reason=reason,
            at=now,
            message=message,
            refusal=refusal,
        )
        return self._remember(ended)

    def cancel(self, ticket_id: str, *, now: datetime) -> Ended | None:
        """A holder gives up on its ticket: dropped, or the offer it had (never used) ends;
        remembered, so a second give-up answers the same. None: no such ticket waits."""
        offer = self.offer_for(ticket_id)
        if offer is not None and not offer.claimed:
            return self._end(offer, EndReason.CANCELLED, now, "given up before it was claimed")
        ticket = next((t for t in self.tickets if t.id == ticket_id), None)
        if ticket is None:
            return None
        return self._end_ticket(ticket, EndReason.CANCELLED, now)

    def withdraw_offers(self, reason: EndReason, *, now: datetime) -> list[Ended]:
        """End every offer not yet claimed (the pool is being deleted)."""
        return [self._end(x, reason, now) for x in list(self.leases) if not x.claimed]

    def end_device(
        self, device: str, reason: EndReason, *, now: datetime, message: str = ""
    ) -> list[Ended]:
        """End the lease on `device` (a person replaced it, the pool is deleted)."""
        return [self._end(x, reason, now, message) for x in list(self.leases) if x.device == device]

    def end_all(self, reason: EndReason, *, now: datetime, message: str = "") -> list[Ended]:
        """End every lease and ticket (the pool is deleted)."""
        ended = [self._end(x, reason, now, message) for x in list(self.leases)]
        return ended + self.drop_tickets(reason, now=now, message=message)

    def drop_tickets(self, reason: EndReason, *, now: datetime, message: str = "") -> list[Ended]:
        """End every ticket waiting (the pool is being deleted)."""
        return [self._end_ticket(t, reason, now, message) for t in list(self.tickets)]

    def reap(
        self, *, now: datetime, rules: LeaseSpec, members: Collection[str] | None
    ) -> list[Ended]:
        """End what is due at `now`: leases past `expiresAt`, silent past `idleTimeout`,
        offers unclaimed past `CLAIM_WINDOW`, leases of members gone (`members`: the pool's
        members now; None: not known, so none is taken for gone), tickets past their wait."""
        ended = []
        idle = timedelta(seconds=rules.idle_timeout)
        for lease in list(self.leases):
            if members is not None and lease.device not in members:
                why = EndReason.DEVICE_LOST
            elif not lease.claimed and now >= lease.renewed_at + CLAIM_WINDOW:
                why = EndReason.UNCLAIMED
            elif now >= lease.expires_at:
                why = EndReason.EXPIRED
            elif lease.claimed and now >= lease.renewed_at + idle:
                why = EndReason.IDLE
            else:
                continue
            ended.append(self._end(lease, why, now))
        for ticket in list(self.tickets):
            if now >= ticket.deadline:
                waited = (now - ticket.created_at).total_seconds()
                said = f"no device was granted in {waited:g}s"
                ended.append(self._end_ticket(ticket, EndReason.TIMED_OUT, now, said))
        return ended

    # ------------------------------------------------------------------ inside

    def _free(
        self, candidates: Sequence[Candidate], selector: Mapping[str, str]
    ) -> Candidate | None:
        return next(
            (c for c in self._unheld(candidates) if selector_matches(selector, c.labels)), None
        )

    def _unheld(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates no lease holds, in the kind's order."""
        held = self.devices()
        return [c for c in candidates if c.id not in held]

    def _grant(
        self,
        member: Candidate,
        holder: str,
        selector: dict[str, str],
        seconds: float,
        now: datetime,
        rules: LeaseSpec,
        lease_id: str,
    ) -> Lease:
        lease = Lease(
            id=lease_id,
            device=member.id,
            holder=holder,
            granted_at=now,
            expires_at=now,
            renewed_at=now,
            duration=seconds,
            selector=selector,
        )
        lease.expires_at = _expiry(lease, now, seconds, rules)
        self.leases.append(lease)
        self.granted_total += 1
        return lease

    def _end(self, lease: Lease, reason: EndReason, now: datetime, message: str = "") -> Ended:
        self.leases.remove(lease)
        if reason in EXPIRING:
            self.expired_total += 1
        ended = Ended(
            id=lease.id,
            device=lease.device,
            holder=lease.holder,
            ticket=lease.ticket,
            reason=reason,
            at=now,
            message=message,
        )
        return self._remember(ended)

    def _end_ticket(
        self, ticket: Ticket, reason: EndReason, now: datetime, message: str = ""
    ) -> Ended:
        self.tickets.remove(ticket)
        ended = Ended(
            id=ticket.id,
            ticket=ticket.id,
            holder=ticket.holder,
            reason=reason,
            at=now,
            message=message,
        )
        return self._remember(ended)

    def _remember(self, ended: Ended) -> Ended:
        self.ended.append(ended)
        del self.ended[:-ENDED_KEPT]
        return ended


def _digest(update_id: str) -> str:
    """A fixed-size key for an update id (a client's may be up to Temporal's 1,000 chars)."""
    return hashlib.sha256(update_id.encode()).hexdigest()[:24]


def _expiry(lease: Lease, now: datetime, seconds: float, rules: LeaseSpec) -> datetime:
    """`now + seconds`, never past `maxDuration` from the grant."""
    cap = lease.granted_at + timedelta(seconds=rules.max_duration)
    return min(now + timedelta(seconds=seconds), cap)
