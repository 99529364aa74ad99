"""What a pool shows of its lease book, read only: a ticket's state (the `lease_ticket`
query) and the Web UI's section of the leases (after the kind's own details)."""

from __future__ import annotations

from devicepool.workflows.reconciler.lease_messages import LeaseAnswer, ended_answer, granted
from devicepool.workflows.reconciler.lease_records import EndReason
from devicepool.workflows.reconciler.leases import LeaseBook

__all__ = ["DETAILS_LEASES", "details", "ticket_answer"]

# Leases the Web UI details list (`devicepool leases POOL` lists them all).
DETAILS_LEASES = 20


def ticket_answer(pool: str, book: LeaseBook, ticket: str, *, gone: str) -> LeaseAnswer:
    """A ticket's (or an ask's) state: offered (claim it) or granted, waiting, or ended;
    `gone` when the book does not know it."""
    offer = book.offer_for(ticket)
    if offer is not None:
        said = granted(pool, offer)
        return LeaseAnswer(granted=said, ticket=ticket, offered=not offer.claimed)
    position = book.position(ticket)
    if position is not None:
        deadline = book.tickets[position - 1].deadline
        return LeaseAnswer(ticket=ticket, position=position, deadline=deadline)
    ended = book.ended_as(ticket)
    if ended is not None:
        return ended_answer(ended)
    if ticket in book.given_back:
        return LeaseAnswer(
            ended=EndReason.CANCELLED.value, message="given back before it was asked"
        )
    return LeaseAnswer(ended=gone, message=f"no ticket {ticket!r}")


def details(book: LeaseBook) -> str:
    """The Web UI's section for the leases, after the kind's own details ("" while none
    is held or waited for). It opens with a blank line: Markdown would otherwise read its
    first line as more of the kind's last list item or paragraph."""
    if book.empty():
        return ""
    head = f"**Leases** · {len(book.leases)} held · {len(book.tickets)} waiting"
    if book.tickets:
        head += f" (the oldest since {book.tickets[0].created_at:%H:%M:%S}Z)"
    lines = ["", "", head]
    if book.leases:
        lines.append("")
    for x in book.leases[:DETAILS_LEASES]:
        until = f"until {x.expires_at:%Y-%m-%d %H:%M:%S}Z"
        state = until if x.claimed else "offered, not yet claimed"
        lines.append(f"- `{x.device}` · {_code(x.holder)} · {state}")
    if len(book.leases) > DETAILS_LEASES:
        lines.append(f"- and {len(book.leases) - DETAILS_LEASES} more")
    return "\n".join(lines)


def _code(text: str) -> str:
    """Free text (a holder's name) as one Markdown code span on one line: nothing in it
    (a newline, a backtick, a link) is read as Markdown."""
    flat = " ".join(text.replace("`", " ").split())
    return f"`{flat}`" if flat else "-"
