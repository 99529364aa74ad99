"""Leases asked for by signal (`lease_ask`, `lease_give_back`), read with `lease_ticket`.

The Python client's way to lease: no update in flight, so Temporal's 10 a workflow do not
bound how many clients ask at once (a stock server turns the rest away and, with hundreds
asking, aborts the updates it admitted: bench/leases.py). Seen on the dev server: a grant
at once, a resend that changes nothing, `Refused` and `TimedOut` remembered under the ask's
id, a queued ask granted without a claim when a device is given back, a give-back of a
ticket or a lease by the ask's id, all across a hand-over, a malformed ask dropped, and no
update in the history.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from devicepool.activities.devices import DeviceActivities
from devicepool.api import names
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.reconciler.lease_messages import LeaseAsk, ReleaseRequest
from tests.helpers.leases import ticket_state, view
from tests.workflows.test_pool_continue_as_new import hand_over
from tests.workflows.test_pool_leases_queue import start

pytestmark = pytest.mark.devserver


async def ask(handle: Any, ask_id: str, **asked: Any) -> None:
    await handle.signal(names.SIGNAL_LEASE_ASK, LeaseAsk(ask=ask_id, **asked))


async def give_back(handle: Any, some_id: str) -> None:
    await handle.signal(names.SIGNAL_LEASE_GIVE_BACK, ReleaseRequest(lease=some_id))


async def test_asked_by_signal_granted_queued_refused_and_given_back_across_a_hand_over(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle, _ = await start(env, control, pool_name, 1)

    await ask(handle, "a-1", holder="first", duration="600s")
    first = await ticket_state(handle, "a-1")  # a query sees the signals sent before it
    assert first.granted is not None and first.granted.holder == "first", first
    await ask(handle, "a-1", holder="first again")  # a resend: nothing new
    await ask(handle, "b-1", holder="second", wait="120s")
    await ask(handle, "c-1", holder="impatient")  # none free, no wait
    await ask(handle, "d-1", selector={"region": "other"}, wait="60s")  # can never match
    book = await view(handle)
    assert [(x.ticket, x.holder) for x in book.leases] == [("a-1", "first")], book
    assert [t.id for t in book.tickets] == ["b-1"], book
    assert (await ticket_state(handle, "b-1")).position == 1
    timed_out = await ticket_state(handle, "c-1")
    assert timed_out.ended == "NotGranted", timed_out
    assert timed_out.message == "no ready device matching the selector is free", timed_out
    never = await ticket_state(handle, "d-1")
    assert never.ended == "Refused" and never.message.startswith("selector region=other"), never

    await hand_over(handle, replicas=1)  # the book, asks and all, goes to the next run
    live = env.client.get_workflow_handle(handle.id)
    await eventually(
        lambda: _new_run(live, handle.first_execution_run_id or handle.run_id or ""),
        what="a continue-as-new",
        timeout=30,
        every=0.1,
    )
    await ask(live, "a-1", holder="first, after the hand-over")
    assert (await ticket_state(live, "a-1")).granted == first.granted

    await give_back(live, "a-1")  # by the ask's id: its lease
    offer = await ticket_state(live, "b-1")
    assert offer.granted is not None and offer.granted.device == first.granted.device, offer
    assert offer.offered and offer.granted.waited_seconds > 0
    await ask(live, "b-1", holder="second")  # the same ask again: its asker claims the offer
    second = await ticket_state(live, "b-1")
    assert second.granted is not None and not second.offered, second
    book = await view(live)
    assert [(x.ticket, x.claimed) for x in book.leases] == [("b-1", True)], book
    assert (await ticket_state(live, "a-1")).ended == "Released"

    await ask(live, "e-1", holder="third", wait="120s")
    await give_back(live, "e-1")  # a ticket given up
    assert (await ticket_state(live, "e-1")).ended == "Cancelled"
    await give_back(live, "never-asked")  # unknown: remembered as given back...
    await ask(live, "never-asked", holder="late")  # ...so its ask, overtaken, changes nothing
    assert (await ticket_state(live, "never-asked")).ended == "Cancelled"
    # Malformed (the stock `temporal` CLI sends what it is given): dropped, nothing wedged.
    await live.signal(names.SIGNAL_LEASE_ASK, {"ask": "two words", "wait": "forever"})
    assert (await ticket_state(live, "two words")).ended == "LeaseGone"
    await give_back(live, second.granted.lease)  # by the lease's own id
    assert (await view(live)).leases == []

    events = [e async for e in live.fetch_history_events()]
    kinds = {e.event_type for e in events}
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED not in kinds
    # The signals are gated by a patch (a run begun on a build without them ignores them).
    markers = [e for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert any(b"lease-signals" in e.SerializeToString() for e in markers)
    await live.cancel()
    # Replayed through the new path, every run of the chain: the same commands.
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=DATA_CONVERTER,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    run_id: str | None = handle.first_execution_run_id or handle.run_id
    while run_id:
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        await replayer.replay_workflow(history)
        run_id = _next_run(history)


def _next_run(history: Any) -> str | None:
    for event in history.events:
        if event.HasField("workflow_execution_continued_as_new_event_attributes"):
            return str(
                event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            )
    return None


async def _new_run(handle: Any, first_run: str) -> bool:
    return bool((await handle.describe()).run_id != first_run)
