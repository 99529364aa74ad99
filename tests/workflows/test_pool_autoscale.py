"""A DevicePool that sizes itself (`spec.autoscale`) on the session's stack: a pool at zero
grows for the tickets asked of it and grants them first come, first served; an idle device
goes after `scaleDownAfter`, a leased one never; `scale` is refused; what it shows.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowUpdateFailedError

from devicepool.api import names
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import ScaleRequest
from devicepool.workflows.reconciler.lease_messages import LeaseAnswer, LeaseRequest
from tests.helpers.leases import claim, offered, release, start_beta_pool
from tests.helpers.workflow_stack import pool_devices

pytestmark = pytest.mark.devserver


def autoscale(**fields: Any) -> dict[str, Any]:
    return {"autoscale": {"maxReplicas": 5, "stabilization": "0s", **fields}}


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
