"""An expired or replaced device leaves only once its replacement serves (issue 37, item 13).

Against the dev server and the emulator's ground truth (FAST settings: no idle
grace), sampled every 0.1 s: a pool of 2 whose devices pass `lifetime.maxAge`
together, and `replace DEVICE --when-idle` on an idle device, never serve fewer
than 2. Before, each expired device was terminated in the pass that ordered its
replacement (a pool of 2 sat at 0/2 ready while they booted), said `ScaledDown`.
With no room beside them (a spendCap), they go first one at a time: pure, in
`test_pool_leaving.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.client import PoolClient
from devicepool.testing import eventually
from tests.helpers.workflow_stack import POLL, pool_devices
from tests.workflows.test_pool_device_control import _gone, events, ready_ids, start

pytestmark = pytest.mark.devserver

# The samples of what serves keep their 0.1 s, not POLL.


async def fewest_serving_until(
    control: httpx.AsyncClient, pool_name: str, done: Callable[[set[str]], bool], what: str
) -> int:
    """Wait (polling every 0.1 s) until the pool's devices' ids pass `done` and it has
    exactly 2 devices, both serving (ready or busy); returns the fewest serving seen."""
    fewest = 2

    async def finished() -> bool:
        nonlocal fewest
        devices = await pool_devices(control, pool_name)
        serving = [d for d in devices if d["status"] in ("ready", "busy")]
        fewest = min(fewest, len(serving))
        return done({d["id"] for d in devices}) and len(serving) == 2 == len(devices)

    await eventually(finished, timeout=60, every=0.1, what=what)
    return fewest


async def test_expired_devices_leave_only_once_their_replacements_serve(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Old enough to be seen ready first (a boot is 1.5 s here), young enough not to wait long.
    handle = await start(env, pool_name, 2, lifetime={"maxAge": "8s"})
    first = await eventually(
        lambda: ready_ids(control, pool_name, 2), timeout=60, what="2 ready", every=POLL
    )
    fewest = await fewest_serving_until(
        control, pool_name, lambda ids: not ids & set(first), "both expired devices replaced"
    )
    assert fewest >= 2, f"only {fewest} of 2 serving while expired devices were replaced"
    said = await events(handle)
    reasons = [e["reason"] for e in said]
    assert "Expired" in reasons and "ScaledDown" not in reasons, said
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown", every=POLL)


async def test_an_idle_device_replaced_when_idle_waits_for_its_replacement(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start(env, pool_name, 2)
    old, kept = await eventually(
        lambda: ready_ids(control, pool_name, 2),
        timeout=60,
        what="2 ready",
        every=POLL,
    )
    await PoolClient(env.client).replace_device(pool_name, old, when_idle=True)
    fewest = await fewest_serving_until(
        control, pool_name, lambda ids: old not in ids and kept in ids, "the device replaced"
    )
    assert fewest >= 2, f"only {fewest} of 2 serving while a device was replaced when idle"
    reasons = [e["reason"] for e in await events(handle)]
    assert "Replaced" in reasons and "ScaledDown" not in reasons, reasons
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown", every=POLL)
