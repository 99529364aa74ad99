"""Rate-limit promises of docs/ no other test checks end to end (dev server, 20x emulator).

- docs/scaling.md, "Rate limits": "A 429 that still arrives ... is retried
  after its `Retry-After` and pauses the ledger, which restarts slowly (1
  permit, doubling after each clean report)": no permit is granted before the
  pause ends, and after it the permits outstanding never exceed 1, 2, 4, ...
  until the allowance is whole again.
- docs/pools.md, "Health": "Replacement creates go ahead of growth in the
  account's creation window": a pool that is growing and also replacing an
  offline device, with the window full, gets its replacement permit before any
  more growth permits.

What the ledger granted and when is read from its own history (the
`permits_granted` signals it sent, the reports it received), the provider's
side from the emulator. The 429 is the provider's own (another tool filled the
account's window behind the ledger), not the emulator's injected `rateLimitRate`
fault: that one always says `Retry-After: 1`, too short a pause to ask for
more permits inside it on a busy machine. Each test uses an account the other rate tests also
use and first waits until nothing counts on it any more; the 429 test leaves
its account's allowance whole again.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import (
    QUERY_LEDGER,
    SIGNAL_PERMIT_REQUEST,
    SIGNAL_PERMITS_GRANTED,
    SIGNAL_PERMITS_USED,
    SIGNAL_RATE_LIMITED,
    UPDATE_SCALE,
    ledger_workflow_id,
)
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.emulator import provider_devices
from tests.helpers.histories import run_histories
from tests.helpers.ratelimit_stack import ACCOUNTS, CAP, SETTINGS, SPEED, WINDOW_V, name
from tests.helpers.transports import CountingTransport
from tests.helpers.workflow_stack import start_pool

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(60)]


@dataclass(frozen=True)
class Event:
    """One message of the ledger's history that matters here."""

    id: int
    time: datetime
    kind: str  # a signal name (received or, for permits_granted, sent)
    body: dict[str, Any]
    task: int  # the workflow task that sent it (sent signals), else 0


async def ledger_events(client: Client, account: str) -> list[Event]:
    """Received request/used/429 signals and sent grants, in history order (every run)."""
    workflow_id = ledger_workflow_id(account)
    events: list[Event] = []
    for n, history in enumerate(await run_histories(client, workflow_id)):
        # Event ids start again in each run (continue-as-new): ordered by run, then id.
        base, task = n * 10**9, 0
        for e in history.events:
            if e.HasField("workflow_task_completed_event_attributes"):
                task = base + e.event_id
                continue
            if e.HasField("workflow_execution_signaled_event_attributes"):
                received = e.workflow_execution_signaled_event_attributes
                kind, payloads, sender = received.signal_name, received.input.payloads, 0
            elif e.HasField("signal_external_workflow_execution_initiated_event_attributes"):
                sent = e.signal_external_workflow_execution_initiated_event_attributes
                kind, payloads, sender = sent.signal_name, sent.input.payloads, task
            else:
                continue
            if kind not in (
                SIGNAL_PERMIT_REQUEST,
                SIGNAL_PERMITS_USED,
                SIGNAL_RATE_LIMITED,
                SIGNAL_PERMITS_GRANTED,
            ):
                continue
            body = json.loads(payloads[0].data) if payloads else {}
            time = e.event_time.ToDatetime(UTC)
            events.append(Event(base + e.event_id, time, kind, body, sender))
    return events


async def ledger(client: Client, account: str) -> dict[str, Any]:
    return dict(await client.get_workflow_handle(ledger_workflow_id(account)).query(QUERY_LEDGER))


async def idle_account(client: Client, control: httpx.AsyncClient, account: str) -> None:
    """Until nothing of the account counts any more: no permit outstanding or asked
    for, no pause, and the provider's last create (so every permit the ledger
    still counts) out of the window by a margin. Another test may have used the
    account just before. (The ledger's `counted` is not used: an idle ledger
    does not wake to drop expired permits, so it shows them until its next round.)"""
    last: dict[str, Any] = {}
    # A used permit counts from when its batch saw the create finish (a little
    # after the provider accepted it) for the window + margin (3.3 s real).
    settled = (WINDOW_V / SPEED + 0.3 + 2.0) * SPEED

    async def idle() -> bool:
        state = await ledger(client, account)
        answer = (await control.get("/_emulator/creates")).json()
        times = answer["accounts"].get(account, [])
        last.update(state, provider_last=max(times, default=None), provider_now=answer["now"])
        paused = state["pausedUntil"]
        if state["outstanding"] or state["waiting"] or state["expecting"]:
            return False
        if paused and datetime.fromisoformat(paused) > datetime.now(UTC):
            return False
        return not times or max(times) <= answer["now"] - settled

    try:
        await eventually(idle, timeout=15, what=f"account {account} idle")
    except AssertionError as err:
        raise AssertionError(f"{err}: {last}") from None


async def fill_window(control: httpx.AsyncClient, account: str, label: str) -> None:
    """Another tool on the same account takes the provider's whole window, behind the ledger."""
    for i in range(CAP):
        response = await control.post(
            "/api/v1/android/devices",
            json={
                "region": "us-west",
                "osVersion": "14",
                "name": f"{label}-{i}",
                "labels": {"pool": label},
            },
            headers={
                "Authorization": f"Bearer {ACCOUNTS[account]}",
                "Idempotency-Key": f"{label}-{uuid.uuid4()}",
            },
        )
        assert response.status_code == 202, response.text


async def remove(control: httpx.AsyncClient, account: str, label: str) -> None:
    for device in await provider_devices(control, ACCOUNTS[account], label):
        await control.delete(
            f"/api/v1/devices/{device['id']}",
            headers={"Authorization": f"Bearer {ACCOUNTS[account]}"},
        )


async def test_a_429_pauses_the_ledger_then_it_restarts_with_one_permit_doubling(
    rl_env: WorkflowEnvironment, rl_workers: list[CountingTransport], rl_control: httpx.AsyncClient
) -> None:
    account, client = "alpha", rl_env.client
    await idle_account(client, rl_control, account)
    pool, other = name(), f"other-tool-{uuid.uuid4().hex[:6]}"
    # The pool's first create has its permit and is held on its way to the
    # provider while another tool fills the account's window: it meets a real
    # 429, with a Retry-After of up to a window (3 s here).
    gate = CountingTransport.create_gate = asyncio.Event()
    handle = await start_pool(client, pool, 1, settings=SETTINGS, account=account, proxy_ref=None)

    async def held() -> bool:
        return CountingTransport.at_gate >= 1

    await eventually(held, what="the first create held")
    try:
        await fill_window(rl_control, account, other)
        reports = (await ledger(client, account))["stats"]["rateLimitedReports"]
        gate.set()

        async def paused() -> dict[str, Any] | None:
            state = await ledger(client, account)
            return state if state["stats"]["rateLimitedReports"] > reports else None

        state = await eventually(paused, timeout=10, what="the 429 reported to the ledger")
        assert state["pausedUntil"] is not None, state
        assert state["allowance"] == 1, state
        paused_until = datetime.fromisoformat(state["pausedUntil"])

        # Growth asked for while the ledger is paused waits: nothing is dealt.
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=5), result_type=Accepted)

        async def waiting_while_paused() -> dict[str, Any] | None:
            now = await ledger(client, account)
            return now if sum(now["waiting"].values()) == 4 else None

        state = await eventually(waiting_while_paused, timeout=10, what="4 permits asked for")
        if datetime.now(UTC) >= paused_until:
            pytest.fail("the scale-up asked only after the pause ended: inconclusive")

        async def ready() -> bool:
            devices = await provider_devices(rl_control, ACCOUNTS[account], pool)
            return len(devices) == 5 and all(d["status"] == "ready" for d in devices)

        await eventually(ready, timeout=30, what="5 ready")

        # The allowance is whole again (the reports after the 429 were clean); the
        # last batch's report may reach the ledger after its devices are ready.
        async def whole() -> dict[str, Any] | None:
            state = await ledger(client, account)
            return state if state["allowance"] is None else None

        restored = await eventually(whole, timeout=10, what="the allowance whole again")
        assert restored["pausedUntil"] is None, restored
    finally:
        gate.set()
        await handle.cancel()
        await remove(rl_control, account, other)

    events = await ledger_events(client, account)
    first_429 = next(
        i
        for i, e in enumerate(events)
        if e.kind == SIGNAL_RATE_LIMITED and e.body.get("pool") == pool
    )
    # Replay the README's rule over what the ledger did from the 429 on.
    outstanding: dict[str, int] = {}
    for e in events[:first_429]:
        if e.kind == SIGNAL_PERMITS_GRANTED:
            outstanding[e.body["grantId"]] = e.body["count"]
        elif e.kind == SIGNAL_PERMITS_USED:
            outstanding.pop(e.body["grantId"], None)
    allowance: int | None = None
    grants: list[int] = []
    for e in events[first_429:]:
        if e.kind == SIGNAL_RATE_LIMITED:
            allowance = 1
        elif e.kind == SIGNAL_PERMITS_USED and e.body["grantId"] in outstanding:
            del outstanding[e.body["grantId"]]
            if e.body.get("failed"):
                allowance = 1
            elif allowance is not None:
                allowance = None if allowance * 2 >= CAP else allowance * 2
        elif e.kind == SIGNAL_PERMITS_GRANTED:
            # Paused: nothing granted before the Retry-After has passed.
            assert e.time >= paused_until - timedelta(milliseconds=50), (e, paused_until)
            outstanding[e.body["grantId"]] = e.body["count"]
            grants.append(e.body["count"])
            if allowance is not None:
                assert sum(outstanding.values()) <= allowance, (grants, outstanding, allowance)
    # The scale-up's 4 came in steps (2 + 2 here: the retried create's clean
    # report made the allowance 2, the next one 4); without the slow start, 4 at once.
    assert sum(grants) == 4, grants
    assert max(grants) < 4, grants


async def test_a_replacement_is_granted_ahead_of_growth_in_a_full_window(
    rl_env: WorkflowEnvironment, rl_workers: list[CountingTransport], rl_control: httpx.AsyncClient
) -> None:
    account, client = "delta", rl_env.client
    await idle_account(client, rl_control, account)
    pool = name()
    # Offline for 1 s is replaced: the replacement asks while the growth below
    # still waits for the window.
    settings = SETTINGS.model_copy(update={"offline_after_seconds": 1.0})
    handle = await start_pool(client, pool, 1, settings=settings, account=account, proxy_ref=None)
    try:

        async def one_ready() -> list[Any] | None:
            devices = await provider_devices(rl_control, ACCOUNTS[account], pool)
            ok = len(devices) == 1 and devices[0]["status"] == "ready"
            return devices if ok else None

        (victim,) = await eventually(one_ready, timeout=15, what="1 ready")
        # Growth of two windows' worth, then the pool's only device goes offline.
        await handle.execute_update(
            UPDATE_SCALE, ScaleRequest(replicas=1 + 2 * CAP), result_type=Accepted
        )
        (await rl_control.post(f"/_emulator/devices/{victim['id']}/offline")).raise_for_status()

        seen: list[Any] = []

        async def dealt() -> list[Event] | None:
            """The ledger's events once it dealt the replacement and either some growth
            after the replacement asked or all of the growth."""
            events = await ledger_events(client, account)
            seen[:] = [(e.kind, e.body) for e in events if e.body.get("pool") == pool][-6:]
            first_asked: dict[str, dict[str, Any]] = {}
            for e in events:
                if e.kind == SIGNAL_PERMIT_REQUEST and e.body.get("pool") == pool:
                    first_asked.setdefault(e.body["requestId"], e.body)
            as_growth = sum(b["count"] for b in first_asked.values() if not b.get("replacement"))
            # The first device, the growth, and nothing else asks as growth. (Before
            # patch lost-offline-is-replacement, in 3 of 4 runs on a loaded machine:
            # the pool's own watch saw the device terminating before the health
            # check's report arrived, planned its create as growth, and the report's
            # credit went to a later batch.)
            assert as_growth <= 1 + 2 * CAP, f"the replacement asked as growth: {seen}"
            found = _replacement_and_growth(events, pool)
            if found is None:
                return None
            _, its_grant, growth_after, growth_total = found
            done = its_grant is not None and (growth_after or growth_total == 2 * CAP)
            return events if done else None

        try:
            events = await eventually(dealt, timeout=20, what="the replacement and growth dealt")
        except AssertionError as err:
            devices = await provider_devices(rl_control, ACCOUNTS[account], pool)
            statuses = sorted(d["status"] for d in devices)
            raise AssertionError(f"{err}; the pool's last requests: {seen}; {statuses}") from None
    finally:
        await handle.cancel()

    found = _replacement_and_growth(events, pool)
    assert found is not None
    _, its_grant, growth_after, _ = found
    assert its_grant is not None
    # Growth was still waiting when the replacement asked (the window was full):
    # otherwise this test shows nothing.
    if not growth_after:
        pytest.fail("no growth permit was dealt after the replacement asked: inconclusive")
    # The replacement was dealt in the first round after it asked that dealt
    # anything to the pool's growth, or before: never behind it.
    assert its_grant.task <= growth_after[0].task, (its_grant, growth_after[0])


def _replacement_and_growth(
    events: list[Event], pool: str
) -> tuple[Event, Event | None, list[Event], int] | None:
    """The pool's replacement request, its grant, the growth grants after that request,
    and all growth permits granted; None before the replacement asked."""
    requests = {
        e.body["requestId"]: e
        for e in events
        if e.kind == SIGNAL_PERMIT_REQUEST and e.body.get("pool") == pool
    }
    replacement = next((e for e in requests.values() if e.body.get("replacement")), None)
    if replacement is None:
        return None
    growth = {rid for rid, e in requests.items() if not e.body.get("replacement")}
    grants = [e for e in events if e.kind == SIGNAL_PERMITS_GRANTED]
    later = [e for e in grants if e.id > replacement.id]
    its_grant = next(
        (e for e in later if e.body["requestId"] == replacement.body["requestId"]), None
    )
    growth_after = [e for e in later if e.body["requestId"] in growth]
    growth_total = sum(e.body["count"] for e in grants if e.body["requestId"] in growth)
    return replacement, its_grant, growth_after, growth_total


def test_the_promises_tested_here_are_still_documented() -> None:
    # If the docs stop saying it, this file's tests lose their reason: say so.
    import pathlib

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
    words = " ".join((docs / "scaling.md").read_text().split())
    assert (
        "pauses the ledger, which restarts slowly (1 permit, doubling after each clean report)"
        in words
    )
    words = " ".join((docs / "pools.md").read_text().split())
    assert "Replacement creates go ahead of growth in the account's creation window" in words
