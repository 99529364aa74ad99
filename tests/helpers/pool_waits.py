"""Waits on a pool of the workflow stack, for the health and outage tests.

Converged, torn down, remediation paused or resumed, a condition true or false,
right after a provider listing: each reads the emulator's ground truth or the
pool's `status` query (tests/workflows: test_pool_health.py, test_pool_outage.py);
`watching`, the pool's watch activity started (test_pool_capacity.py, test_pool_worker_shutdown.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from temporalio.api.enums.v1 import PendingActivityState

from devicepool.testing import eventually, stats
from tests.helpers.histories import history_digest
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import condition, pool_counts, pool_devices

__all__ = [
    "converged",
    "created_at_least",
    "delete",
    "false_condition",
    "just_after_a_listing",
    "paused",
    "resumed",
    "true_condition",
    "watching",
]


async def converged(control: httpx.AsyncClient, name: str, n: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, name)
        ok = len(devices) == n and all(d["status"] == "ready" for d in devices)
        return devices if ok else None

    return await eventually(check, what=f"{n} ready devices in {name}", timeout=30)


async def delete(handle: Any, control: httpx.AsyncClient, name: str) -> None:
    await handle.cancel()
    try:
        await eventually(lambda: _zero(control, name), what=f"{name} torn down", timeout=30)
    except BaseException:
        print(await history_digest(handle._client, handle.id))
        raise


async def _zero(control: httpx.AsyncClient, name: str) -> bool:
    return (await stats(control))["devices"]["byPool"].get(name, 0) == 0


async def true_condition(handle: Any, type_: str) -> dict[str, Any] | None:
    cond = await condition(handle, type_)
    return cond if cond and cond["status"] == "True" else None


async def false_condition(handle: Any, type_: str) -> dict[str, Any] | None:
    cond = await condition(handle, type_)
    return cond if cond and cond["status"] == "False" else None


async def created_at_least(control: httpx.AsyncClient, name: str, n: int) -> bool:
    """Whether the emulator accepted at least `n` creates for this pool."""
    return (await pool_counts(control, name))["created"] >= n


# A pause or a resume waits for the health check's own reads, a few polls apart
# (triage.own_read_seconds), and each look is a `status` query (~10 ms of the worker's
# and the server's CPU): twice a second is enough.
PAUSE_EVERY = 0.5


async def paused(handle: Any) -> dict[str, Any]:
    """Wait for the pool's `RemediationPaused=True` and return the condition.

    (This wait shares two cores with the rest of make test: a generous bound.)
    """
    return await eventually(
        lambda: true_condition(handle, "RemediationPaused"),
        what="RemediationPaused=True",
        timeout=30,
        every=PAUSE_EVERY,
    )


async def resumed(handle: Any) -> dict[str, Any]:
    """Wait for the pool's `RemediationPaused=False` and return the condition."""
    return await eventually(
        lambda: false_condition(handle, "RemediationPaused"),
        what="resumed",
        timeout=30,
        every=PAUSE_EVERY,
    )


async def just_after_a_listing(pool: str) -> None:
    """Return right after a provider listing of the pool (by any worker activity),
    with no other one for 0.6 s after it (a watch that restarts lists twice in a row)."""

    async def quiet() -> bool:
        count = TimedASGITransport.lists[pool]
        await asyncio.sleep(0.6)
        return TimedASGITransport.lists[pool] == count

    count = TimedASGITransport.lists[pool]
    await eventually(lambda: _listed_since(pool, count), what="a listing", timeout=40, every=0.02)
    await eventually(quiet, what="no second listing right after it", timeout=30, every=0.02)


async def _listed_since(pool: str, count: int) -> bool:
    return TimedASGITransport.lists[pool] > count


async def watching(handle: Any) -> bool:
    """The pool's watch has started (holds a slot), not merely been scheduled."""
    described = await handle.describe()
    return any(
        a.activity_type.name == "watch_devices"
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for a in described.raw_description.pending_activities
    )
