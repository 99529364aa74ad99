"""A leased cloud phone on the BitBrowser Local API is taken by nothing until it is given back.

Local API phones report no session: a lease is the only busy signal they have. On the
cloud-phone stack (a namespace of the session's dev server, an in-process emulator 10
times faster than real time, as in `test_pool_cloud_phones.py`), one pool goes through a
scale-down, a template change under `rollout` and a lifetime expiry with its phones
leased: none of them touches a leased phone, and each is done right after the release,
though the pool resyncs only every minute (a release asks for a pass itself). And (pure)
`onRelease: replace` replaces a device used, not one whose offer was never claimed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.api import names
from devicepool.testing import eventually
from devicepool.workflows.pool import leasable
from devicepool.workflows.pool.messages import Accepted, PoolInput, ScaleRequest
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler.lease_messages import (
    Granted,
)
from devicepool.workflows.reconciler.lease_records import EndReason
from tests.helpers import leases
from tests.helpers.leases import all_ready, ended, granted, reasons
from tests.helpers.manifests import beta_pool, reapply
from tests.helpers.phones import ACCOUNT, Phones, phone_stack
from tests.helpers.settings import PHONES
from tests.helpers.workflow_stack import POLL

# A resync a minute, and no watch answer without news: what a pool does within seconds of
# a release, it does because the release asked for a pass.
SETTINGS = PHONES.model_copy(update={"resync_seconds": 60.0, "watch_max_seconds": 60})
PROMPT = 10.0  # seconds from a release to what it let the pool do
ROLLOUT = {"maxSurge": 1, "maxUnavailable": 0}


@pytest.fixture(scope="module")
async def phones(env: WorkflowEnvironment) -> AsyncIterator[Phones]:
    async with phone_stack(env, name="phones-leases", seed=39, settings=SETTINGS) as phones:
        yield phones


def pool(replicas: int, **spec: Any) -> Any:
    return beta_pool(
        "phones-leased",
        replicas,
        provider={"account": ACCOUNT},
        proxy={"poolRef": "proxyseller-us", "sessionTTL": "15m"},
        rollout=ROLLOUT,
        **spec,
    )


async def lease(handle: WorkflowHandle[Any, Any], holder: str) -> Granted:
    return await granted(handle, holder=holder, duration="30m")


async def release(handle: WorkflowHandle[Any, Any], lease_id: str) -> float:
    """Release a lease; when (monotonic), to time what the pool does after it."""
    answer = await leases.release(handle, lease_id)
    assert answer.reason == "Released", answer
    return time.monotonic()


@pytest.mark.devserver
async def test_a_leased_phone_outlives_a_scale_down_a_rollout_and_its_lifetime(
    phones: Phones,
) -> None:
    v1 = pool(2)
    handle = await phones.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=v1.metadata, spec=v1.spec, settings=SETTINGS),
        id=names.pool_workflow_id("phones-leased"),
        task_queue=names.TASK_QUEUE,
    )
    await eventually(lambda: all_ready(handle, 2), what="2 phones ready", timeout=60, every=POLL)
    a, b = await lease(handle, "a"), await lease(handle, "b")

    # Scale-down: both leased, none goes; released, one goes at once.
    await handle.execute_update(names.UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
    await eventually(lambda: _blocked(handle), what="ScaleDownBlocked", timeout=20, every=POLL)
    assert phones.state(a.device) == phones.state(b.device) == ("running", "active")
    released = await release(handle, b.lease)
    await eventually(
        lambda: _state(phones, b.device, "off"), what="b shut down", timeout=PROMPT, every=POLL
    )
    await _prompt(released, "the scale-down")
    assert phones.state(a.device) == ("running", "active")

    # A template change under rollout: the leased phone is not rolled; released, it is.
    await reapply(handle, pool(1, osVersion="15"))
    await eventually(
        lambda: _rolling(handle, "True", updated=0), what="a drifted", timeout=20, every=POLL
    )
    await asyncio.sleep(2)  # passes that would roll it (a surge phone would boot by now)
    assert phones.state(a.device) == ("running", "active")
    assert await _members(handle) == [a.device]
    released = await release(handle, a.lease)
    await eventually(
        lambda: _state(phones, a.device, "off"), what="a rolled", timeout=30, every=POLL
    )
    await eventually(
        lambda: _rolling(handle, "False", updated=1), what="rolled out", timeout=30, every=POLL
    )
    rolled_in = time.monotonic() - released
    (c_device,) = await _members(handle)
    assert c_device != a.device

    # A lifetime expiry, grace included: a leased phone stays; released, it is replaced.
    c = await lease(handle, "c")
    assert c.device == c_device
    generation = (await handle.query("status"))["observedGeneration"]
    await reapply(handle, pool(1, osVersion="15", lifetime={"maxAge": "1s", "gracePeriod": "1s"}))
    await eventually(
        lambda: _generation(handle, generation + 1), what="the lifetime applied", every=POLL
    )
    await asyncio.sleep(1)  # c is past maxAge + gracePeriod: forced out, were it not leased
    assert phones.state(c.device) == ("running", "active")
    assert await _members(handle) == [c.device]
    assert "Expired" not in await reasons(handle)
    released = await release(handle, c.lease)
    await eventually(
        lambda: _state(phones, c.device, "off"), what="c expired", timeout=30, every=POLL
    )
    expired_in = time.monotonic() - released
    assert "Expired" in await reasons(handle)
    # Each deferred step done within a pass or two of its release, never a minute's resync.
    assert rolled_in < 30 and expired_in < 30, (rolled_in, expired_in)
    print(f"rolled {rolled_in:.1f}s, expired {expired_in:.1f}s after their release")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()


def test_on_release_replace_spares_a_device_whose_offer_was_never_claimed() -> None:
    """`onRelease: replace` replaces a device after use: not one offered to a ticket whose
    holder never claimed it (nobody used it), nor one gone or replaced already."""
    now, state = datetime(2026, 12, 5, tzinfo=UTC), PoolState()
    ends = {
        "unclaimed": EndReason.UNCLAIMED,
        "idle": EndReason.IDLE,
        "released": EndReason.RELEASED,
        "lost": EndReason.DEVICE_LOST,
        "replaced": EndReason.REPLACED,
    }
    gone = [ended(d, why, at=now) for d, why in ends.items()]
    said = leasable.replace_used(state, gone, listed=set(ends), now=now)
    assert sorted(state.doomed) == ["idle", "released"]
    assert [h.message for h in said] == ["idle, released replaced after use (lease released)"]


async def _prompt(released: float, what: str) -> None:
    took = time.monotonic() - released
    assert took < PROMPT, f"{what} took {took:.1f}s after the release"


async def _blocked(handle: WorkflowHandle[Any, Any]) -> bool:
    status = await handle.query("status")
    blocked = {c["type"]: c["status"] for c in status["conditions"]}.get("ScaleDownBlocked")
    return blocked == "True"


async def _rolling(handle: WorkflowHandle[Any, Any], rolling: str, *, updated: int) -> bool:
    status = await handle.query("status")
    said = {c["type"]: c["status"] for c in status["conditions"]}.get("RollingOut")
    return bool(said == rolling and status["updatedDevices"] == updated)


async def _generation(handle: WorkflowHandle[Any, Any], n: int) -> bool:
    return bool((await handle.query("status"))["observedGeneration"] == n)


async def _members(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return sorted((await handle.query("status"))["deviceIds"] or [])


async def _state(phones: Phones, device: str, power: str) -> bool:
    return phones.state(device)[0] == power
