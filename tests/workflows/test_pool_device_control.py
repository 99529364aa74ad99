"""One device and the pool's remediation, by hand; a disruption budget holding a scale-down.

Against the dev server and the emulator's ground truth (FAST settings: offline
after 3 s, no idle grace):
- `protect` keeps a device through a scale-down that would otherwise take it
  (the oldest idle goes first); `replace` takes one now; `--when-idle` waits
  for a busy device's session to end, its replacement already created;
- `pause` stops the health check replacing an offline device (it is still
  shown), `resume` lets it;
- a device the pool does not have is refused by the update, and nothing changes;
- a template change on 4 devices rolls out within maxSurge 2, busy devices last.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.client import PoolClient
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import PoolInput
from tests.helpers.manifests import beta_pool, reapply
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import pool_counts, pool_devices

pytestmark = pytest.mark.devserver


async def start(env: WorkflowEnvironment, name: str, replicas: int, **spec: Any) -> Any:
    pool = beta_pool(name, replicas, **spec)
    return await env.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=pool.metadata, spec=pool.spec, settings=FAST),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


async def ready_ids(control: httpx.AsyncClient, name: str, want: int) -> list[str] | None:
    devices = await pool_devices(control, name)
    ready = sorted((d["createdAt"], d["id"]) for d in devices if d["status"] == "ready")
    return [i for _, i in ready] if len(ready) == want and len(devices) == want else None


async def events(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    return list((await handle.query("events"))["events"])


async def session(control: httpx.AsyncClient, device: str, active: bool) -> None:
    answer = await control.post(f"/_emulator/devices/{device}/session", json={"active": active})
    answer.raise_for_status()


async def test_protect_replace_and_pause_by_hand(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    pools = PoolClient(env.client)
    handle = await start(env, pool_name, 3)
    oldest, middle, newest = await eventually(
        lambda: ready_ids(control, pool_name, 3), timeout=60, what="3 ready"
    )

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("protect_device", {"device": "nope"})
    assert "device 'nope' is not in this pool (its devices: " in str(refused.value.cause)

    # Protected, the oldest idle device is passed over by a scale-down to 2.
    assert "protected until unprotected" in await pools.protect_device(pool_name, oldest)
    assert "Protected" in [e["reason"] for e in await events(handle)]
    await pools.scale(pool_name, 2)
    kept = await eventually(lambda: ready_ids(control, pool_name, 2), what="2 left")
    assert oldest in kept and middle not in kept
    status = await handle.query("status")
    assert status["protectedDevices"] == [oldest]

    # Replace now: the device goes and another takes its place.
    await pools.replace_device(pool_name, oldest)
    renewed = await eventually(
        lambda: _without(control, pool_name, 2, oldest), timeout=60, what="the replacement"
    )
    assert newest in renewed
    # ...and once idle: a busy device stays until its session ends.
    await session(control, newest, True)
    await pools.replace_device(pool_name, newest, when_idle=True)
    three = await eventually(lambda: _count(control, pool_name, 3), timeout=60, what="surge")
    assert newest in three  # its replacement is created beside it
    await session(control, newest, False)
    await eventually(lambda: _without(control, pool_name, 2, newest), timeout=60, what="retired")

    # Paused, an offline device is shown and not replaced; resumed, it is.
    await pools.pause_remediation(pool_name)
    victim = (await eventually(lambda: ready_ids(control, pool_name, 2)))[0]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def paused_and_shown() -> bool:
        status = await handle.query("status")
        paused = {c["type"]: c for c in status["conditions"]}.get("RemediationPaused", {})
        return status["offlineDevices"] == 1 and paused.get("reason") == "PausedByUser"

    await eventually(paused_and_shown, what="RemediationPaused=PausedByUser with 1 offline")
    await _still_there(control, pool_name, victim, seconds=FAST.offline_after_seconds + 2)
    await pools.resume_remediation(pool_name)
    await eventually(
        lambda: _without(control, pool_name, 2, victim), timeout=60, what="the offline one replaced"
    )
    reasons = [e["reason"] for e in await events(handle)]
    for said in ("ReplaceRequested", "RemediationPausedByUser", "RemediationResumed"):
        assert said in reasons, reasons
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown")


async def _without(
    control: httpx.AsyncClient, name: str, count: int, gone: str
) -> list[str] | None:
    """The pool's device ids once it has `count` ready and `gone` is not among them."""
    devices = await pool_devices(control, name)
    ids = [d["id"] for d in devices]
    ready = [d for d in devices if d["status"] == "ready"]
    return ids if gone not in ids and len(ready) == count == len(devices) else None


async def _count(control: httpx.AsyncClient, name: str, count: int) -> list[str] | None:
    devices = await pool_devices(control, name)
    ready = [d["id"] for d in devices if d["status"] in ("ready", "busy")]
    return ready if len(ready) == count else None


async def _still_there(
    control: httpx.AsyncClient, name: str, device: str, *, seconds: float
) -> None:
    import asyncio

    await asyncio.sleep(seconds)
    assert device in [d["id"] for d in await pool_devices(control, name)]


async def _gone(control: httpx.AsyncClient, name: str) -> bool:
    return not await pool_devices(control, name)


# Kept on the dev server beside its pure twin (test_pool_rollout_passes): here creates stay in
# flight across passes, so surge counting that misses a batch under way is caught.
async def test_a_template_change_rolls_out_within_surge_busy_devices_last(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The scenario, smaller (the pool had 10 with 3 busy): osVersion
    # 14 -> 15 on a pool of 4 with 2 busy devices under rollout {maxSurge: 2,
    # maxUnavailable: 0}: never fewer than 4 serving, the 2 idle ones replaced in a
    # surge of 2, then a surge of 2 for the busy, which go only after their sessions
    # end, creates 4 + 4.
    rollout = {"maxSurge": 2, "maxUnavailable": 0}
    size = 4
    handle = await start(env, pool_name, size, rollout=rollout)
    old = await eventually(lambda: ready_ids(control, pool_name, size), timeout=90, what="ready")
    busy = old[:2]
    for device in busy:
        await session(control, device, True)
    await reapply(handle, beta_pool(pool_name, size, osVersion="15", rollout=rollout))
    fewest, most = size, size

    async def rolled_except_busy() -> bool:
        nonlocal fewest, most
        devices = await pool_devices(control, pool_name)
        serving = [d for d in devices if d["status"] in ("ready", "busy")]
        staying = [d for d in devices if d["status"] != "terminating"]
        fewest, most = min(fewest, len(serving)), max(most, len(staying))
        left = sorted(d["id"] for d in devices if d["id"] in old)
        return left == sorted(busy) and len(serving) == size + 2

    await eventually(rolled_except_busy, timeout=120, every=0.1, what="all but the busy rolled")

    async def seen_by_the_pool() -> dict | None:
        # The pool learns of the last boot at its next watch, a moment after the provider.
        status = await handle.query("status")
        # Every idle device replaced, plus the surge's 2 waiting for the busy ones.
        return status if status["updatedDevices"] == size - len(busy) + 2 else None

    status = await eventually(seen_by_the_pool, timeout=30, what="updatedDevices in the status")
    rolling = {c["type"]: c for c in status["conditions"]}["RollingOut"]
    assert rolling["status"] == "True", status
    for device in busy:
        await session(control, device, False)

    async def done() -> bool:
        nonlocal fewest
        devices = await pool_devices(control, pool_name)
        fewest = min(fewest, sum(d["status"] in ("ready", "busy") for d in devices))
        status = await handle.query("status")
        complete = {c["type"]: c["status"] for c in status["conditions"]}["RollingOut"] == "False"
        return complete and len(devices) == size and not {d["id"] for d in devices} & set(old)

    await eventually(done, timeout=90, every=0.1, what="the rollout complete")
    assert fewest >= size, f"only {fewest} serving during the rollout"
    # (a device being terminated is not counted, as Cluster API does not count one being deleted)
    assert most <= size + 2, f"{most} devices at once: more than maxSurge 2 above {size}"
    assert (await pool_counts(control, pool_name))["created"] == 2 * size  # nothing extra
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown")


async def test_a_disruption_budget_of_zero_holds_a_scale_down_until_lifted(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    freeze = {"budgets": [{"devices": 0, "reasons": ["ScaleDown"]}]}
    handle = await start(env, pool_name, 2, disruption=freeze)
    await eventually(lambda: ready_ids(control, pool_name, 2), timeout=60, what="2 ready")
    await PoolClient(env.client).scale(pool_name, 1)

    async def blocked() -> bool:
        status = await handle.query("status")
        kinds = {c["type"]: c for c in status["conditions"]}
        held = kinds.get("ScaleDownBlocked", {})
        return held.get("status") == "True" and held.get("reason") == "DisruptionBudget"

    await eventually(blocked, what="ScaleDownBlocked while the budget is 0")
    assert len(await pool_devices(control, pool_name)) == 2  # nothing taken
    await reapply(handle, beta_pool(pool_name, 1))
    await eventually(lambda: ready_ids(control, pool_name, 1), timeout=60, what="scaled to 1")
    await handle.cancel()
    await eventually(lambda: _gone(control, pool_name), timeout=60, what="teardown")
