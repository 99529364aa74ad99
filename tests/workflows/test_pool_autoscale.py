"""A DevicePool that sizes itself (`spec.autoscale`) on the session's stack: a pool at zero
grows for the tickets asked of it and grants them first come, first served; an idle device
goes after `scaleDownAfter`, a leased one never; `scale` is refused; what it shows.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from temporalio.client import WorkflowUpdateFailedError

from devicepool.api import names
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import PoolInput, ScaleRequest
from devicepool.workflows.reconciler.lease_messages import LeaseAnswer, LeaseRequest
from tests.helpers.leases import claim, offered, release, start_beta_pool, update, view
from tests.helpers.manifests import beta_pool
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import Workers, pool_devices

pytestmark = pytest.mark.devserver

# The production watch: a quiet pool's listing answers only after an hour. Demand must wake
# the pool itself (a ticket, a grant, a lease's end), not the watch's timeout.
QUIET = FAST.model_copy(update={"watch_max_seconds": 3600.0, "resync_seconds": 30.0})


def autoscale(**fields: Any) -> dict[str, Any]:
    return {"autoscale": {"maxReplicas": 5, "stabilization": "0s", **fields}}


def when(stamp: str) -> datetime:
    """A status timestamp, compared as a time (a whole second is written without digits)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status["conditions"] if c["type"] == type_), None)


async def test_a_pool_at_zero_grows_for_its_tickets_and_shrinks_when_idle(
    env: Any, workers: Any, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_beta_pool(env.client, pool_name, 0, **autoscale(scaleDownAfter="2s"))
    try:
        # Known demand of none: the pool stays at zero, and says why.
        async def sized(n: int) -> bool:
            status = await handle.query("status")
            cond = condition(status, "Autoscaling")
            return (
                status.get("desiredFromDemand") == n
                and status["desiredReplicas"] == n
                and cond is not None
                and cond["status"] == "True"
            )

        await eventually(lambda: sized(0), what="sized at zero", timeout=20)

        # Refused, changing nothing: the autoscaler owns the size.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(names.UPDATE_SCALE, ScaleRequest(replicas=3))
        assert "autoscale.minReplicas/maxReplicas" in str(refused.value.cause)
        assert (await handle.query("spec"))["spec"]["replicas"] == 0

        # Asked without a wait: not granted, and told the pool grows only for one that waits.
        with pytest.raises(WorkflowUpdateFailedError) as not_granted:
            await handle.execute_update(
                names.UPDATE_LEASE, LeaseRequest(holder="now"), result_type=LeaseAnswer
            )
        assert "autoscaled and grows only for a lease that waits: ask with --wait" in str(
            not_granted.value.cause
        )
        # ...but not for a selector no device the pool makes could serve (it would not grow).
        with pytest.raises(WorkflowUpdateFailedError) as not_granted:
            await handle.execute_update(
                names.UPDATE_LEASE,
                LeaseRequest(holder="now", selector={"model": "pixel"}),
                result_type=LeaseAnswer,
            )
        assert "--wait" not in str(not_granted.value.cause), not_granted.value.cause

        # Two tickets at zero: queued, not refused; the pool grows to 2 and grants both FIFO.
        asked = [
            await handle.execute_update(
                names.UPDATE_LEASE,
                LeaseRequest(holder=f"h{i}", wait="60s"),
                result_type=LeaseAnswer,
                id=f"ask-{uuid.uuid4().hex[:6]}",
            )
            for i in range(2)
        ]
        tickets = [a.ticket for a in asked if a.ticket is not None and a.granted is None]
        assert len(tickets) == 2, asked

        async def offered_all() -> bool:
            return all([await offered(handle, t) is not None for t in tickets])

        await eventually(offered_all, what="both tickets offered", timeout=60)
        leases = [await claim(handle, t) for t in tickets]
        status = await handle.query("status")
        assert status["desiredFromDemand"] == 2
        cond = condition(status, "Autoscaling")
        assert cond is not None and cond["message"].startswith("2 leased + 0 queued + buffer 0")
        events = [
            e for e in (await handle.query("events"))["events"] if e["reason"] == "Autoscaled"
        ]
        assert events and "replicas 0 -> " in events[0]["message"]

        # One given back: it goes after scaleDownAfter; the one still leased stays.
        await release(handle, leases[0].lease)

        async def one_left() -> bool:
            devices = await pool_devices(control, pool_name)
            return [d["id"] for d in devices] == [leases[1].device]

        await eventually(one_left, what="the idle device gone", timeout=60)
        assert (await handle.query("status"))["desiredFromDemand"] == 1
    finally:
        await handle.cancel()


async def test_a_quiet_pool_at_zero_grows_for_a_ticket_and_shrinks_after_release(
    env: Any, workers: Any, control: httpx.AsyncClient, pool_name: str
) -> None:
    """With the watch answering after an hour (the default), demand alone wakes the pool: a
    ticket at zero is granted within its wait, and the device given back goes after
    `scaleDownAfter`, not when the watch answers."""
    spec = autoscale(scaleDownAfter="2s")
    handle = await start_beta_pool(env.client, pool_name, 0, settings=QUIET, **spec)
    try:

        async def sized_at_zero() -> bool:
            return (await handle.query("status")).get("desiredFromDemand") == 0

        await eventually(sized_at_zero, what="sized at zero", timeout=30)
        lease_id = await _held(handle, "h0", timeout=45)
        await eventually(lambda: _count_is(control, pool_name, 1), what="one device", timeout=5)
        await release(handle, lease_id)
        # scaleDownAfter (2 s) and a pass: well before anything else would wake the pool.
        await eventually(lambda: _count_is(control, pool_name, 0), what="shrunk", timeout=12)
    finally:
        await handle.cancel()


async def test_a_grant_out_of_a_quiet_pools_buffer_makes_the_buffer_again(
    env: Any, workers: Any, control: httpx.AsyncClient, pool_name: str
) -> None:
    """`idleBuffer: 1`: the device leased out of it is replaced by a new idle one at once,
    with no listing news to wake the pool."""
    spec = autoscale(idleBuffer=1)
    handle = await start_beta_pool(env.client, pool_name, 0, settings=QUIET, **spec)
    try:

        async def buffer_ready() -> bool:
            status = await handle.query("status")
            return status.get("readyDevices") == 1 and status.get("desiredFromDemand") == 1

        await eventually(buffer_ready, what="the buffer ready", timeout=60)
        answer = await update(handle, names.UPDATE_LEASE, LeaseRequest(holder="h0"), LeaseAnswer)
        assert answer.granted is not None, answer  # out of the buffer, at once
        await eventually(lambda: _count_is(control, pool_name, 2), what="refilled", timeout=30)
        assert (await handle.query("status"))["desiredFromDemand"] == 2
    finally:
        await handle.cancel()


async def _held(handle: Any, holder: str, *, timeout: float) -> str:
    """A lease asked with a wait, claimed once offered: its id."""
    answer = await update(
        handle,
        names.UPDATE_LEASE,
        LeaseRequest(holder=holder, wait="60s"),
        LeaseAnswer,
        f"ask-{uuid.uuid4().hex[:6]}",
    )
    if answer.granted is not None:
        return answer.granted.lease
    ticket = answer.ticket or ""

    async def offer() -> bool:
        return await offered(handle, ticket) is not None

    await eventually(offer, what=f"{holder}'s ticket offered", timeout=timeout)
    return (await claim(handle, ticket)).lease


async def test_a_burst_of_twenty_tickets_at_zero_is_served_first_come_and_a_restart_holds(
    env: Any, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """20 tickets on an autoscaled pool at zero: it grows to 20 (never past), through the
    account's paced creates, and grants them in the order they were asked. Given back, the
    devices stay for `scaleDownAfter`: a worker restart at zero demand shrinks nothing."""
    spec = autoscale(maxReplicas=20, scaleDownAfter="1h")
    handle = await start_beta_pool(env.client, pool_name, 0, **spec)
    try:
        tickets: list[str] = []
        for i in range(20):
            answer = await update(
                handle,
                names.UPDATE_LEASE,
                LeaseRequest(holder=f"h{i:02}", wait="5m", duration="30m"),
                LeaseAnswer,
            )
            assert answer.granted is None and answer.ticket, answer
            tickets.append(answer.ticket)
        claimed: dict[str, str] = {}

        async def all_claimed() -> bool:
            for ticket in tickets:
                if ticket not in claimed and await offered(handle, ticket) is not None:
                    claimed[ticket] = (await claim(handle, ticket)).lease
            assert len(await pool_devices(control, pool_name)) <= 20
            return len(claimed) == len(tickets)

        await eventually(all_claimed, what="20 tickets granted", timeout=240)
        book = await view(handle)
        # First come, first served: granted in the order the tickets were made.
        by_ask = sorted(book.leases, key=lambda x: (x.queued_at, x.holder))
        assert [x.holder for x in by_ask] == [f"h{i:02}" for i in range(20)]
        granted_at = [x.granted_at for x in by_ask]
        assert granted_at == sorted(granted_at)
        assert len(await pool_devices(control, pool_name)) == 20

        for lease_id in claimed.values():
            await release(handle, lease_id)

        seen: list[dict[str, Any]] = []  # the last status read: a timeout says why

        async def idle_known(after: str | None = None) -> dict[str, Any] | None:
            status = await handle.query("status")
            seen[:] = [status]
            cond = condition(status, "Autoscaling") or {}
            stamp = status.get("lastReconciled")
            fresh = after is None or (stamp is not None and when(stamp) > when(after))
            held = "20 kept until idle for scaleDownAfter" in cond.get("message", "")
            return status if fresh and held and status["leasedDevices"] == 0 else None

        before = await eventually(idle_known, what="all given back", timeout=30)
        await workers.restart()  # cached runs gone: the pool comes back by replay
        # The first pass after the restart may wait on a listing the restart cut: it is tried
        # again after the activity's heartbeat timeout (10 s, activities/models.py) and a
        # retry (PROVIDER_RETRY, 1 s), and the run comes back by a replay of its whole
        # history (20 creates, 20 leases); under a loaded CI that took past 30 s. The size
        # held is what is proven: `scaleDownAfter` is an hour, a longer wait proves as much
        # (60 s: with the grants before it, within the suite's 120 s per test).
        try:
            after = await eventually(
                lambda: idle_known(before["lastReconciled"]), what="a pass after", timeout=60
            )
        except AssertionError as err:
            raise AssertionError(f"{err}; before: {before}; last status: {seen}") from None
        assert (after["desiredFromDemand"], after["desiredReplicas"]) == (0, 20), after
        assert len(await pool_devices(control, pool_name)) == 20
    finally:
        await handle.cancel()


async def test_a_schedule_warms_the_pool_before_its_window_opens(
    env: Any, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    """A window two minutes ahead is within its warm-up (a minute per 10 devices, then a
    boot): the pool grows to its floor before it opens, with no lease asked."""
    # Read in a zone of its own, as a campaign's is (a pool's input decodes inside the
    # workflow sandbox: the zone must be known there too).
    opens = datetime.now(ZoneInfo("Europe/Berlin")) + timedelta(minutes=2)
    window = {
        "cron": f"{opens.minute} {opens.hour} * * *",
        "duration": "1h",
        "minReplicas": 2,
        "timeZone": "Europe/Berlin",
    }
    pool = beta_pool(pool_name, 0, **autoscale(), schedule=[window])
    # As on a worker of its own: nothing outside the sandbox has read the zone yet.
    ZoneInfo.clear_cache()
    handle = await env.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=pool.metadata, spec=pool.spec, settings=FAST),
        id=names.pool_workflow_id(pool_name),
        task_queue=names.TASK_QUEUE,
    )
    try:

        async def warmed() -> dict[str, Any] | None:
            status = await handle.query("status")
            cond = condition(status, "Autoscaling") or {}
            return status if "raised to the schedule's floor 2" in cond.get("message", "") else None

        status = await eventually(warmed, what="the floor applied", timeout=30)
        assert (status["desiredFromDemand"], status["desiredReplicas"]) == (2, 2), status
        assert status.get("activeSchedule") is None  # warming, not open yet
        await eventually(lambda: _count_is(control, pool_name, 2), what="two devices", timeout=60)
    finally:
        await handle.cancel()


async def _count_is(control: httpx.AsyncClient, pool: str, n: int) -> bool:
    return len(await pool_devices(control, pool)) == n
