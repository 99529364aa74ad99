"""Leases under load: 200 clients take and give back the devices of one pool of 50.

Starts a Temporal dev server, the emulator as a real HTTP server (devices ready 1 s after
their create) and ONE `devicepool worker` process, as bench/scale.py does; each phase gets a
new DevicePool of `--devices` whose `leases.queue.max` is the number of clients (each can
queue; the default 50 would refuse the rest at once). The clients speak the raw protocol
(workflows/reconciler/lease_messages.py), one of two (`--protocol`):

- `signals` (the default, the Python client's way): signal `lease_ask` under an ask id of
  the client's own (`wait` > 0), the `lease_ticket` query at once (a query sees the signals
  sent before it) and every `--poll` s until it answers the grant (an offer to a queued
  ticket claimed by the same ask sent again), then signal
  `lease_give_back` with the ask's id after holding the device 1-5 s. A signal call that
  fails is sent again, same id, after a jittered back-off (a resend changes nothing);
- `updates`: update `lease`, the `lease_ticket` query every `--poll` s while queued,
  `lease_claim` once offered, update `release` after the hold.

Then again, until the phase ends (a client still waiting 30 s later is stopped). The
clients start spread over `--ramp` s, but in phase 5. Phases:

1. idle devices: `--devices // 2` clients, so every ask finds a free device: grant
   latency (sent -> granted);
2. `--clients` clients for `--seconds`: grants a second, latency (at once / queued), FIFO,
   double grants, history events and Temporal Actions per lease, what the server refused;
3. hold 0 (take and give back at once): what the pool's workflow grants a second when the
   holds do not bound it (phase 2's bound is devices / mean hold, 50 / 3 s = 16.7/s);
4. phase 2 again with the worker SIGKILLed `--kill-at` s in and started again: the same
   checks, and every lease granted was given back by its holder or is still listed;
5. phase 2 with every client starting at once (`--herd-seconds`): 200 asks in the same
   instant (by update: against Temporal's 10 in flight per workflow).

The checks, by update, read the grants from the pool's history (every run of the chain:
the server's own order): each grant's [grantedAt, the release's workflow time] per device
must not overlap another's (`lease` and `lease_claim` results give the grants, `release`
results their ends), and the offers to tickets must go out in the order the tickets were
made. By signal no grant is in the history, and the checks do not replay the Signaled
events through a model of the book: the clients' grants are enough. Double grants: per
device, [`Granted.grantedAt`, the Signaled time of its `lease_give_back`] must not overlap
(the next grant of a device is made in a workflow task after the give-back was recorded);
a new worker that answers a query before its first task runs that task with the killed
worker's last task time (temporalio 1.35; a replay gives the task's own), so overlaps
whose later grant has that time are counted apart.
FIFO: an ask queued first (waited > 0, or still waiting at the end) must not be passed by
an ask whose `lease_ask` comes later in the history, granted strictly before it. Both
ways, the clients' own view (grant received -> release or give-back sent) is checked for
overlaps too; events per lease are the history's events (every run) / grants, Actions per
lease the server's `action` counter over the phase (everything: bench/_actions.py) / grants; a lease
lost is one granted and neither given back nor listed at the end. Refusals are the
Temporal server's own count (its frontend's `service_error_with_type`): the SDK sends a
refused call again by itself, so a client sees only what outlasts its retries. Each phase
also prints the CPU of the worker, the server and the clients, and the worker's workflow
tasks (time to run, evictions): where the time goes when a goal is missed.
`LEASES_BENCH_DUMP=DIR` keeps each phase's histories, worker log and grants there.

    .venv/bin/python bench/leases.py [--protocol signals] [--clients 200] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import signal
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _actions
import httpx
from _results import recorded
from _stack import dev_server
from scale import Proc, Stack, dev_server_pid, emulator, pct, worker_counters
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError

from devicepool.api.names import (
    QUERY_LEASE_TICKET,
    QUERY_LEASES,
    SIGNAL_LEASE_ASK,
    SIGNAL_LEASE_GIVE_BACK,
    TASK_QUEUE,
    UPDATE_LEASE,
    UPDATE_LEASE_CLAIM,
    UPDATE_RELEASE,
    pool_workflow_id,
)
from devicepool.api.v1beta1 import (
    DevicePoolSpec,
    LeaseQueueSpec,
    LeaseSpec,
    ObjectMeta,
    ProviderRef,
)
from devicepool.client._lease_wait import POLL_SECONDS, PollPace
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually, free_port
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.reconciler.lease_messages import (
    LeaseAnswer,
    LeaseAsk,
    LeaseRequest,
    LeasesView,
    ReleaseAnswer,
    ReleaseRequest,
    TicketRef,
)

# What a client asks for: a lease of 10 minutes (it releases long before), waiting up to 5.
LEASE_FOR = "10m"
WAIT_FOR = "5m"
UNPROCESSED = "UnprocessedUpdate"
# The server calls whose refusals are counted.
CALLS = {
    "UpdateWorkflowExecution",
    "PollWorkflowExecutionUpdate",
    "QueryWorkflow",
    "SignalWorkflowExecution",
}
# A workflow task no worker completed (the sticky worker was killed, or it failed).
LOST_TASK = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
}
# The SDK counters read from the worker's /metrics after each phase.
WORKER_COUNTERS = (
    "temporal_sticky_cache_miss",
    "temporal_sticky_cache_total_forced_eviction",
    "temporal_workflow_task_replay_latency_seconds_count",
    "temporal_workflow_task_replay_latency_seconds_sum",
    "temporal_workflow_task_execution_failed",
    "temporal_workflow_task_execution_latency_seconds_count",
    "temporal_workflow_task_execution_latency_seconds_sum",
    "temporal_workflow_task_schedule_to_start_latency_seconds_count",
    "temporal_workflow_task_schedule_to_start_latency_seconds_sum",
)


# ---------------------------------------------------------------- the clients


@dataclass
class Grant:
    """One lease a client held, as it saw it (client times: `time.time()`)."""

    lease: str
    device: str
    queued: bool
    # `lease` sent -> granted (for a ticket: -> the claim answered); by signal: `lease_ask`
    # sent -> the `lease_ticket` answer that has the grant
    latency: float
    received: float
    release_sent: float = 0.0
    reason: str = ""  # the release's answer ("Released": ended by its holder's word)
    ask: str = ""  # by signal: the ask's id (its ticket's, its give-back's)
    granted_at: datetime | None = None  # by signal: `Granted.granted_at` (workflow time)
    waited: float = 0.0  # by signal: `Granted.waited_seconds`


@dataclass
class Tally:
    grants: list[Grant] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)  # RPC errors, by status code
    timeouts: int = 0  # update calls that returned before the update was accepted
    queries_failed: Counter[str] = field(default_factory=Counter)
    not_granted: Counter[str] = field(default_factory=Counter)  # validator refusals, by type
    tickets_ended: Counter[str] = field(default_factory=Counter)
    updates: Counter[str] = field(default_factory=Counter)
    signals: Counter[str] = field(default_factory=Counter)  # sent (a resend counts once)
    queries: int = 0
    asks: list[str] = field(default_factory=list)  # by signal: every ask id sent, in order


class Protocol:
    """The raw updates and the query, sent again when a call outlasts the SDK's retries: with
    the same update id (the server answers one it has seen with its outcome), but a new one
    after `UnprocessedUpdate` (that id's outcome is the refusal)."""

    def __init__(self, handle: WorkflowHandle[Any, Any], tally: Tally) -> None:
        self.handle = handle
        self.tally = tally

    async def update(self, name: str, arg: Any, result_type: type, update_id: str) -> Any:
        delay, uid, fresh = 0.05, update_id, 0
        while True:
            try:
                answer = await self.handle.execute_update(
                    name, arg, id=uid, result_type=result_type
                )
                self.tally.updates[name] += 1
                return answer
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                # The SDK says a cancelled call so too: the client stops then.
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from None
                self.tally.timeouts += 1
            except RPCError as err:
                self.tally.refused[f"{err.status.name}: {_short(err.message)}"] += 1
            except WorkflowUpdateFailedError as err:
                # The server's verdict on an update no handler saw (the worker completed the
                # task it came in without it).
                if _failure_type(err) != UNPROCESSED:
                    raise
                self.tally.refused[UNPROCESSED] += 1
                fresh += 1
                uid = f"{update_id}-{fresh}"
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 1.0)

    async def signal(self, name: str, arg: Any) -> None:
        """A signal, sent again after a failed call (a refusal, a timeout) with jittered
        back-off: the ask's or the give-back's id is in `arg`, so a resend changes nothing."""
        delay = 0.05
        while True:
            try:
                await self.handle.signal(name, arg)
                self.tally.signals[name] += 1
                return
            except RPCError as err:
                self.tally.refused[f"{err.status.name}: {_short(err.message)}"] += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 1.0)

    async def ticket(self, ticket: str) -> LeaseAnswer:
        while True:
            try:
                answer: LeaseAnswer = await self.handle.query(
                    QUERY_LEASE_TICKET, TicketRef(ticket=ticket), result_type=LeaseAnswer
                )
                self.tally.queries += 1
                return answer
            except (RPCError, WorkflowQueryFailedError) as err:
                self.tally.queries_failed[_short(str(err))] += 1
                await asyncio.sleep(0.5)


def _short(message: str) -> str:
    return message.split(":", 1)[0][:60]


def _failure_type(err: WorkflowUpdateFailedError) -> str:
    cause = err.cause
    return cause.type or "?" if isinstance(cause, ApplicationError) else type(cause).__name__


async def one_client(
    name: str,
    proto: Protocol,
    *,
    hold: tuple[float, float],
    poll: float,
    until: float,
    rng: random.Random,
    start_after: float = 0.0,
) -> None:
    """Lease, hold, release, until `until` (monotonic); a queued client stays to its grant.
    `name` is unique to the phase: the server answers an update id it saw with its old
    answer."""
    tally, seq = proto.tally, 0
    await asyncio.sleep(start_after)
    while time.monotonic() < until:
        seq += 1
        uid = f"{name}-{seq}"
        sent = time.time()
        request = LeaseRequest(holder=name, duration=LEASE_FOR, wait=WAIT_FOR)
        try:
            answer = await proto.update(UPDATE_LEASE, request, LeaseAnswer, f"{uid}-lease")
        except WorkflowUpdateFailedError as err:
            tally.not_granted[_failure_type(err)] += 1
            await asyncio.sleep(rng.uniform(0.5, 1.5))
            continue
        queued = answer.granted is None
        if queued:
            answer = await wait_for_offer(proto, answer, poll=poll, uid=uid)
            if answer is None:
                continue
        assert answer.granted is not None
        got = answer.granted
        grant = Grant(got.lease, got.device, queued, time.time() - sent, received=time.time())
        tally.grants.append(grant)
        await asyncio.sleep(rng.uniform(*hold))
        grant.release_sent = time.time()
        released = await proto.update(
            UPDATE_RELEASE, ReleaseRequest(lease=got.lease), ReleaseAnswer, f"{uid}-release"
        )
        grant.reason = released.reason


async def asking_client(
    name: str,
    proto: Protocol,
    *,
    hold: tuple[float, float],
    poll: float,
    until: float,
    rng: random.Random,
    start_after: float = 0.0,
) -> None:
    """`one_client` by signal: `lease_ask` under an id of its own, `lease_ticket` at once
    (a query sees the signals sent before it) and every `poll` s until the answer has the
    grant or an end; a grant `offered` to its queued ticket is claimed by sending the same
    ask again (as the Python client does); hold, `lease_give_back` by the ask's id."""
    tally, seq = proto.tally, 0
    await asyncio.sleep(start_after)
    while time.monotonic() < until:
        seq += 1
        ask = f"{name}-{seq}"
        tally.asks.append(ask)
        sent = time.time()
        request = LeaseAsk(ask=ask, holder=name, duration=LEASE_FOR, wait=WAIT_FOR)
        await proto.signal(SIGNAL_LEASE_ASK, request)
        seen, queued = await proto.ticket(ask), False
        pace = PollPace()
        while seen.granted is None and seen.ended is None:
            queued = True
            # As the client: at half the time the queue takes to bring it to the head.
            every = pace.next(seen.position or 1, time.monotonic())
            await asyncio.sleep(poll * every / POLL_SECONDS)
            seen = await proto.ticket(ask)
        if seen.granted is None:
            tally.tickets_ended[seen.ended or "?"] += 1
            await asyncio.sleep(rng.uniform(0.5, 1.5))
            continue
        if seen.offered:  # the claim: the same ask again, then read again (as the client)
            await proto.signal(SIGNAL_LEASE_ASK, request)
            seen = await proto.ticket(ask)
            if seen.granted is None or seen.offered:  # too late: the offer ended meanwhile
                tally.tickets_ended[f"claim missed: {seen.ended or 'still offered'}"] += 1
                continue
        got = seen.granted
        received = time.time()
        grant = Grant(
            got.lease,
            got.device,
            queued or got.waited_seconds > 0,
            received - sent,
            received=received,
            ask=ask,
            granted_at=_naive(got.granted_at),
            waited=got.waited_seconds,
        )
        tally.grants.append(grant)
        await asyncio.sleep(rng.uniform(*hold))
        grant.release_sent = time.time()
        await proto.signal(SIGNAL_LEASE_GIVE_BACK, ReleaseRequest(lease=ask))
        grant.reason = "GivenBack"


async def wait_for_offer(
    proto: Protocol, answer: LeaseAnswer, *, poll: float, uid: str
) -> LeaseAnswer | None:
    """Poll the ticket until it is offered, then claim it; None: the ticket ended."""
    ticket = answer.ticket
    assert ticket is not None
    while True:
        await asyncio.sleep(poll)
        seen = await proto.ticket(ticket)
        if seen.granted is not None:
            try:
                claimed: LeaseAnswer = await proto.update(
                    UPDATE_LEASE_CLAIM, TicketRef(ticket=ticket), LeaseAnswer, f"{uid}-claim"
                )
            except WorkflowUpdateFailedError as err:
                proto.tally.tickets_ended[f"claim refused: {_failure_type(err)}"] += 1
                return None
            return claimed
        if seen.ended is not None:
            proto.tally.tickets_ended[seen.ended] += 1
            return None


# ---------------------------------------------------------------- the server's own count


async def server_errors(port: int) -> Counter[str]:
    """The Temporal server's refusals of the update and query calls (its frontend's
    `service_error_with_type`: what a client was answered), by call and error type."""
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    found: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("service_error_with_type{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("{", 1)[1].rsplit("}", 1)[0]))
        if labels.get("service_name") != "frontend" or labels.get("operation") not in CALLS:
            continue
        kind = labels.get("error_type", "").removeprefix("serviceerror_")
        found[f"{labels['operation']} {kind}"] += int(float(line.rsplit(" ", 1)[1]))
    return found


# ---------------------------------------------------------------- the pool's history


@dataclass
class HistoryGrant:
    lease: str
    device: str
    granted_at: datetime
    queued_at: datetime | None
    ended_at: datetime | None = None  # the release's workflow time (None: not released)
    reason: str = ""


@dataclass
class Book:
    """What the pool's history says happened, in the server's order."""

    events: int = 0
    runs: int = 0
    grants: dict[str, HistoryGrant] = field(default_factory=dict)
    releases_not_held: Counter[str] = field(default_factory=Counter)
    # `lease` answers that were a ticket, and the tickets' order (their creation time).
    tickets: int = 0
    last_run: str = ""
    # By signal: each ask id's place among the `lease_ask` signals (its first send), and
    # the workflow time of each first `lease_give_back` of an id (its Signaled event).
    asked: dict[str, int] = field(default_factory=dict)
    given_back: dict[str, datetime] = field(default_factory=dict)
    signals: Counter[str] = field(default_factory=Counter)  # Signaled events, resends too
    # The start of the last workflow task before one timed out or failed (a worker lost):
    # the next worker's first task may run with this workflow time (see `report`).
    lost_at: set[datetime] = field(default_factory=set)


def _payload(payloads: Any) -> Any:
    return json.loads(payloads[0].data) if payloads else None


async def read_chain(client: Client, workflow_id: str, first_run: str, skip: int) -> Book:
    """The runs of `workflow_id` from `first_run` on (its first `skip` events left out)."""
    book, run = Book(), first_run
    pending: dict[str, tuple[str, Any]] = {}
    while run:
        history = await client.get_workflow_handle(workflow_id, run_id=run).fetch_history()
        events = history.events[skip:] if run == first_run else history.events
        book.events += len(events)
        book.runs += 1
        book.last_run, run = run, ""
        task_time: datetime | None = None
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                task_time = event.event_time.ToDatetime().replace(tzinfo=None)
            elif kind in LOST_TASK and task_time is not None:
                book.lost_at.add(task_time)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                attrs = event.workflow_execution_update_accepted_event_attributes
                request = attrs.accepted_request
                pending[request.meta.update_id] = (
                    request.input.name,
                    _payload(request.input.args.payloads),
                )
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
                attrs2 = event.workflow_execution_update_completed_event_attributes
                name, _ = pending.pop(attrs2.meta.update_id, ("?", None))
                if not attrs2.outcome.HasField("success"):
                    continue
                answer = _payload(attrs2.outcome.success.payloads) or {}
                _book_answer(book, name, answer, task_time)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                _book_signal(book, event)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs3 = event.workflow_execution_continued_as_new_event_attributes
                run = attrs3.new_execution_run_id
    return book


def _book_signal(book: Book, event: Any) -> None:
    attrs = event.workflow_execution_signaled_event_attributes
    name = attrs.signal_name
    book.signals[name] += 1
    args = _payload(attrs.input.payloads) or {}
    if name == SIGNAL_LEASE_ASK:
        book.asked.setdefault(str(args.get("ask", "")), len(book.asked))
    elif name == SIGNAL_LEASE_GIVE_BACK:
        at = event.event_time.ToDatetime().replace(tzinfo=None)
        book.given_back.setdefault(str(args.get("lease", "")), at)


def _book_answer(book: Book, name: str, answer: dict[str, Any], now: datetime | None) -> None:
    granted = answer.get("granted")
    if name in (UPDATE_LEASE, UPDATE_LEASE_CLAIM) and granted:
        if granted["lease"] not in book.grants:
            at = _time(granted["grantedAt"])
            waited = float(granted.get("waitedSeconds") or 0.0)
            queued = at - timedelta(seconds=waited) if name == UPDATE_LEASE_CLAIM else None
            book.grants[granted["lease"]] = HistoryGrant(
                granted["lease"], granted["device"], at, queued
            )
    elif name == UPDATE_LEASE and answer.get("ticket"):
        book.tickets += 1


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)


def _naive(when: datetime) -> datetime:
    """UTC without a zone, as the history's times are read here."""
    return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when


def signal_grants(tally: Tally, book: Book, view: LeasesView) -> None:
    """By signal, no grant is in the history: the clients' grants, each [grantedAt, its
    `lease_give_back`'s Signaled time], and the leases listed at the end that no client
    heard of (a client stopped while it polled), as `book.grants`."""
    for grant in tally.grants:
        assert grant.granted_at is not None
        queued_at = grant.granted_at - timedelta(seconds=grant.waited) if grant.queued else None
        held = HistoryGrant(grant.lease, grant.device, grant.granted_at, queued_at)
        ended = book.given_back.get(grant.ask)
        if ended is not None:
            held.ended_at, held.reason = ended, "Released"
        book.grants[grant.lease] = held
    for lease in view.leases:
        if lease.id not in book.grants:
            queued_at = None if lease.queued_at is None else _naive(lease.queued_at)
            book.grants[lease.id] = HistoryGrant(
                lease.id, lease.device, _naive(lease.granted_at), queued_at
            )
    book.tickets = sum(1 for g in tally.grants if g.queued)


async def read_releases(
    client: Client, workflow_id: str, first_run: str, skip: int, book: Book
) -> None:
    """Each `release` update's lease (its request) and workflow time (its task's start)."""
    run = first_run
    while run:
        history = await client.get_workflow_handle(workflow_id, run_id=run).fetch_history()
        events = history.events[skip:] if run == first_run else history.events
        run = ""
        task_time: datetime | None = None
        asked: dict[str, str] = {}
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                task_time = event.event_time.ToDatetime().replace(tzinfo=None)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                request = event.workflow_execution_update_accepted_event_attributes.accepted_request
                if request.input.name == UPDATE_RELEASE:
                    args = _payload(request.input.args.payloads) or {}
                    asked[request.meta.update_id] = str(args.get("lease", ""))
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
                attrs = event.workflow_execution_update_completed_event_attributes
                lease_id = asked.pop(attrs.meta.update_id, None)
                if lease_id is None or not attrs.outcome.HasField("success"):
                    continue
                reason = (_payload(attrs.outcome.success.payloads) or {}).get("reason", "?")
                grant = book.grants.get(lease_id)
                if grant is None or grant.ended_at is not None:
                    book.releases_not_held[reason] += 1
                    continue
                grant.ended_at, grant.reason = task_time, reason
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                run = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )


async def current_run(client: Client, workflow_id: str) -> tuple[str, int]:
    """The current run of `workflow_id` and its history's length now."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    described = await client.get_workflow_handle(workflow_id).describe()
    return described.run_id, len(history.events)


def _near(when: datetime, times: set[datetime]) -> bool:
    """Within a millisecond of one of `times` (an event's nanoseconds against the SDK's
    rounding of the same instant)."""
    return any(abs(when - t) <= timedelta(milliseconds=1) for t in times)


def overlaps(grants: list[HistoryGrant]) -> list[tuple[HistoryGrant, HistoryGrant]]:
    """Pairs of grants of one device whose [granted_at, ended_at] overlap (open: still held)."""
    found = []
    by_device: dict[str, list[HistoryGrant]] = defaultdict(list)
    for grant in grants:
        by_device[grant.device].append(grant)
    for held in by_device.values():
        held.sort(key=lambda g: g.granted_at)
        for earlier, later in itertools.pairwise(held):
            if earlier.ended_at is None or later.granted_at < earlier.ended_at:
                found.append((earlier, later))
    return found


def client_overlaps(grants: list[Grant]) -> int:
    """Two clients that held one device at once, as they saw it (grant received -> release sent)."""
    count = 0
    by_device: dict[str, list[Grant]] = defaultdict(list)
    for grant in grants:
        by_device[grant.device].append(grant)
    for held in by_device.values():
        held.sort(key=lambda g: g.received)
        for earlier, later in itertools.pairwise(held):
            end = earlier.release_sent or float("inf")
            if later.received < end:
                count += 1
    return count


def ask_fifo_breaks(
    book: Book, granted: dict[str, tuple[datetime, bool]], waiting: set[str]
) -> int:
    """By signal: pairs of asks where a later `lease_ask` (the history's order) was granted
    strictly before an earlier one that was queued then (granted later, or still `waiting`
    at the end). `granted`: ask id -> (grantedAt, queued first); an ask granted at once
    found nothing free, so no earlier ask could have been served then."""
    never = datetime.max
    order = sorted(
        (n, *granted.get(ask, (never, True)))
        for ask, n in book.asked.items()
        if ask in granted or ask in waiting
    )
    breaks = 0
    for i, (_, early_at, early_queued) in enumerate(order):
        if early_queued:
            breaks += sum(1 for _, late_at, _ in order[i + 1 :] if late_at < early_at)
    return breaks


def fifo_breaks(grants: list[HistoryGrant]) -> int:
    """Offers that went to a ticket younger than one still waiting for a later offer, and
    grants at once while an older ticket still waited (one selector: all the clients')."""
    queued = sorted((g for g in grants if g.queued_at is not None), key=lambda g: g.granted_at)
    breaks = 0
    for i, early in enumerate(queued):
        assert early.queued_at is not None
        for late in queued[i + 1 :]:
            assert late.queued_at is not None
            if late.granted_at > early.granted_at and late.queued_at < early.queued_at:
                breaks += 1
    for now in (g for g in grants if g.queued_at is None):
        for ticket in queued:
            assert ticket.queued_at is not None
            if ticket.queued_at < now.granted_at < ticket.granted_at:
                breaks += 1
    return breaks


# ---------------------------------------------------------------- a phase


@dataclass
class Phase:
    name: str
    clients: int
    seconds: float
    hold: tuple[float, float]
    ramp: float  # the clients start spread over this many seconds
    kill_at: float | None = None


async def run_phase(
    stack: Stack,
    proto_client: Client,
    pool: str,
    phase: Phase,
    args: argparse.Namespace,
    *,
    server_metrics: int,
) -> None:
    wid = pool_workflow_id(pool)
    run, skip = await current_run(stack.client, wid)
    tally = Tally()
    proto = Protocol(proto_client.get_workflow_handle(wid), tally)
    procs = {
        "worker": Proc(stack.workers[-1].pid),
        "Temporal server": Proc(dev_server_pid()),
        "clients": Proc(os.getpid()),
    }
    cpu0 = {what: p.cpu_seconds() for what, p in procs.items()}
    counters0 = await worker_counters(stack, WORKER_COUNTERS)
    errors0 = await server_errors(server_metrics)
    actions0 = await _actions.scrape(server_metrics)
    rng = random.Random(args.seed)
    start, started = time.monotonic(), time.time()
    until = start + phase.seconds
    client = asking_client if args.protocol == "signals" else one_client
    clients = [
        asyncio.ensure_future(
            client(
                f"p{phase.name.split()[0]}-c{i}",
                proto,
                hold=phase.hold,
                poll=args.poll,
                until=until,
                rng=random.Random(rng.random()),
                start_after=phase.ramp * i / phase.clients,
            )
        )
        for i in range(phase.clients)
    ]
    killed = restarted = None
    try:
        if phase.kill_at is not None:
            await asyncio.sleep(phase.kill_at)
            victim = stack.workers[-1]
            victim.send_signal(signal.SIGKILL)
            killed = time.time()
            await asyncio.to_thread(victim.wait, 30)
            gone = stack.workers.index(victim)
            del stack.workers[gone], stack.metrics_ports[gone]
            stack.start_worker(args.offline_after)
            await stack.workers_ready()
            restarted = time.time()
        done, pending = await asyncio.wait(clients, timeout=phase.seconds + 30)
    finally:
        # Clients still waiting (a pool that fell behind) stop here: bounded, and none
        # goes on calling a server that is stopping.
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
    failed = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
    elapsed = time.monotonic() - start
    cpu = {
        what: p.cpu_seconds() - cpu0[what]
        for what, p in procs.items()
        if what != "worker" or phase.kill_at is None
    }
    counters = await worker_counters(stack, WORKER_COUNTERS)
    errors = await server_errors(server_metrics)
    errors.subtract(errors0)
    actions = _actions.since(actions0, await _actions.scrape(server_metrics))
    handle = stack.client.get_workflow_handle(wid)
    try:
        view: LeasesView = await handle.query(QUERY_LEASES, result_type=LeasesView)
    except RPCError:
        if os.environ.get("LEASES_BENCH_DUMP"):  # what the worker said, before it is gone
            folder = Path(os.environ["LEASES_BENCH_DUMP"])
            folder.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - debugging only
            for log in stack.tmp.glob("worker-*.log"):
                (folder / f"failed-{log.name}").write_bytes(log.read_bytes())
            history = await handle.fetch_history()
            (folder / f"failed-{wid.replace('/', '-')}.json").write_text(history.to_json())
        raise
    book = await read_chain(stack.client, wid, run, skip)
    if args.protocol == "signals":
        signal_grants(tally, book, view)
        by_ask = {g.ask: (g.granted_at, g.queued) for g in tally.grants if g.granted_at}
        for lease in view.leases:
            if lease.ticket and lease.ticket not in by_ask:
                by_ask[lease.ticket] = (_naive(lease.granted_at), lease.queued_at is not None)
        fifo = ask_fifo_breaks(book, by_ask, {t.id for t in view.tickets})
    else:
        await read_releases(stack.client, wid, run, skip, book)
        fifo = fifo_breaks(list(book.grants.values()))
    if os.environ.get("LEASES_BENCH_DUMP"):
        await dump(
            stack.client, wid, run, Path(os.environ["LEASES_BENCH_DUMP"]), phase, tally, stack.tmp
        )
    report(
        phase,
        tally,
        book,
        view,
        fifo=fifo,
        elapsed=elapsed,
        window_end=started + phase.seconds,
        devices=args.devices,
        cpu=cpu,
        counters={k: counters[k] - counters0.get(k, 0.0) for k in counters}
        if phase.kill_at is None
        else None,
        server_refused=+errors,
        actions=actions,
        killed=killed,
        restarted=restarted,
        pending=len(pending),
        failed=failed,
    )


def report(
    phase: Phase,
    tally: Tally,
    book: Book,
    view: LeasesView,
    *,
    fifo: int,
    elapsed: float,
    cpu: dict[str, float],
    counters: dict[str, float] | None,
    server_refused: Counter[str],
    actions: Counter[str],
    killed: float | None,
    restarted: float | None,
    pending: int,
    failed: list[BaseException | None],
    window_end: float,
    devices: int,
) -> None:
    grants = list(book.grants.values())
    at_once = [g.latency for g in tally.grants if not g.queued]
    queued = [g.latency for g in tally.grants if g.queued]
    mean_hold = sum(phase.hold) / 2
    # The rate over the phase's own window (the tail, clients finishing, is left out).
    ends = window_end
    in_window = sum(1 for g in grants if g.granted_at.replace(tzinfo=UTC).timestamp() <= ends)
    holders = min(phase.clients, devices)
    bound = (
        f"; these holds bound it at {holders} / {mean_hold:g} s = {holders / mean_hold:.1f}/s"
        if mean_hold
        else ""
    )
    print(
        f"[{phase.name}] {phase.clients} clients (starting over {phase.ramp:g} s), "
        f"{phase.seconds:g} s, holding {phase.hold[0]:g}-{phase.hold[1]:g} s: "
        f"{in_window} grants in the {phase.seconds:g} s, {in_window / phase.seconds:.1f}/s "
        f"(goal >= 20/s{bound}); {len(grants)} in all, by {elapsed:.0f} s",
        flush=True,
    )
    if at_once:
        print(
            f"    granted at once {len(at_once)}: latency p50 {1000 * pct(at_once, 0.5):.0f} ms, "
            f"p95 {1000 * pct(at_once, 0.95):.0f} ms, max {1000 * max(at_once):.0f} ms "
            "(goal p95 <= 1000 ms)",
            flush=True,
        )
    by_signal = bool(tally.signals)
    if queued:
        what = "lease_ask sent -> grant read" if by_signal else "lease sent -> claim answered"
        print(
            f"    queued first {len(queued)} ({book.tickets} tickets): {what} "
            f"p50 {pct(queued, 0.5):.1f} s, p95 {pct(queued, 0.95):.1f} s, "
            f"max {max(queued):.1f} s",
            flush=True,
        )
    found = overlaps(grants)
    # By signal, a grant made in the new worker's first task after the old one was killed
    # was seen to carry the workflow time of the old worker's last task (not the time of
    # the task that made it, which a replay of the same history gives): counted apart.
    # The grants themselves are in order (a replay makes the same leases in the same order,
    # and the clients saw no overlap).
    stale = [x for x in found if by_signal and _near(x[1].granted_at, book.lost_at)]
    pairs = [x for x in found if x not in stale]
    still = {x.id for x in view.leases}
    unreleased = [g for g in grants if g.ended_at is None and g.lease not in still]
    not_by_holder = Counter(g.reason for g in grants if g.ended_at and g.reason != "Released")
    client_known = {g.lease for g in tally.grants}
    unknown = [g for g in grants if g.lease not in client_known]
    history = "grantedAt -> lease_give_back signaled" if by_signal else "history, every grant"
    if stale:
        history += (
            f"; and {len(stale)} whose grantedAt is the time of the killed worker's last "
            "task, stale"
        )
    print(
        f"    devices held by two leases at once: {len(pairs)} ({history}), "
        f"{client_overlaps(tally.grants)} (as the clients saw it); FIFO order broken "
        f"{fifo} times",
        flush=True,
    )
    print(
        f"    leases lost: {len(unreleased)} granted and neither released nor listed, "
        f"{sum(not_by_holder.values())} ended otherwise {dict(not_by_holder) or ''}, "
        f"{len(unknown)} granted that no client heard of; {len(still)} listed at the end",
        flush=True,
    )
    sent = tally.signals if by_signal else tally.updates
    in_history = (
        f" ({', '.join(f'{k} {v}' for k, v in sorted(book.signals.items()))} signaled)"
        if by_signal
        else ""
    )
    print(
        f"    history: {book.events} events over {book.runs} run(s), "
        f"{book.events / max(1, len(grants)):.1f} a lease (goal <= 6); "
        + ("signals " if by_signal else "updates ")
        + ", ".join(f"{k} {v}" for k, v in sorted(sent.items()))
        + in_history
        + f"; lease_ticket queries {tally.queries}",
        flush=True,
    )
    by_category = _actions.categorise(actions)
    print(
        f"    Temporal Actions (the server's `action` counter, everything in the phase): "
        f"{sum(by_category.values())}, {sum(by_category.values()) / max(1, len(grants)):.1f} "
        f"a lease; a lease: {_actions.breakdown(by_category, scale=1 / max(1, len(grants)))}",
        flush=True,
    )

    def refused(call: str) -> str:
        found = {k.split()[1]: v for k, v in server_refused.items() if k.startswith(call)}
        listed = f" ({', '.join(f'{k} {v}' for k, v in found.items())})" if found else ""
        return f"{sum(found.values())}{listed}"

    print(
        f"    refused by the server: updates {refused('UpdateWorkflow')} (the SDK sends them "
        f"again), signals {refused('SignalWorkflow')}, queries {refused('QueryWorkflow')}",
        flush=True,
    )
    surfaced = sum(tally.refused.values()) + tally.timeouts
    print(
        f"    what reached the clients: {surfaced} refusals past the SDK's retries"
        + (f" ({dict(tally.refused)}, {tally.timeouts} timeouts)" if surfaced else "")
        + f", {sum(tally.queries_failed.values())} failed queries; lease refused by its "
        f"validator {dict(tally.not_granted) or 0}; tickets ended {dict(tally.tickets_ended) or 0}",
        flush=True,
    )
    print(
        "    CPU-s: "
        + ", ".join(f"{what} {s:.1f}" for what, s in cpu.items())
        + f" ({elapsed:.0f} s, 2 cores shared)",
        flush=True,
    )
    if counters:
        tasks = counters["temporal_workflow_task_execution_latency_seconds_count"]
        ran = counters["temporal_workflow_task_execution_latency_seconds_sum"]
        waited = counters["temporal_workflow_task_schedule_to_start_latency_seconds_sum"]
        started = counters["temporal_workflow_task_schedule_to_start_latency_seconds_count"]
        print(
            f"    worker: {tasks:.0f} workflow tasks, {1000 * ran / max(tasks, 1):.1f} ms each "
            f"to run, {1000 * waited / max(started, 1):.1f} ms each waiting to start; "
            f"{counters['temporal_workflow_task_replay_latency_seconds_count']:.0f} replays "
            f"({counters['temporal_workflow_task_replay_latency_seconds_sum']:.1f} s), "
            f"cache misses {counters['temporal_sticky_cache_miss']:.0f}, forced evictions "
            f"{counters['temporal_sticky_cache_total_forced_eviction']:.0f}, failed tasks "
            f"{counters['temporal_workflow_task_execution_failed']:.0f}",
            flush=True,
        )
    if killed is not None and restarted is not None:
        after = sorted(g.received for g in tally.grants if g.received > killed)
        first = after[0] - killed if after else float("nan")
        print(
            f"    worker SIGKILLed {phase.kill_at:g} s in, a new one ready "
            f"{restarted - killed:.1f} s later; first grant {first:.1f} s after the kill",
            flush=True,
        )
    if pending or any(failed):
        print(f"    clients unfinished {pending}, failed {[repr(e) for e in failed if e]}")
    for earlier, later in pairs[:5]:
        print(f"    DOUBLE GRANT {earlier} / {later}", flush=True)
    for grant in unreleased[:5]:
        print(f"    LOST {grant}", flush=True)


async def dump(
    client: Client, wid: str, run: str, folder: Path, phase: Phase, tally: Tally, stack_tmp: Path
) -> None:
    """Debugging: the phase's histories and the clients' grants, as JSON files."""
    folder.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - debugging only
    tag = phase.name.split()[0]
    while run:
        history = await client.get_workflow_handle(wid, run_id=run).fetch_history()
        (folder / f"{tag}-{run}.json").write_text(history.to_json())
        run = ""
        last = history.events[-1]
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    for log in stack_tmp.glob("worker-*.log"):  # noqa: ASYNC240 - debugging only
        (folder / f"{tag}-{log.name}").write_bytes(log.read_bytes())
    grants = [vars(g) for g in tally.grants]
    (folder / f"{tag}-clients.json").write_text(json.dumps(grants, indent=1, default=str))


# ---------------------------------------------------------------- main


async def start_leasable_pool(client: Client, name: str, devices: int, queue: int) -> None:
    spec = DevicePoolSpec(
        platform="android",
        region="us-west",
        os_version="14",
        replicas=devices,
        provider=ProviderRef(account="default"),
        leases=LeaseSpec(queue=LeaseQueueSpec(max=queue)),
    )
    await client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name=name), spec=spec),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


async def ready(stack: Stack, name: str, devices: int) -> None:
    handle = stack.client.get_workflow_handle(pool_workflow_id(name))

    async def all_ready() -> bool:
        status = await handle.query("status")
        return bool(status["readyDevices"] == devices)

    await eventually(all_ready, timeout=300, what=f"{devices} ready devices", every=0.5)


async def delete_leased(stack: Stack, clients: Client, args: argparse.Namespace) -> None:
    """A pool deleted (`--force`) while every device is leased and tickets wait: its leases
    and tickets end, every device is terminated, none is created twice, and the provider
    bills nothing after (the emulator's own counts)."""
    from devicepool.client.pool_client import PoolClient

    name, devices = "leases-deleted", args.devices

    async def none_live() -> bool:  # the phases' pools, deleted, gone first: counts are ours
        return bool((await stack.http.get("/_emulator/stats")).json()["devices"]["live"] == 0)

    await eventually(none_live, timeout=120, what="the earlier pools' devices gone", every=0.5)
    before = (await stack.http.get("/_emulator/stats")).json()
    await start_leasable_pool(stack.client, name, devices, args.clients)
    await ready(stack, name, devices)
    pools = PoolClient(clients)
    held = await asyncio.gather(
        *(pools.acquire_lease(name, duration="1h", holder=f"held-{i}") for i in range(devices))
    )
    waiting = [
        asyncio.create_task(pools.acquire_lease(name, wait="5m", holder=f"queued-{i}"))
        for i in range(min(args.clients, 50))
    ]
    handle = stack.client.get_workflow_handle(pool_workflow_id(name))

    async def all_queued() -> bool:
        status = await handle.query("status")
        return bool(status["leasesQueued"] == len(waiting))

    await eventually(all_queued, timeout=60, what="the tickets queued", every=0.2)
    t0 = time.monotonic()
    await pools.delete(name, force=True)
    with contextlib.suppress(WorkflowFailureError):  # a deleted pool ends cancelled
        await handle.result()
    closed = time.monotonic() - t0
    status = (await handle.describe()).status
    result = status.name if status is not None else "?"
    ended = await asyncio.gather(*waiting, return_exceptions=True)
    refused = Counter(type(e).__name__ for e in ended if isinstance(e, BaseException))

    async def none_left() -> bool:
        stats = (await stack.http.get("/_emulator/stats")).json()
        return name not in stats["devices"]["byPool"]

    await eventually(none_left, timeout=120, what=f"no device of {name} left", every=0.5)
    gone = time.monotonic() - t0
    after = (await stack.http.get("/_emulator/stats")).json()
    created = after["creates"]["accepted"] - before["creates"]["accepted"]
    terminated = after["terminations"] - before["terminations"]
    print(
        f"[deleted while leased] a pool of {devices}, every device leased ({len(held)}) and "
        f"{len(waiting)} tickets waiting, deleted with --force: workflow closed in "
        f"{closed:.1f} s ({result}), its devices gone from the provider in {gone:.1f} s; "
        f"creates {created} (devices {devices}), terminations {terminated}, left at the "
        f"provider 0; the waiters got {dict(refused) or 'nothing'}",
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    random.seed(args.seed)
    hold = (args.hold_min, args.hold_max)
    ramp, idle = args.ramp, max(1, args.devices // 2)
    phases = []
    if args.idle_seconds:
        phases.append(Phase("1 idle devices", idle, args.idle_seconds, hold, ramp))
    if args.seconds:
        phases.append(Phase(f"2 {args.clients} clients", args.clients, args.seconds, hold, ramp))
    if args.capacity_seconds:
        phases.append(Phase("3 hold 0", args.clients, args.capacity_seconds, (0.0, 0.0), ramp))
    if args.kill_at and args.seconds:
        phases.append(
            Phase("4 worker killed", args.clients, args.seconds, hold, ramp, args.kill_at)
        )
    if args.herd_seconds:
        phases.append(Phase("5 all at once", args.clients, args.herd_seconds, hold, 0.0))
    how = (
        "asking by signal (lease_ask, lease_give_back)"
        if args.protocol == "signals"
        else "leasing by update (lease, lease_claim, release)"
    )
    print(
        f"bench/leases.py: a pool of {args.devices} devices on one worker process, "
        f"{args.clients} clients {how}, polling lease_ticket every {args.poll:g} s",
        flush=True,
    )
    metrics = free_port()
    server_args = ["--log-level", "error", "--metrics-port", str(metrics)]
    if args.max_inflight_updates:
        # Temporal's own limit per workflow (10 by default), for trying another.
        limit = f"history.maxInFlightUpdates={args.max_inflight_updates}"
        server_args += ["--dynamic-config-value", limit]
        print(f"the server's {limit}", flush=True)
    if args.max_buffered_queries:
        # How many queries the server holds for a workflow while one of its tasks runs (1 by
        # default); past it a query is turned away and the SDK retries it about 1 s later.
        buffer = f"history.MaxBufferedQueryCount={args.max_buffered_queries}"
        server_args += ["--dynamic-config-value", buffer]
        print(f"the server's {buffer}", flush=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        async with (
            emulator(1.0) as url,
            await dev_server(dev_server_extra_args=server_args) as env,
        ):
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                address = env.client.service_client.config.target_host
                stack = Stack(env.client, http, tmp, address)
                # The clients' own connection; the SDK's retry warnings are not figures (the
                # server's own count of refusals is).
                quiet = Runtime(
                    telemetry=TelemetryConfig(
                        logging=LoggingConfig(filter=TelemetryFilter("ERROR", "ERROR"))
                    )
                )
                clients = await Client.connect(
                    address, data_converter=DATA_CONVERTER, runtime=quiet
                )
                try:
                    stack.start_worker(args.offline_after)
                    await stack.workers_ready()
                    for number, phase in enumerate(phases, 1):
                        # A pool of its own for each phase: what one left behind (a queue,
                        # a long history) is not the next one's figure.
                        pool = f"leases-{number}"
                        await start_leasable_pool(env.client, pool, args.devices, args.clients)
                        t0 = time.monotonic()
                        await ready(stack, pool, args.devices)
                        print(
                            f"{args.devices} devices ready {time.monotonic() - t0:.1f} s after "
                            f"the pool {pool} started",
                            flush=True,
                        )
                        await run_phase(stack, clients, pool, phase, args, server_metrics=metrics)
                        handle = env.client.get_workflow_handle(pool_workflow_id(pool))
                        await handle.cancel()
                    if args.delete_leased:
                        await delete_leased(stack, clients, args)
                finally:
                    stack.stop_workers()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--protocol",
        choices=("signals", "updates"),
        default="signals",
        help="how the clients lease: signals lease_ask/lease_give_back, or the updates",
    )
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--devices", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60, help="phases 2 and 4")
    parser.add_argument("--idle-seconds", type=float, default=20, help="phase 1")
    parser.add_argument("--capacity-seconds", type=float, default=20, help="phase 3 (0: skip)")
    parser.add_argument("--kill-at", type=float, default=20, help="phase 4 (0: skip)")
    parser.add_argument("--hold-min", type=float, default=1.0)
    parser.add_argument("--hold-max", type=float, default=5.0)
    parser.add_argument("--poll", type=float, default=1.0, help="lease_ticket poll interval")
    parser.add_argument(
        "--ramp", type=float, default=10.0, help="clients start spread over this many seconds"
    )
    parser.add_argument(
        "--herd-seconds",
        type=float,
        default=30,
        help="phase 5: phase 2 with every client starting at once (0: skip)",
    )
    parser.add_argument(
        "--max-inflight-updates",
        type=int,
        default=0,
        help="the server's history.maxInFlightUpdates (0: its default, 10)",
    )
    parser.add_argument(
        "--max-buffered-queries",
        type=int,
        default=0,
        help="the server's history.MaxBufferedQueryCount (0: its default, 1)",
    )
    parser.add_argument(
        "--delete-leased",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="last: a pool deleted with every device leased and tickets waiting",
    )
    parser.add_argument("--offline-after", type=float, default=180)
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    # A section for each protocol and server limit: the others' figures stay beside it.
    by_update = args.protocol == "updates"
    name = "leases-updates" if by_update else "leases"
    title = "Leases under load, " + ("by update" if by_update else "by signal")
    if args.max_inflight_updates:
        name = f"leases-inflight-{args.max_inflight_updates}" + ("" if by_update else "-signals")
        title += f", {args.max_inflight_updates} updates in flight allowed"
    if args.max_buffered_queries:
        name += f"-query-buffer-{args.max_buffered_queries}"
        title += f", {args.max_buffered_queries} queries buffered"
    if args.devices != parser.get_default("devices"):  # a pool of another size: its own
        name += f"-{args.devices}-devices"
        title += f", a pool of {args.devices}"
    with recorded(name, title, parser, args, script="leases"):
        asyncio.run(main(args))
