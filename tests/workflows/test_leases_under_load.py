"""Leases under load on the session's stack: 50 holders at once through one `PoolClient`
on a pool of 3 devices, each releasing after 0.2 s, are all served (the client keeps its
updates within Temporal's in-flight limit and asks again what Temporal turns away for
now: client/_lease_calls.py); and a `lease` update sent again under its id answers the
first send's grant. The client's side of it against a pure pool: tests/client/test_leases_busy.py."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from devicepool.api import parse_pool
from devicepool.api.names import UPDATE_LEASE, UPDATE_RELEASE
from devicepool.client import PoolClient, _lease_calls, _leases
from devicepool.testing import pool_manifest
from devicepool.workflows.reconciler.lease_messages import (
    LeaseAnswer,
    LeaseRequest,
    ReleaseAnswer,
    ReleaseRequest,
)

pytestmark = pytest.mark.devserver


async def test_fifty_holders_at_once_on_three_devices_are_all_served(
    env: WorkflowEnvironment,
    pools: PoolClient,
    pool_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_leases, "POLL_SECONDS", 0.25)
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

    # Sent again under the same id (the SDK's retry, or this client's), on the same run: the
    # first send's grant, not a second one; even once that lease is released.
    for attempt in range(3):  # a run that hands over between the sends: again, on the next
        run = (await env.client.get_workflow_handle(handle_id).describe()).run_id
        handle = env.client.get_workflow_handle(handle_id, run_id=run)
        update_id = f"lease-once-{attempt}"
        try:
            first = await send(handle, update_id)
            assert first.granted is not None, first
            assert await send(handle, update_id) == first
            released = await handle.execute_update(
                UPDATE_RELEASE, ReleaseRequest(lease=first.granted.lease), result_type=ReleaseAnswer
            )
            assert released.released_now and await send(handle, update_id) == first
            break
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:  # that run closed: try the next
                raise
    else:
        pytest.fail("the pool handed over between every pair of sends")
    await env.client.get_workflow_handle(handle_id).cancel()


async def send(handle: WorkflowHandle[Any, Any], update_id: str) -> LeaseAnswer:
    return await handle.execute_update(
        UPDATE_LEASE, LeaseRequest(holder="again"), id=update_id, result_type=LeaseAnswer
    )
