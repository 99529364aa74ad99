"""Leases on a DevicePool of the session's stack, through the raw updates and queries.

What the lease book promises (workflows/reconciler/leases.py) seen on the dev server: the
validators refuse before history, a silent holder's device comes back at `idleTimeout` to
the ticket waiting for it, `replace` ends a lease (or waits for its release), leases and
tickets survive a hand-over and a worker restart, and 30 waiters on 3 devices are served
first come, first served within Temporal's 10 in-flight updates; a device a scale-down is
terminating is not leased while the pass awaits the provider, and a leased device that goes
offline ends its lease when the health check replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api import names
from devicepool.client import PoolClient
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from devicepool.workflows.reconciler.lease_checks import (
    LEASE_GONE,
    LEASE_NOT_GRANTED,
    LEASE_REFUSED,
)
from devicepool.workflows.reconciler.lease_messages import (
    Granted,
    LeaseAnswer,
)
from tests.helpers.leases import (
    claim,
    granted,
    lease,
    offered,
    refused,
    release,
    renew,
    start_beta_pool,
    ticket_state,
    view,
)
from tests.helpers.pool_waits import converged
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import POLL, Workers, pool_devices
from tests.workflows.test_pool_continue_as_new import hand_over

pytestmark = pytest.mark.devserver

# Temporal's limit of updates in flight on one workflow (the dev server's default).
IN_FLIGHT = 10
UPDATE_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED,
}


class CountedUpdates:
    """A client's `UpdateWorkflowExecution` without the SDK's retries: the refusals for
    Temporal's in-flight limit are kept (and the call tried again here)."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, 0
        self.refused: list[str] = []
        self.closing: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def __call__(self, request: Any, *, retry: bool = False, **options: Any) -> Any:
        while True:
            self.calls += 1
            try:
                return await self.real(request, retry=False, **options)
            except RPCError as err:
                if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise
                # "workflow is closing" too: the pool hands over (the tests' low threshold).
                (self.refused if "in-flight" in err.message else self.closing).append(err.message)
                await asyncio.sleep(0.5)


async def start(
    env: WorkflowEnvironment, control: httpx.AsyncClient, name: str, replicas: int, **leases: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """A pool of `replicas` with `spec.leases` of `leases`, once its devices are up and it
    sees them ready: its handle, and its devices (the emulator's)."""
    handle = await start_beta_pool(env.client, name, replicas, leases=leases)
    devices = await converged(control, name, replicas)
    await eventually(
        lambda: _status(handle, readyDevices=replicas),
        what=f"the pool sees {replicas}",
        every=POLL,
    )
    return handle, devices


async def update_events(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The update ids the pool's histories hold an event of (admitted, accepted, rejected),
    every run from the first on: the session server suggests hand-overs early, and a
    loaded machine's passes can bring one between an update and this look."""
    found: list[str] = []
    run_id: str | None = handle.first_execution_run_id or handle.run_id
    while run_id:
        history = await handle._client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        run_id = None
        for event in history.events:
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                attrs = event.workflow_execution_continued_as_new_event_attributes
                run_id = attrs.new_execution_run_id
            if event.event_type not in UPDATE_EVENTS:
                continue
            for meta in (
                event.workflow_execution_update_admitted_event_attributes.request.meta,
                event.workflow_execution_update_accepted_event_attributes.accepted_request.meta,
                event.workflow_execution_update_rejected_event_attributes.rejected_request.meta,
            ):
                if meta.update_id:
                    found.append(meta.update_id)
    return found


async def reasons(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in (await handle.query("events"))["events"]]


@contextlib.asynccontextmanager
async def renewing(handle: WorkflowHandle[Any, Any], lease_id: str) -> AsyncIterator[None]:
    """A live holder: renews every second until the block ends."""

    async def forever() -> None:
        while True:
            await asyncio.sleep(1)
            assert (await renew(handle, lease_id)).granted is not None

    task = asyncio.ensure_future(forever())
    try:
        yield
    finally:
        task.cancel()
        # Cut mid-renew, the SDK says so with its own error, not CancelledError.
        with contextlib.suppress(asyncio.CancelledError, WorkflowUpdateRPCTimeoutOrCancelledError):
            await task


async def test_refusals_leave_no_history_a_silent_holder_times_out_and_replace_ends_a_lease(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle, _ = await start(env, control, pool_name, 2, idleTimeout="5s", queue={"max": 1})
    a = await granted(handle, holder="alive", duration="60s")
    b = await granted(handle, holder="killed", duration="60s")
    assert a.device != b.device

    # Both holders renew from their grant (a second apart; on a loaded machine the refusals
    # below can take longer than idleTimeout); `b`'s holder then dies.
    async with renewing(handle, a.lease):
        async with renewing(handle, b.lease):
            # Refused by the validators: can never match, none free, the queue full. None is in
            # the history (an update refused by its validator leaves no event).
            ids = [f"refused-{uuid.uuid4().hex[:6]}" for _ in range(3)]
            never = await refused(
                lease(handle, selector={"region": "other"}, update_id=ids[0]), LEASE_REFUSED
            )
            assert "region=other can never match" in str(never)
            await refused(lease(handle, update_id=ids[1]), LEASE_NOT_GRANTED)
            queued = await lease(handle, holder="waiter", wait="30s", update_id="queued")
            assert queued.ticket and queued.position == 1, queued
            full = await refused(lease(handle, wait="30s", update_id=ids[2]), LEASE_REFUSED)
            assert "queue is full" in str(full)
            recorded = await update_events(handle)
            assert "queued" in recorded and not set(ids) & set(recorded), recorded

        # `a` renews, `b`'s holder died: at idleTimeout its device goes to the ticket.
        offer = await eventually(
            lambda: offered(handle, queued.ticket or ""), what="b's device offered", timeout=15
        )
        assert offer.granted is not None and offer.granted.device == b.device
        said = [m for r, m in await reasons(handle) if r == "LeaseExpired"]
        assert any(b.lease in m and "IdleTimeout" in m for m in said), said
        gone = await refused(renew(handle, b.lease), LEASE_GONE)
        assert "IdleTimeout" in str(gone)
        assert (await release(handle, b.lease)).reason == "IdleTimeout"  # idempotent
        c = await claim(handle, queued.ticket or "")
        assert (c.device, c.holder, c.lease) == (b.device, "waiter", offer.granted.lease)

        # Replaced now: its lease ends, said to its holder's next renew and release.
        await PoolClient(env.client).replace_device(pool_name, c.device)
        replaced = await refused(renew(handle, c.lease), LEASE_GONE)
        assert "Replaced" in str(replaced)
        assert (await release(handle, c.lease)).reason == "Replaced"
        await eventually(
            lambda: _without(control, pool_name, 2, c.device), what="c replaced", timeout=30
        )
        # Replaced when idle: a leased device stays (its replacement beside it) until released.
        await PoolClient(env.client).replace_device(pool_name, a.device, when_idle=True)
        three = await eventually(
            lambda: _serving(control, pool_name, 3), what="a's replacement", timeout=30
        )
        assert three and a.device in three
        await asyncio.sleep(2)  # passes that would take it, were it idle
        # A rare failure here under CI load (3 of ~30 runs over four stops) left no
        # trace of why: what the provider and the pool then say goes with it.
        assert a.device in (await _serving(control, pool_name, 3) or []), (
            await pool_devices(control, pool_name),
            await reasons(handle),
        )
    assert (await release(handle, a.lease)).reason == "Released"
    await eventually(
        lambda: _without(control, pool_name, 2, a.device), what="a retired", timeout=30
    )
    await handle.cancel()


async def test_leases_and_tickets_survive_a_hand_over_and_a_worker_restart(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle, _ = await start(env, control, pool_name, 1)
    held = await granted(handle, holder="first", duration="600s")
    waiting = await lease(handle, holder="second", wait="120s")
    assert waiting.ticket and waiting.position == 1, waiting
    first_run = (await handle.describe()).run_id
    await hand_over(handle, replicas=1)

    async def new_run() -> bool:
        return (await handle.describe()).run_id != first_run

    await eventually(new_run, what="a continue-as-new", timeout=30, every=0.1)
    live = env.client.get_workflow_handle(handle.id)
    for step in ("handed over", "worker restarted"):
        book = await view(live)
        assert [(x.id, x.device) for x in book.leases] == [(held.lease, held.device)], step
        assert [t.id for t in book.tickets] == [waiting.ticket], step
        assert (await renew(live, held.lease)).granted is not None, step
        assert (await ticket_state(live, waiting.ticket)).position == 1, step
        if step == "handed over":
            await workers.restart()  # cached runs gone: the book comes back by replay
    assert (await release(live, held.lease)).reason == "Released"
    offer = await eventually(lambda: offered(live, waiting.ticket or ""), what="the offer")
    assert offer.granted is not None and offer.granted.device == held.device
    second = await claim(live, waiting.ticket)
    # Given back with `replace`: the device used goes, a new one takes its place.
    answer = await release(live, second.lease, replace=True)
    assert answer.reason == "Released" and "replaced" in answer.message, answer
    await eventually(
        lambda: _without(control, pool_name, 1, held.device), what="replaced", timeout=30
    )
    await handle.cancel()


async def test_thirty_waiters_on_three_devices_are_served_in_order_one_holder_at_a_time(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    started, _ = await start(env, control, pool_name, 3)
    # The waiters' own client, its updates counted: a refusal for Temporal's in-flight limit
    # fails the test instead of being retried out of sight by the SDK.
    client = await Client.connect(
        env.client.service_client.config.target_host, data_converter=env.client.data_converter
    )
    rpc = client.workflow_service
    counted = CountedUpdates(rpc.update_workflow_execution)
    rpc.update_workflow_execution = counted  # type: ignore[method-assign,assignment]
    handle = client.get_workflow_handle(started.id)
    holders: dict[str, int] = {}  # device -> the waiter holding it now
    served: list[tuple[Any, Granted]] = []  # (the ticket's place in the queue, its grant)

    busy: list[str] = []  # polls the server turned away: asked again a second later

    async def polled(ticket: str) -> LeaseAnswer | None:
        # 30 pollers on one workflow: a query that comes while a workflow task runs waits in
        # a buffer of one (history.maxBufferedQueryCount); the rest are refused at once.
        try:
            return await offered(handle, ticket)
        except RPCError as err:
            if "query buffer is full" not in err.message:
                raise
            busy.append(ticket)
            return None

    async def waiter(i: int) -> None:
        async with in_flight:
            answer = await lease(handle, holder=f"w{i}", duration="60s", wait="120s")
        got = answer.granted
        if got is None:
            assert answer.ticket and answer.deadline and answer.position, answer
            place = (answer.deadline, answer.position)
            offer = await eventually(
                lambda: polled(answer.ticket or ""), what=f"w{i}", timeout=90, every=1
            )
            async with in_flight:
                got = await claim(handle, answer.ticket)
            assert offer.granted is not None and got.lease == offer.granted.lease
            served.append((place, got))
        assert got.device not in holders, f"{got.device}: w{i} and w{holders[got.device]}"
        holders[got.device] = i
        await asyncio.sleep(0.2)
        del holders[got.device]
        async with in_flight:
            assert (await release(handle, got.lease)).reason == "Released"

    # 30 at once are refused 8 times of 30 (the SDK retries them, a second later): as a
    # client should, these keep at most 10 updates in flight on the pool.
    in_flight = asyncio.Semaphore(IN_FLIGHT)
    begun = time.monotonic()
    await asyncio.gather(*(waiter(i) for i in range(30)))
    assert counted.refused == [], counted.refused
    # First come, first served: in the order the tickets were made, each offered no
    # earlier than the one before it.
    offers = [g.granted_at for _, g in sorted(served, key=lambda s: s[0])]
    assert offers == sorted(offers), served
    assert len(served) >= 20, f"only {len(served)} of 30 waited"
    book = await view(handle)
    assert not book.leases and not book.tickets, book
    status = await handle.query("status")
    assert status["leasedDevices"] == 0 and status["leasesQueued"] == 0, status
    took = time.monotonic() - begun
    print(
        f"30 waiters: {took:.1f}s, {counted.calls} updates,"
        f" {len(counted.closing)} at a hand-over, {len(busy)} polls refused"
    )
    await handle.cancel()


async def test_a_device_a_scale_down_is_terminating_is_not_leased_meanwhile(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle, devices = await start(env, control, pool_name, 2)
    oldest = min(devices, key=lambda d: (d["createdAt"], d["id"]))["id"]
    gate = TimedASGITransport.delete_gate = asyncio.Event()
    try:
        await handle.execute_update(
            names.UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted
        )
        await eventually(lambda: _terminating(handle), what="the scale-down's DELETE at the gate")
        # The pass awaits the DELETE of the oldest idle device: a lease now is the other one.
        answer = await lease(handle, holder="during", duration="60s")
    finally:
        gate.set()
    assert answer.granted is not None and answer.granted.device != oldest, answer
    await eventually(
        lambda: _without(control, pool_name, 1, oldest), what="the oldest gone", timeout=30
    )
    held = answer.granted
    assert (await renew(handle, held.lease)).granted is not None

    # Its device goes offline: the health check replaces it and the lease ends, said so.
    (await control.post(f"/_emulator/devices/{held.device}/offline")).raise_for_status()
    lost = await eventually(lambda: _lost(handle, held.lease), what="the lease lost", timeout=30)
    assert "DeviceLost" in lost
    said = [m for r, m in await reasons(handle) if r == "LeaseExpired"]
    assert any(held.lease in m and "DeviceLost" in m for m in said), said
    assert (await release(handle, held.lease)).reason == "DeviceLost"
    await handle.cancel()


async def _lost(handle: WorkflowHandle[Any, Any], lease_id: str) -> str | None:
    """Why a renew is refused (None: renewed)."""
    try:
        await renew(handle, lease_id)
    except WorkflowUpdateFailedError as err:
        assert isinstance(err.cause, ApplicationError) and err.cause.type == LEASE_GONE
        return str(err.cause)
    return None


async def _status(handle: WorkflowHandle[Any, Any], **wanted: Any) -> bool:
    status = await handle.query("status")
    return all(status[k] == v for k, v in wanted.items())


async def _terminating(handle: WorkflowHandle[Any, Any]) -> bool:
    described = await handle.describe()
    return any(
        a.activity_type.name == "terminate_device"
        for a in described.raw_description.pending_activities
    )


async def _serving(control: httpx.AsyncClient, name: str, count: int) -> list[str] | None:
    devices = await pool_devices(control, name)
    ids = [d["id"] for d in devices if d["status"] in ("ready", "busy")]
    return ids if len(ids) == count else None


async def _without(control: httpx.AsyncClient, name: str, count: int, gone: str) -> bool:
    devices = await pool_devices(control, name)
    ids = [d["id"] for d in devices]
    ready = [d for d in devices if d["status"] == "ready"]
    return gone not in ids and len(ready) == count == len(devices)
