"""A rollout bills at most `replicas + maxSurge`, a busy device included (issue 37, item 6).

Against the dev server and the emulator's ground truth, sampled every 0.1 s:
a pool of 3 under `rollout: {maxSurge: 0, maxUnavailable: 1}` changes template
while one device is busy. Before, the busy device's replacement was created
beside it and the pool billed 4 for 3 for the whole session; now it waits for
the session to end. Never fewer than 2 serve; the status says `RollingOut` until
the busy one is replaced. The larger scenario (10 devices, 3 busy, maxSurge 2)
is decided pass by pass, pure, in `test_pool_rollout_passes.py`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.testing import eventually
from tests.helpers.manifests import beta_pool, reapply
from tests.helpers.workflow_stack import POLL, pool_devices
from tests.workflows.test_pool_device_control import _gone, ready_ids, session, start

pytestmark = pytest.mark.devserver

# The samples of what bills keep their 0.1 s, not POLL.

ROLLOUT = {"maxSurge": 0, "maxUnavailable": 1}


async def test_a_busy_drifted_device_is_replaced_within_max_surge_zero(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start(env, pool_name, 3, rollout=ROLLOUT)
    old = await eventually(
        lambda: ready_ids(control, pool_name, 3), timeout=60, what="3 ready", every=POLL
    )
    busy = old[0]
    await session(control, busy, True)
    await reapply(handle, beta_pool(pool_name, 3, osVersion="15", rollout=ROLLOUT))
    most, fewest = 3, 3

    def sample(devices: list[dict]) -> None:
        nonlocal most, fewest
        # Every device the provider has not terminated bills, terminating ones too.
        most = max(most, len(devices))
        fewest = min(fewest, sum(d["status"] in ("ready", "busy") for d in devices))

    async def all_but_the_busy_rolled() -> bool:
        devices = await pool_devices(control, pool_name)
        sample(devices)
        ids = {d["id"] for d in devices}
        serving = [d for d in devices if d["status"] in ("ready", "busy")]
        return ids & set(old) == {busy} and len(serving) == 3 == len(devices)

    await eventually(all_but_the_busy_rolled, timeout=90, every=0.1, what="the idle two rolled")
    # The busy one keeps its session: nothing is created beside it meanwhile.
    for _ in range(30):
        sample(await pool_devices(control, pool_name))
        await asyncio.sleep(0.1)
    assert most <= 3, f"{most} devices billed for 3 under maxSurge 0"
    # The status says the rollout waits for it (the pool sees the last boot at its next watch).
    await eventually(
        lambda: _rolling(handle, "True", updated=2), what="RollingOut, 2 of 3 updated", every=POLL
    )
    await session(control, busy, False)

    async def done() -> bool:
        devices = await pool_devices(control, pool_name)
        sample(devices)
        ready = [d for d in devices if d["status"] == "ready"]
        return busy not in {d["id"] for d in devices} and len(ready) == 3 == len(devices)

    await eventually(done, timeout=90, every=0.1, what="the busy one rolled once idle")
    assert most <= 3, f"{most} devices billed for 3 under maxSurge 0"
    assert fewest >= 2, f"only {fewest} serving under maxUnavailable 1"
    await eventually(
        lambda: _rolling(handle, "False", updated=3), what="RollingOut complete", every=POLL
    )
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown", every=POLL)


async def _rolling(handle: WorkflowHandle[Any, Any], rolling: str, *, updated: int) -> bool:
    status = await handle.query("status")
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    return conditions.get("RollingOut") == rolling and status["updatedDevices"] == updated
