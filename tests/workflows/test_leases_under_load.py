"""Leases under load on the session's stack: 50 holders at once through one `PoolClient`
on a pool of 3 devices, each releasing after 0.2 s, are all served (the client keeps its
updates within Temporal's in-flight limit and asks again what Temporal turns away for
now: client/_lease_calls.py); and a `lease` update sent again under its id answers what
the first send made (a lease, a ticket), on the same run and after a hand-over. The
client's side of it against a pure pool: tests/client/test_leases_busy.py."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.api import parse_pool
from devicepool.client import PoolClient, _lease_calls, _lease_wait
from devicepool.testing import eventually, pool_manifest
from devicepool.workflows.reconciler.lease_messages import LeaseAnswer
from tests.helpers.leases import lease
from tests.workflows.test_pool_continue_as_new import hand_over

pytestmark = pytest.mark.devserver


async def test_fifty_holders_at_once_on_three_devices_are_all_served(
    env: WorkflowEnvironment,
    pools: PoolClient,
    pool_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lease_wait, "POLL_SECONDS", 0.25)
    turned: list[str] = []  # what Temporal turned away, asked again by the client

    turned_away = _lease_calls.turned_away

    def seen(err: BaseException) -> str | None:
        why = turned_away(err)
        if why is not None:
            turned.append(why)
        return why

    monkeypatch.setattr(_lease_calls, "turned_away", seen)
    accepted = await pools.apply(parse_pool(pool_manifest(pool_name, replicas=3)))
    await pools.wait_ready(pool_name, generation=accepted.generation, timeout=60)
    holders: dict[str, int] = {}  # device -> the holder using it now

    async def holder(i: int) -> float:
        async with pools.lease(pool_name, wait=timedelta(seconds=60), holder=f"h{i}") as lease:
            assert lease.device not in holders, f"{lease.device}: h{i} and h{holders[lease.device]}"
            holders[lease.device] = i
            await asyncio.sleep(0.2)
            del holders[lease.device]
        return lease.waited_seconds

    begun = time.monotonic()
    waited = await asyncio.gather(*(holder(i) for i in range(50)), return_exceptions=True)
    took = time.monotonic() - begun
    failed = [w for w in waited if isinstance(w, BaseException)]
    assert failed == [], failed
    handle_id = f"devicepool/{pool_name}"
    view = await pools.leases(pool_name)
    assert (view.leases, view.tickets) == ([], [])
    print(f"50 holders on 3 devices: {took:.1f}s, {len(turned)} turned away: {set(turned)}")

    # Sent again under the same id (the SDK's retry, or this client's): what the first send
    # made, never a second lease or ticket; on the same run (Temporal answers it), and after
    # the pool handed over to a new run, which does not know the id (the pool remembers it).
    handle = env.client.get_workflow_handle(handle_id)
    first = await send(handle, "lease-once")
    assert first.granted is not None and await send(handle, "lease-once") == first
    others = [await send(handle, f"other-{i}") for i in range(2)]  # all 3 held now
    queued = await send(handle, "queued-once", wait="60s")
    assert queued.ticket is not None and queued.position == 1, queued
    run = (await handle.describe()).run_id
    await hand_over(handle, replicas=3)

    async def new_run() -> bool:
        return (await handle.describe()).run_id != run

    await eventually(new_run, what="a hand-over", timeout=30, every=0.1)
    again = await send(handle, "lease-once")
    assert again.granted is not None and again.granted.lease == first.granted.lease, again
    again = await send(handle, "queued-once", wait="60s")
    assert (again.ticket, again.position) == (queued.ticket, 1), again
    await pools.release_lease(pool_name, first.granted.lease)  # offered to the ticket
    again = await send(handle, "queued-once", wait="60s")  # a ticket to claim, not a grant
    assert (again.granted, again.ticket) == (None, queued.ticket), again
    view = await pools.leases(pool_name)
    assert view.tickets == [] and len(view.leases) == 3, view
    assert {x.ticket for x in view.leases} == {"", queued.ticket}
    assert {x.id for x in view.leases} >= {o.granted.lease for o in others if o.granted}
    await handle.cancel()


async def send(handle: WorkflowHandle[Any, Any], update_id: str, wait: str = "0s") -> LeaseAnswer:
    return await lease(handle, update_id=update_id, holder=update_id, wait=wait)
