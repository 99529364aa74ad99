"""Issue 39, "the same API on a BrowserPool": leases of profiles on the node stack of
test_bp_nodes.py (a pool worker, node workers in process over emulated BitBrowser nodes,
`calls.NODE_PICKUP` shortened), on a dev server of this module's.

The lease updates are sent as any client sends them (the workflow's update names, plain
models); the emulator is the ground truth of which profiles exist.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from devicepool.api.autoscale import AutoscaleSpec
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.api.names import QUERY_EVENTS, TASK_QUEUE, UPDATE_SCALE, browser_pool_workflow_id
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.workflows.browserpool.messages import BrowserPoolInput
from devicepool.workflows.browserpool.workflow import BrowserPoolWorkflow
from devicepool.workflows.reconciler.messages import Accepted, ScaleRequest
from tests.browserpool.test_bp_nodes import (
    SETTINGS,
    eventually,
    node_stack,
    placement,
    spread_now,
    spread_open,
    start_browser_pool,
    status,
)
from tests.helpers import leases
from tests.helpers.leases import granted
from tests.helpers.servers import dev_server

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await dev_server() as server:
        yield server


async def lease_on(handle: WorkflowHandle[Any, Any], node: str) -> str:
    """A profile on `node`, for 10 minutes: the lease id (the profile is its answer's)."""
    return (await granted(handle, selector={"node": node}, holder="test", duration="10m")).lease


async def release(handle: WorkflowHandle[Any, Any], lease: str, *, replace: bool = False) -> str:
    return (await leases.release(handle, lease, replace=replace)).reason


async def reasons(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    events = (await handle.query(QUERY_EVENTS)).get("events", [])
    return [(e["reason"], e.get("message", "")) for e in events]


async def test_a_leased_profile_is_kept_through_a_scale_to_0_and_replaced_after_use(
    env: WorkflowEnvironment,
) -> None:
    client = env.client
    pool = f"bp-lease-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as (account, _):
        handle = await start_browser_pool(client, pool, 2)
        first = await spread_open(handle, account, pool)

        # A lease by selector: node-2's profile, seen in the `leases` query and the status.
        lease = await lease_on(handle, "node-2")
        view = await leases.view(handle)
        [held] = view.leases
        assert held.id == lease and held.holder == "test", view
        used = held.device
        assert used in first["ids"]
        assert (await status(handle))["leasedDevices"] == 1

        # Released with `replace`: that profile is deleted and a new one made for its slot.
        assert await release(handle, lease, replace=True) == "Released"

        async def replaced() -> dict[str, Any] | None:
            truth = await spread_now(handle, account, pool)
            return truth if truth is not None and used not in truth["ids"] else None

        after = await eventually(replaced, timeout=30, what="the used profile replaced")
        assert after["total"] == 2
        said = await reasons(handle)
        assert ("ReplaceRequested", f"{used} replaced after use (lease released)") in said
        assert any(r == "Deleted" and m.endswith("replaced after use") for r, m in said), said
        assert (await status(handle))["leasedDevices"] == 0

        # Leased again, then the pool scaled to 0: the leased profile stays, uncounted.
        lease = await lease_on(handle, "node-2")
        kept = (await leases.view(handle)).leases[0].device
        scaled = await handle.execute_update(
            UPDATE_SCALE, ScaleRequest(replicas=0), result_type=Accepted
        )
        assert scaled.replicas == 0

        async def only_the_leased_one() -> dict[str, Any] | None:
            s = await status(handle)
            progressing = {c["type"]: c for c in s["conditions"]}["Progressing"]
            truth = placement(account, pool)
            if truth["ids"] == {kept} and progressing["reason"] == "LeasesHeld":
                return s
            return None

        s = await eventually(only_the_leased_one, timeout=30, what="only the leased profile")
        assert s["profileIds"] == [] and s["leasedDevices"] == 1, s
        assert kept in {c["type"]: c for c in s["conditions"]}["Progressing"]["message"]
        assert any(r == "KeptForLease" and kept in m for r, m in await reasons(handle))
        await asyncio.sleep(2.5)  # passes go on (resync 1 s): it stays while leased
        assert placement(account, pool)["ids"] == {kept}

        # Released: it goes.
        assert await release(handle, lease) == "Released"

        async def none_left() -> bool:
            return placement(account, pool)["total"] == 0

        await eventually(none_left, timeout=30, what="the released profile deleted")
        s = await status(handle)
        assert s["leasedDevices"] == 0
        said = await reasons(handle)
        assert any(
            r == "Deleted" and m.startswith(f"profile {kept} ") and "above replicas 0" in m
            for r, m in said
        ), said
        await handle.terminate()
        stats = account.emulator.stats()
        assert stats["duplicates"] == {"byName": {}, "byRemark": {}}, stats["duplicates"]


async def test_an_autoscaled_browser_pool_grows_for_a_ticket_and_shrinks_when_idle(
    env: WorkflowEnvironment,
) -> None:
    """Issue 40 on a BrowserPool: at zero, a lease asked with a wait is a ticket that grows
    the pool; the profile granted, released, goes after `scaleDownAfter`; `scale` is refused."""
    client = env.client
    pool = f"bp-auto-{uuid.uuid4().hex[:4]}"
    autoscale = AutoscaleSpec.model_validate(
        {"maxReplicas": 3, "scaleDownAfter": "1s", "stabilization": "0s"}
    )
    async with node_stack(client) as (account, _):
        handle = await start_browser_pool(client, pool, 0, autoscale=autoscale)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2))
        assert "autoscale.minReplicas/maxReplicas" in str(refused.value.cause)

        asked = await leases.lease(handle, holder="test", duration="10m", wait="60s")
        assert asked.granted is None and asked.ticket, asked
        offer = await eventually(
            lambda: leases.offered(handle, asked.ticket or ""), timeout=40, what="an offer"
        )
        assert offer is not None and offer.granted is not None
        lease = (await leases.claim(handle, asked.ticket or "")).lease

        async def said_leased() -> dict[str, Any] | None:
            s = await status(handle)
            autoscaling = {c["type"]: c for c in s["conditions"]}["Autoscaling"]
            return s if autoscaling["message"] == "1 leased + 0 queued + buffer 0 = 1" else None

        s = await eventually(said_leased, timeout=20, what="the Autoscaling line")
        assert (s["desiredReplicas"], s["desiredFromDemand"]) == (1, 1), s

        assert await release(handle, lease) == "Released"

        async def none_left() -> bool | None:
            return True if not placement(account, pool)["ids"] else None

        await eventually(none_left, timeout=40, what="the idle profile gone")
        assert (await status(handle))["desiredReplicas"] == 0
        said = await reasons(handle)
        assert [m.split(":")[0] for r, m in said if r == "Autoscaled"] == [
            "replicas 0 -> 1",
            "replicas 1 -> 0",
        ], said
        await handle.terminate("test over")


async def test_a_quiet_autoscaled_browser_pool_grows_and_shrinks_without_its_resync(
    env: WorkflowEnvironment,
) -> None:
    """With the default resync (30 s), a ticket grows the pool and a profile given back goes
    after `scaleDownAfter` within a few seconds: the lease message wakes the pool, and the
    pass that writes the size plans from it (not the pass a resync later)."""
    client = env.client
    pool = f"bp-quiet-{uuid.uuid4().hex[:4]}"
    autoscale = AutoscaleSpec.model_validate(
        {"maxReplicas": 3, "scaleDownAfter": "1s", "stabilization": "0s"}
    )
    quiet = SETTINGS.model_copy(update={"resync_seconds": 30.0})
    async with node_stack(client) as (account, _):
        handle = await client.start_workflow(
            BrowserPoolWorkflow.run,
            BrowserPoolInput(
                metadata=ObjectMeta(name=pool),
                spec=BrowserPoolSpec(replicas=0, autoscale=autoscale),
                settings=quiet,
            ),
            id=browser_pool_workflow_id(pool),
            task_queue=TASK_QUEUE,
        )

        async def sized_at_zero() -> bool:
            return (await status(handle)).get("desiredFromDemand") == 0

        await eventually(sized_at_zero, timeout=20, what="sized at zero")
        asked = await leases.lease(handle, holder="test", duration="10m", wait="60s")
        assert asked.granted is None and asked.ticket, asked
        try:
            await eventually(
                lambda: leases.offered(handle, asked.ticket or ""), timeout=15, what="an offer"
            )
        except AssertionError as err:
            raise AssertionError(
                f"{err}; status: {await status(handle)}; "
                f"events: {await handle.query(QUERY_EVENTS)}; placement: {placement(account, pool)}"
            ) from None
        lease = (await leases.claim(handle, asked.ticket or "")).lease
        assert await release(handle, lease) == "Released"

        async def none_left() -> bool | None:
            return True if not placement(account, pool)["ids"] else None

        await eventually(none_left, timeout=12, what="the idle profile gone")
        await handle.terminate("test over")


async def test_a_profile_a_pass_made_leasable_is_offered_by_a_pass_soon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass offers from the last pass's look: the pass that first sees a profile open
    (made for a ticket) cannot offer it. It must not then wait the whole resync (30 s): a
    pass comes soon and offers it. Seen once, no second soon pass (an unmatched ticket
    does not loop the pool every two seconds)."""
    from devicepool.workflows.browserpool import kind as kind_module
    from devicepool.workflows.browserpool.kind import SOON, BrowserKind, Outcome
    from devicepool.workflows.browserpool.plan import NodeProfile, Placement
    from tests.browserpool.test_bp_leases import FakeHost, seen_of

    waited: list[float] = []

    async def wait_condition(_check: Any, *, timeout: Any, summary: str) -> None:
        waited.append(timeout.total_seconds())

    monkeypatch.setattr(kind_module, "wait_condition", wait_condition)
    host = FakeHost()
    host.replan = False
    host.settings = SETTINGS.model_copy(update={"resync_seconds": 30.0})
    host.s.status = host.s.status.model_copy(update={"leases_queued": 1})
    kind = BrowserKind(host)  # type: ignore[arg-type]
    kind._last = Outcome(seen_of([]), Placement())
    assert kind.lease_candidates() == []  # the pass's settle: nothing to offer yet
    opened = NodeProfile("p0", 0, "node-1", True)
    kind._last = Outcome(seen_of([opened]), Placement(held=[opened]))  # its publish
    await kind.wait(kind._last)
    assert [c.id for c in kind.lease_candidates()] == ["p0"]  # the next pass offers it
    await kind.wait(kind._last)
    assert waited == [SOON, 30.0]
