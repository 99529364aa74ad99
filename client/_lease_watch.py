"""One client's look at one pool's queue, shared by all of its waiting tickets: one
`leases` query per poll for all of them (50 waiters polling their own tickets were 50
queries a second on one workflow, which the server turns away while a workflow task runs),
read for each ticket as the pool's `lease_ticket` query would answer it. A lone waiter
asks for its own ticket (a small answer, where the view lists every lease of the pool)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowHandle

from devicepool.api.names import QUERY_LEASES
from devicepool.client import _lease_calls
from devicepool.client._lease_calls import Unanswered
from devicepool.workflows.reconciler.lease_messages import LeaseAnswer, LeasesView, granted

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = ["SHARED_FROM", "Look", "answer_in", "look", "waiting"]

# A client's waiters on one pool share one look at its queue from this many on.
SHARED_FROM = 2


@dataclass
class Look:
    """The pool's queue as last seen: `view` (None: unanswered, `why`), and when the query
    that saw it was sent (`time.monotonic()`)."""

    view: LeasesView | None = None
    why: str | None = None
    at: float = float("-inf")
    # This client's tickets waiting on the pool now (`waiting`).
    waiters: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def shared(self) -> bool:
        return self.waiters >= SHARED_FROM


@contextlib.contextmanager
def waiting(pools: PoolClient, handle: WorkflowHandle[Any, Any]) -> Iterator[Look]:
    """One more of this client's tickets waits on the pool while the block runs."""
    shared = _lease_calls.per_pool(pools, handle.id, "look", Look)
    shared.waiters += 1
    try:
        yield shared
    finally:
        shared.waiters -= 1


async def look(
    pools: PoolClient,
    handle: WorkflowHandle[Any, Any],
    name: str,
    kind: str | None,
    *,
    after: float,
) -> Look:
    """The pool's queue as seen by a query sent after `after`: this caller's, or one another
    waiter sent meanwhile (it waits for that one to be answered rather than send its own)."""
    shared = _lease_calls.per_pool(pools, handle.id, "look", Look)
    async with shared.lock:
        if shared.at <= after:
            sent = time.monotonic()
            try:
                shared.view = await _lease_calls.query(
                    pools, handle, name, kind, QUERY_LEASES, result_type=LeasesView
                )
                shared.why = None
            except Unanswered as err:
                shared.view, shared.why = None, err.why
            shared.at = sent
        return shared


def answer_in(view: LeasesView, pool: str, ticket: str) -> LeaseAnswer | None:
    """The ticket's state in the view, as `lease_ticket` answers it (offered, or waiting);
    None when it is in neither (it ended: how, only the ticket's own query tells)."""
    if not isinstance(view, LeasesView):
        view = LeasesView.model_validate(view)
    offer = next((x for x in view.leases if x.ticket == ticket and ticket), None)
    if offer is not None:
        return LeaseAnswer(granted=granted(pool, offer), ticket=ticket)
    for position, waiting in enumerate(view.tickets, start=1):
        if waiting.id == ticket:
            return LeaseAnswer(ticket=ticket, position=position, deadline=waiting.deadline)
    return None
