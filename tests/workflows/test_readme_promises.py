"""Promises of docs/pools.md the other workflow tests leave untested, on the session's dev server.

- Scale down, what does not serve first (docs/pools.md, "Converging, scaling,
  teardown"): an idle surplus device is kept until it has been idle for
  `idleGraceSeconds` (every other workflow test runs with a grace of 0), then
  removed; a busy one never is, and goes once it has been idle for the grace
  too.
- Health, replace do not repair (docs/pools.md): the check wakes at a device's
  offline deadline, not at its next `healthSeconds` read (the interval here is
  far longer than the test).

Times come from the emulator's own clock (`updatedAt`, `lastActivityAt`,
`/_emulator/clock`), the clock the pool's plan compares with. The file's name
is older than docs/: these promises were the README's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_SCALE, health_workflow_id
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.histories import history_digest
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    Workers,
    condition,
    pool_counts,
    pool_devices,
    start_pool,
)

pytestmark = pytest.mark.devserver

GONE = {"terminating", "terminated"}
# Waits check the provider's devices or the pool's status (~5 ms of the test's and the
# server's CPU each) twice a second: the times compared are the emulator's own stamps,
# not when a check ran. The wait for the health check's clock keeps the default pace.
POLL = 0.5


def _instant(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def _device(control: httpx.AsyncClient, device_id: str) -> dict[str, Any]:
    response = await control.get(
        f"/api/v1/devices/{device_id}", headers={"Authorization": f"Bearer {ACCOUNTS['default']}"}
    )
    response.raise_for_status()
    return dict(response.json())


async def _emulator_now(control: httpx.AsyncClient) -> datetime:
    return _instant((await control.get("/_emulator/clock")).json()["now"])


async def _session(control: httpx.AsyncClient, device_id: str, *, active: bool) -> None:
    response = await control.post(
        f"/_emulator/devices/{device_id}/session", json={"active": active}
    )
    response.raise_for_status()


async def _ready(control: httpx.AsyncClient, name: str, n: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        devices = await pool_devices(control, name)
        ok = len(devices) == n and all(d["status"] == "ready" for d in devices)
        return devices if ok else None

    return list(
        await eventually(check, what=f"{n} ready devices in {name}", timeout=30, every=POLL)
    )


async def _removed_at(
    control: httpx.AsyncClient, device_id: str, *, keep_busy: str | None, timeout: float
) -> datetime:
    """When the provider started removing `device_id` (its `updatedAt` once it is
    terminating; a later `terminated` only moves that later). Meanwhile the busy
    device `keep_busy` must stay busy."""

    async def check() -> datetime | None:
        if keep_busy is not None:
            kept = await _device(control, keep_busy)
            assert kept["status"] == "busy", kept  # a busy device is never terminated
        device = await _device(control, device_id)
        return _instant(device["updatedAt"]) if device["status"] in GONE else None

    return await eventually(check, what=f"{device_id} removed", timeout=timeout, every=POLL)


async def test_an_idle_surplus_device_stays_for_the_grace_and_a_busy_one_until_idle_that_long(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    grace = timedelta(seconds=4)
    settings = FAST.model_copy(update={"idle_grace_seconds": grace.total_seconds()})
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    busy, idle = sorted(d["id"] for d in await _ready(control, pool_name, 2))
    await _session(control, busy, active=True)
    # A session that just ended: the device is ready, and its idle clock starts now.
    await _session(control, idle, active=True)
    await _session(control, idle, active=False)
    idle_since = _instant((await _device(control, idle))["lastActivityAt"])

    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=0), result_type=Accepted)

    # The pool says why it stays above its size (the busy device at least).
    async def blocked() -> dict[str, Any] | None:
        cond = await condition(handle, "ScaleDownBlocked")
        return cond if cond is not None and cond["status"] == "True" else None

    await eventually(blocked, what="ScaleDownBlocked=True", timeout=10, every=POLL)
    if await _emulator_now(control) < idle_since + grace - timedelta(seconds=0.2):
        # Still inside the grace (a busy machine may plan later than that): both kept.
        statuses = {d["id"]: d["status"] for d in await pool_devices(control, pool_name)}
        assert statuses == {busy: "busy", idle: "ready"}, statuses

    # Idle for the grace: removed then, not before (the provider's own clocks say);
    # the busy one stays.
    removed = await _removed_at(control, idle, keep_busy=busy, timeout=15)
    assert removed - idle_since >= grace, (removed, idle_since)
    assert removed - idle_since < grace + timedelta(seconds=5), (removed, idle_since)
    cond = await condition(handle, "ScaleDownBlocked")
    assert cond is not None and cond["status"] == "True", cond
    assert {d["id"] for d in await pool_devices(control, pool_name) if d["status"] not in GONE} == {
        busy
    }

    # Its session over, the busy device is idle too, and goes once the grace has passed.
    await _session(control, busy, active=False)
    busy_idle_since = _instant((await _device(control, busy))["lastActivityAt"])
    removed = await _removed_at(control, busy, keep_busy=None, timeout=15)
    assert removed - busy_idle_since >= grace, (removed, busy_idle_since)

    async def unblocked() -> bool:
        return await condition(handle, "ScaleDownBlocked") is None

    await eventually(unblocked, what="ScaleDownBlocked dropped", timeout=10, every=POLL)
    counts = await pool_counts(control, pool_name)
    assert counts == {"created": 2, "terminated": 2}, counts
    await handle.cancel()


async def test_the_health_check_wakes_at_the_offline_deadline_not_at_its_next_read(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # One read a minute: a check that noticed the deadline only at its next
    # read would replace the device about a minute late.
    settings = FAST.model_copy(
        update={"health_seconds": 60.0, "offline_after_seconds": 5.0, "watch_max_seconds": 120.0}
    )
    threshold = timedelta(seconds=settings.offline_after_seconds)
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    devices = await _ready(control, pool_name, 2)
    before = await pool_counts(control, pool_name)
    victim = devices[0]["id"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
    went_offline = _instant((await _device(control, victim))["updatedAt"])
    # The check reads every 60 s; a new desired size makes it read at once (the
    # pool tells it), so it sees the device offline well before the deadline.
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=3), result_type=Accepted)
    health = env.client.get_workflow_handle(health_workflow_id(pool_name))

    async def clock_started() -> bool:
        return victim in await health.query("offline_since")

    await eventually(clock_started, what="the health check saw it offline", timeout=10)
    if await _emulator_now(control) >= went_offline + threshold - timedelta(seconds=0.5):
        pytest.fail("the health check saw the device offline only at its deadline: inconclusive")

    try:
        removed = await _removed_at(control, victim, keep_busy=None, timeout=15)
    except BaseException:
        print(await history_digest(env.client, health_workflow_id(pool_name)))
        raise
    took = removed - went_offline
    assert threshold <= took < threshold + timedelta(seconds=2.5), took

    async def replaced() -> bool:
        now = await pool_devices(control, pool_name)
        ready = {d["id"] for d in now if d["status"] == "ready"}
        return victim not in ready and len(ready) == 3

    await eventually(
        replaced, what="3 ready devices, the victim not among them", timeout=15, every=POLL
    )
    after = await pool_counts(control, pool_name)
    # One for the new size, one replacement.
    assert after["created"] - before["created"] == 2, after
    assert after["terminated"] - before["terminated"] == 1, after
    await handle.cancel()


async def test_an_offline_device_gone_before_the_health_report_is_replaced_as_a_replacement(
    env: WorkflowEnvironment, workers: Workers, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Replacements ask the account's ledger ahead of growth. The pool learns of
    # one from the health check's report, but its own watch may see the device
    # gone first (seen under load: the create then went out as growth, and the
    # report's credit went to a later batch). Here the device goes with no report
    # at all: deleted by hand while offline, long before the health check's
    # threshold.
    settings = FAST.model_copy(update={"offline_after_seconds": 60.0})
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    victim = (await _ready(control, pool_name, 2))[0]["id"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def seen_offline() -> bool:
        return bool((await handle.query("status"))["offlineDevices"] == 1)

    await eventually(seen_offline, what="the pool saw it offline", timeout=10, every=POLL)
    deleted = await control.delete(
        f"/api/v1/devices/{victim}", headers={"Authorization": f"Bearer {ACCOUNTS['default']}"}
    )
    assert deleted.status_code == 202, deleted.text

    async def creating() -> list[str] | None:
        events = (await handle.query("events"))["events"]
        found = [e["message"] for e in events if e["reason"] == "Creating"]
        return found if len(found) >= 2 else None

    messages = await eventually(creating, what="the second Creating event", timeout=15, every=POLL)
    assert messages[1] == "creating 1 replacement device(s)", messages
    await _ready(control, pool_name, 2)
    await handle.cancel()


def test_the_promises_tested_here_are_still_documented() -> None:
    # If the docs stop saying it, this file's tests lose their reason: say so.
    import pathlib

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
    words = " ".join((docs / "pools.md").read_text().split())
    assert "then idle ones — ready, no active session, no activity for a grace period" in words
    assert "Busy devices are never terminated" in words
    assert "the check wakes at the exact deadline rather than at the next interval" in words
    assert "Replacement creates go ahead of growth in the account's creation window" in words
