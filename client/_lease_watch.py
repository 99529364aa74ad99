"""One client's look at one pool's queue, shared by all of its waiting tickets: one
`leases` query per poll for all of them (50 waiters polling their own tickets were 50
queries a second on one workflow, which the server turns away while a workflow task runs),
where each ticket reads its place; one that left the queue (offered a device, or ended)
asks its own `lease_ticket` query. A lone waiter asks for its own ticket all along (a small
answer, where the view lists every lease of the pool)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError

from devicepool.api.names import QUERY_LEASES
from devicepool.client import _lease_calls
from devicepool.client._lease_calls import Unanswered
from devicepool.client._temporal_errors import QUERY_TIMEOUT
from devicepool.client._validation import validate_name
from devicepool.client.errors import DevicePoolError
from devicepool.workflows.reconciler.lease_messages import LeasesView
from devicepool.workflows.reconciler.lease_records import Lease, Ticket

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = ["SHARED_FROM", "Look", "look", "place_in", "read_view", "view", "waiting"]

# A client's waiters on one pool share one look at its queue from this many on.
SHARED_FROM = 2


@dataclass
class Look:
    """The pool's queue as last seen: `view` (None: unanswered, `why`), and when the query
    that saw it was sent (`time.monotonic()`)."""

    view: Any = None  # the `leases` query's JSON
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
                    pools, handle, name, kind, QUERY_LEASES, result_type=dict
                )
                shared.why = None
            except Unanswered as err:
                shared.view, shared.why = None, err.why
            shared.at = sent
        return shared


def place_in(view: Any, ticket: str) -> int | None:
    """The ticket's place in the pool's queue as the view shows it (1: next); None when it
    waits there no more (offered a device, or ended: its own query tells which). Read from
    the JSON as it comes, so that a newer worker's fields in a lease or ticket are no error
    (the models the pool carries refuse fields they do not know)."""
    if isinstance(view, BaseModel):
        view = view.model_dump(mode="json", by_alias=True)
    tickets = view.get("tickets") if isinstance(view, dict) else None
    for position, waiting in enumerate(tickets if isinstance(tickets, list) else [], start=1):
        if isinstance(waiting, dict) and waiting.get("id") == ticket:
            return position
    return None


def read_view(answer: Any) -> LeasesView:
    """The `leases` query's JSON as a `LeasesView`, a newer worker's fields in its leases and
    tickets left out rather than refused (the models the pool carries forbid what they do
    not know; the view itself ignores it)."""
    if isinstance(answer, LeasesView) or not isinstance(answer, dict):
        return LeasesView.model_validate(answer)
    return LeasesView.model_validate(
        {
            **answer,
            "leases": [_known(Lease, x) for x in answer.get("leases") or []],
            "tickets": [_known(Ticket, x) for x in answer.get("tickets") or []],
        }
    )


def _known(model: type[BaseModel], item: Any) -> Any:
    if not isinstance(item, dict):
        return item  # refused as it is
    names = {f.alias or n for n, f in model.model_fields.items()} | set(model.model_fields)
    return {key: value for key, value in item.items() if key in names}


async def view(pools: PoolClient, name: str, *, kind: str | None = None) -> LeasesView:
    """The `leases` query: the leases held, then the tickets waiting (first come first)."""
    validate_name(name)
    handle = await pools._running(name, kind)
    with pools._errors(name, kind=kind):
        try:
            answer = await handle.query(QUERY_LEASES, result_type=dict, rpc_timeout=QUERY_TIMEOUT)
        except WorkflowQueryFailedError as err:  # a worker of a build from before leases
            said = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DevicePoolError(f"{pools._side(kind).shown(name)}: leases: {said}") from err
    return read_view(answer)
