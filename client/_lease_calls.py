"""The lease updates and queries as one `PoolClient` sends them to one pool, under load.

Temporal takes 10 updates in flight per workflow and holds one query while a workflow
task runs (the rest are turned away at once); the SDK retries what it turns away for
about 10 s, then gives up. So: at most `UPDATES_IN_FLIGHT` lease updates and
`QUERIES_IN_FLIGHT` queries per pool from one client at a time; each update sent with
one id for all its tries (a retry answers the first try's outcome instead of granting
twice); and what Temporal turns away for now (its limits, a run closing into the next,
an update aborted by the server) tried again, with a jittered back-off, while the
caller's budget lasts, then one `TemporalBusy` naming the cause."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.client._temporal_errors import QUERY_TIMEOUT, UPDATE_TIMEOUT
from devicepool.client._validation import validate_name
from devicepool.client.errors import (
    DevicePoolError,
    LeaseGone,
    LeaseNotGranted,
    LeaseRefused,
    TemporalBusy,
)
from devicepool.workflows.reconciler.lease_checks import (
    LEASE_BUSY,
    LEASE_GONE,
    LEASE_NOT_GRANTED,
    LEASE_REFUSED,
)
from devicepool.workflows.reconciler.lease_messages import LeaseAnswer

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = [
    "BUSY_SECONDS",
    "QUERIES_IN_FLIGHT",
    "UPDATES_IN_FLIGHT",
    "Unanswered",
    "cancelling",
    "handle_of",
    "lease_errors",
    "per_pool",
    "query",
    "query_gate",
    "signal",
    "turned_away",
    "update",
    "update_gate",
]

# Lease updates one client keeps in flight on one pool (Temporal allows 10 per workflow:
# two left for other clients and the CLI), and queries (the server holds one per pool
# while a workflow task runs and turns the others away).
UPDATES_IN_FLIGHT = 8
QUERIES_IN_FLIGHT = 4
# How long a renew, release or claim (or a lease that would not wait so long) is tried
# again while Temporal turns it away.
BUSY_SECONDS = 30.0
# The back-off between those tries: doubled from the first up to the most, each a random
# share (half to all) of it, so that many callers turned away at once come back apart.
BACKOFF_FIRST = 0.2
BACKOFF_MOST = 2.0

T = TypeVar("T")

_ERRORS: dict[str, type[DevicePoolError]] = {
    LEASE_REFUSED: LeaseRefused,
    LEASE_NOT_GRANTED: LeaseNotGranted,
    LEASE_GONE: LeaseGone,
}
# Refusals of an update that did nothing and ask to be sent again: the server's, when the
# worker's workflow task did not take the update up (the run was closing into its
# continue-as-new), and the pool's, past its run's update budget (its hand-over is due).
UNPROCESSED = "UnprocessedUpdate"
_SEND_AGAIN = (UNPROCESSED, LEASE_BUSY)
# Per client, per event loop: what it keeps for each pool (`per_pool`: its gates, its look).
_KEPT: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = weakref.WeakKeyDictionary()
_LOOPS: weakref.WeakKeyDictionary[Any, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


class Unanswered(DevicePoolError):
    """A query the pool could not answer now (`why`): asked again by the caller."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


def turned_away(err: BaseException) -> str | None:
    """Why a call was turned away for now, in Temporal's (or the pool's) words; None when
    it was not.

    RESOURCE_EXHAUSTED is a limit (updates in flight, the query buffer, a rate) or a run
    closing into its continue-as-new; UNAVAILABLE "workflow update was aborted" is the
    server dropping an update it had not accepted, an `UnprocessedUpdate` failure one the
    closing run's worker did not take up, and `LeaseBusy` the pool's own "handing over,
    send it again" (sent again, each lands). None of them means that Temporal cannot be
    reached, nor that the pool refused the lease."""
    if isinstance(err, WorkflowUpdateFailedError):
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.type in _SEND_AGAIN:
            return cause.message.splitlines()[0] if cause.message else cause.type
        return None
    if not isinstance(err, RPCError):
        return None
    said = (err.message or "").strip().splitlines()
    words = said[0] if said else err.status.name if err.status else "unknown"
    if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return words
    if err.status == RPCStatusCode.UNAVAILABLE and "update was aborted" in words.lower():
        return words
    if err.status == RPCStatusCode.FAILED_PRECONDITION and "workflow task failure" in words.lower():
        # WorkflowNotReady: the workflow task that carried the update failed (a worker
        # starved past the SDK's deadlock limit, an eviction) before the update was
        # accepted; sent again under the same id, it lands once.
        return words
    return None


def per_pool(pools: PoolClient, workflow_id: str, what: str, make: Callable[[], T]) -> T:
    """`what` this client keeps for one pool (its gates, its look at the queue), made on
    first use; per event loop (asyncio's locks serve one loop: the CLI runs each command
    in an `asyncio.run` of its own)."""
    loop = asyncio.get_running_loop()
    if _LOOPS.get(pools) is not loop:
        _LOOPS[pools], _KEPT[pools] = loop, {}
    kept = _KEPT[pools]
    if (workflow_id, what) not in kept:
        kept[(workflow_id, what)] = make()
    found: T = kept[(workflow_id, what)]
    return found


def update_gate(pools: PoolClient, handle: WorkflowHandle[Any, Any]) -> asyncio.Semaphore:
    """Taken around each lease update this client sends the pool (`UPDATES_IN_FLIGHT`)."""
    return per_pool(pools, handle.id, "updates", lambda: asyncio.Semaphore(UPDATES_IN_FLIGHT))


def query_gate(pools: PoolClient, handle: WorkflowHandle[Any, Any]) -> asyncio.Semaphore:
    """Taken around each query this client sends the pool (`QUERIES_IN_FLIGHT`)."""
    return per_pool(pools, handle.id, "queries", lambda: asyncio.Semaphore(QUERIES_IN_FLIGHT))


def _backoff() -> Iterator[float]:
    delay = BACKOFF_FIRST
    while True:
        yield random.uniform(delay / 2, delay)
        delay = min(delay * 2, BACKOFF_MOST)


def cancelling() -> bool:
    """Whether the running task is being cancelled. The SDK raises a cancel that lands
    during an update as `WorkflowUpdateRPCTimeoutOrCancelledError`, as it does its RPC
    timeout: told apart here, so that a cancel ends the caller (`asyncio.timeout`, a
    TaskGroup, Ctrl-C) rather than pass for a pool without a worker."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def handle_of(pools: PoolClient, name: str, kind: str | None) -> WorkflowHandle[Any, Any]:
    validate_name(name)
    return pools._client.get_workflow_handle(pools._side(kind).kind.workflow_id(name))


@contextlib.contextmanager
def lease_errors(pools: PoolClient, name: str, kind: str | None) -> Iterator[None]:
    """The pool's refusals of a lease update as `LeaseRefused`, `LeaseNotGranted`,
    `LeaseGone` (its own words after the pool's name); the rest as every update's."""
    with pools._errors(name, writing=True, kind=kind):
        try:
            yield
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if not isinstance(cause, ApplicationError) or cause.type not in _ERRORS:
                raise
            error = _ERRORS[cause.type]
            message = cause.message.splitlines()[0] if cause.message else cause.type
            raise error(f"{pools._side(kind).shown(name)}: {message}") from err


async def update(
    pools: PoolClient,
    handle: WorkflowHandle[Any, Any],
    name: str,
    kind: str | None,
    update: str,
    request: Any,
    *,
    result_type: type[Any] = LeaseAnswer,
    until: float | None = None,
    update_id: str | None = None,
    on_sent: Callable[[], None] | None = None,
) -> Any:
    """The update's answer; tried again (same `update_id`: one outcome, however many
    tries) while Temporal turns it away, until `until` (`time.monotonic()`; default
    `BUSY_SECONDS` from now), then `TemporalBusy`. A cancel while it is in flight is
    raised as `CancelledError` (whether the pool applied the update is not known)."""
    begun = time.monotonic()
    until = begun + BUSY_SECONDS if until is None else until
    update_id = update_id or f"{update}-{uuid.uuid4()}"
    gate = update_gate(pools, handle)
    pauses = _backoff()
    with lease_errors(pools, name, kind):
        while True:
            try:
                async with gate:
                    if on_sent is not None:  # from here on, the pool may apply it
                        on_sent()
                    return await handle.execute_update(
                        update,
                        request,
                        id=update_id,
                        result_type=result_type,
                        rpc_timeout=UPDATE_TIMEOUT,
                    )
            except RPCTimeoutOrCancelledError as err:
                if cancelling():  # the SDK's word for our own cancel: the cancel it is
                    raise asyncio.CancelledError() from err
                raise
            except (RPCError, WorkflowUpdateFailedError) as err:
                what = f"{pools._side(kind).shown(name)}: the {update} update"
                await _again(err, what=what, begun=begun, until=until, pauses=pauses)


async def signal(
    pools: PoolClient,
    handle: WorkflowHandle[Any, Any],
    name: str,
    kind: str | None,
    signal: str,
    arg: Any,
    *,
    until: float | None = None,
    on_sent: Callable[[], None] | None = None,
) -> None:
    """Send the signal; tried again while Temporal turns it away (a rate limit), until
    `until` (default `BUSY_SECONDS` from now), then `TemporalBusy`. A lease signal sent
    twice changes nothing (the pool knows the ask's id; a give-back of what ended is no
    news). A cancel while it is in flight is raised as `CancelledError` (whether it
    arrived is not known)."""
    begun = time.monotonic()
    until = begun + BUSY_SECONDS if until is None else until
    pauses = _backoff()
    with pools._errors(name, writing=True, kind=kind):
        while True:
            try:
                if on_sent is not None:  # from here on, the pool may have it
                    on_sent()
                await handle.signal(signal, arg, rpc_timeout=UPDATE_TIMEOUT)
                return
            except RPCError as err:
                if err.status == RPCStatusCode.CANCELLED and cancelling():
                    raise asyncio.CancelledError() from err
                what = f"{pools._side(kind).shown(name)}: the {signal} signal"
                await _again(err, what=what, begun=begun, until=until, pauses=pauses)


async def _again(
    err: BaseException, *, what: str, begun: float, until: float, pauses: Iterator[float]
) -> None:
    """Pause before `what` is sent again, Temporal having turned it away for now; past
    `until`, `TemporalBusy` naming the cause; what it did not turn away, raised as it is."""
    why = turned_away(err)
    if why is None:
        raise err
    left = until - time.monotonic()
    if left <= 0:
        spent = time.monotonic() - begun
        raise TemporalBusy(f"{what} was turned away for {spent:.1f}s: {why}") from err
    await asyncio.sleep(min(next(pauses), left))


async def query(
    pools: PoolClient,
    handle: WorkflowHandle[Any, Any],
    name: str,
    kind: str | None,
    query: str,
    arg: Any = None,
    *,
    result_type: type[Any],
) -> Any:
    """The query's answer, or `Unanswered` when the pool could not answer now: Temporal
    turned it away (its query buffer full while a workflow task runs), it timed out (no
    worker in time), or the worker failed it (restarting, busy)."""
    async with query_gate(pools, handle):
        with pools._errors(name, kind=kind):
            try:
                if arg is None:  # a query without an argument (`leases`)
                    return await handle.query(
                        query, result_type=result_type, rpc_timeout=QUERY_TIMEOUT
                    )
                return await handle.query(
                    query, arg, result_type=result_type, rpc_timeout=QUERY_TIMEOUT
                )
            except RPCTimeoutOrCancelledError as err:
                raise Unanswered("no worker answered in time") from err
            except WorkflowQueryFailedError as err:
                said = str(err).splitlines()
                raise Unanswered(said[0] if said else "the query failed") from err
            except RPCError as err:
                if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
                    # The SDK raises a query's timeout as it is ("Timeout expired").
                    raise Unanswered(f"no worker answered within {QUERY_TIMEOUT.seconds}s") from err
                why = turned_away(err)
                if why is None:
                    raise
                raise Unanswered(f"Temporal: {why}") from err
