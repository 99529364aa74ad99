"""Record, on v0.1.0's own code, the passes whose commands this build changed.

    .venv/bin/python -m tests.replay.record_release 8a87418db561fad6f289d0a486deca8abd45ae91 \
        --script tests/replay/record_v010_upgrade.py --out tests/replay/histories/v0.1.0/upgrade

Written against v0.1.0's modules (`devicepool.workflows.messages`, `tests.support`,
`tests/workflows/wf_support.py`), so it only runs inside v0.1.0's tree:
`record_release --script` exports the release and runs it there, and the
histories are what v0.1.0's workflows recorded. Against a dev server, the emulator in process and
v0.1.0's production activities:

- `scale-down-phase-kept`: 5 ready, 2 of them busy, scaled to 1. The pass that
  terminates the 3 idle ones stays `ScalingDown` before and after, so the only
  search attribute the terminations change is the ready count: v0.1.0 upserted
  it on the pass after (from the listing), a build that publishes the plan made
  after the terminations upserts it on the terminating pass.
- `spec-change-during-terminations`: 2 ready scaled to 3 (generation 2), the
  third fails to boot; one pass removes it and decides its replacement batch.
  While its DELETE is held, an `apply` changes `osVersion` from "14" to "15"
  (generation 3, a new create body). v0.1.0 started the decided replacement once
  the termination returned, under generation 3's child id and keys
  (`devicepool/respec/provision/3-…`, osVersion "15").
- `scale-during-terminations`: 3 ready scaled to 1; while the two DELETEs are
  held, the plain `scale` signal asks for 4 (no new generation).
- `health-report-during-terminations`: 1 ready scaled to 3, both new devices
  fail to boot; one pass removes the 2 failed and creates 2. While their DELETEs
  are held, the health check's word comes (the ready device, removed, signalled
  as `health_report`): one replacement owed. v0.1.0 split the 2 creates with
  what was owed after the terminations (a replacement batch of 1, then 1: two
  child starts); a build that splits them before issues one.
- `doomed-device-reported`: 1 ready scaled to 2, the new device fails to boot and
  the pool's DELETE of it is refused (409): doomed. The health check's word names
  it removed (`health_report`): v0.1.0 kept it doomed, so its next pass issued
  `terminate_device` for it again (refused once more; then the device is gone
  and DELETEs are answered again).
- `spec-change-with-a-retry-slot`: 2 ready scaled to 4; the other device fails
  to boot and its DELETE is refused (doomed), and one create is answered late,
  refused (409: its slot awaits a retry under generation 2's key), while a pass
  terminating the doomed device waits and the pool is scaled to 6 (generation 3).
  The next pass decides a batch retrying the slot and one of 2 fresh slots; while
  its DELETE is held, `osVersion` changes ("15", generation 4). v0.1.0 took the
  creates once the termination returned: the new body no longer retried the old
  key, one batch of 3 fresh slots under generation 4.

Each pool ends deleted; its runs are written as `<scenario>-<n>.json`.
"""

# v0.1.0's modules, not this tree's: ruff cannot tell which of them are first-party here.
# ruff: noqa: I001
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from datetime import UTC, datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, PoolSettings
from devicepool.activities.permits import register_accounts
from devicepool.api.names import UPDATE_APPLY, UPDATE_SCALE, pool_workflow_id
from devicepool.api.v1alpha1 import DevicePoolSpec, ObjectMeta
from devicepool.connect import DATA_CONVERTER
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.worker.build import account_workers, pool_queue_workers
from devicepool.workflows.messages import Accepted, ApplyRequest, HealthReport, ScaleRequest
from devicepool.workflows.search_attributes import search_attribute_keys
from tests.support.binaries import temporal_binary
from tests.support.histories import run_histories
from tests.support.manifests import pool_manifest
from tests.support.settings import FAST
from tests.support.waits import eventually
from tests.workflows.wf_support import TimedASGITransport, start_pool

URL = "http://emulator.record"
KEY = "record-key"
# FAST's intervals, but offline after 30 s and a 20-s startup timeout; the liveness and
# teardown checks at their defaults.
_OWN = {"offline_after_seconds": 30, "startup_timeout_seconds": 20}
_DEFAULTS = {"health_liveness_seconds", "teardown_blocked_after_seconds"}
SETTINGS = PoolSettings(**FAST.model_dump(exclude={*_OWN, *_DEFAULTS}), **_OWN)
# Devices ready a second after their create, creates unthrottled, terminations quick.
QUICK = {"provision_seconds": 1.0, "creates_per_minute": 1000, "terminate_seconds": 0.3}
# The health check's word in a report: one device unhealthy, removed.
ONE_REMOVED = {"unhealthy": 1, "max_unhealthy": 1, "paused": False}


class HeldDeletes(TimedASGITransport):
    """DELETEs wait at `gate` while it is closed (`held` counts those that waited); then,
    while `refuse` is set, they are answered 409 (`invalid_state`, not retried:
    `refused`). So is the next create (POST) while `refuse_creates` is set, once
    `create_gate` opens."""

    gate: asyncio.Event | None = None
    held = 0
    refuse = False
    refused = 0
    refuse_creates = 0
    create_gate: asyncio.Event | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = {"status": 409, "code": "invalid_state", "detail": "the device is busy"}
        create = request.method == "POST" and request.url.path.endswith("/devices")
        if create and HeldDeletes.refuse_creates > 0:
            HeldDeletes.refuse_creates -= 1
            if HeldDeletes.create_gate is not None:
                await HeldDeletes.create_gate.wait()
            return httpx.Response(409, json=body, request=request)
        gate = HeldDeletes.gate
        if request.method == "DELETE" and gate is not None and not gate.is_set():
            HeldDeletes.held += 1
            await gate.wait()
        if request.method == "DELETE" and HeldDeletes.refuse:
            HeldDeletes.refused += 1
            return httpx.Response(409, json=body, request=request)
        return await super().handle_async_request(request)


async def record(out: Path) -> None:
    emulator = create_app(EmulatorConfig(accounts={"default": [KEY]}, seed=13, **QUICK))
    account = AccountSettings(name="default", base_url=URL, api_key=SecretStr(KEY))
    activities = DeviceActivities(
        accounts={"default": account},
        proxy_pools={},
        settings=SETTINGS,
        transport=HeldDeletes(app=emulator),
    )
    async with (
        await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=DATA_CONVERTER,
            search_attributes=search_attribute_keys(),
        ) as env,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator), base_url=URL) as control,
    ):
        client = env.client
        workers = [
            *pool_queue_workers(client, activities),
            *account_workers(client, activities, ["default"]),
        ]
        running = [asyncio.ensure_future(w.run()) for w in workers]
        try:
            await register_accounts(client, {"default": account})
            out.mkdir(parents=True, exist_ok=True)
            for scenario, name, run in SCENARIOS:
                await run(client, control)
                for number, history in enumerate(
                    await run_histories(client, pool_workflow_id(name)), 1
                ):
                    path = out / f"{scenario}-{number}.json"
                    path.write_text(history.to_json())
                    print(f"{path}: {len(history.events)} events")
        finally:
            if HeldDeletes.gate is not None:
                HeldDeletes.gate.set()
            for worker in workers:
                await worker.shutdown()
            await asyncio.gather(*running, return_exceptions=True)
            await activities.aclose()


async def _scale_down_phase_kept(client: Client, control: httpx.AsyncClient) -> None:
    pool = await _started(client, control, "kept", 5)
    busy = [d["id"] for d in await _devices(control, "kept")][:2]
    for device_id in busy:
        session = f"/_emulator/devices/{device_id}/session"
        (await control.post(session, json={"active": True})).raise_for_status()
    await _until(lambda: _status(pool, busyDevices=2), "2 busy in status")
    await _scale(pool, 1)
    await _until(lambda: _live(control, "kept", 2), "the 3 idle ones terminated")
    await _until(lambda: _status(pool, readyDevices=0, busyDevices=2), "2 busy, 0 ready")
    await asyncio.sleep(2)  # a pass or two more, as the pool settles
    await _delete(client, pool, control, "kept")


async def _spec_change_during_terminations(client: Client, control: httpx.AsyncClient) -> None:
    pool = await _started(client, control, "respec", 2)
    _hold()
    failed = lambda: _failed(control, "respec")  # noqa: E731
    await _boot_fails(control, pool, 3, failed, "the third device failed to boot")
    await _held(1, "the failed device's DELETE held")
    # Another osVersion than the manifest's ("14"): a real change, generation 2 → 3, and a
    # new create body. The same spec again would be `unchanged`, and the held pass would
    # start its batch under the generation it decided it for.
    await _respec(pool, "respec", 3, generation=3)
    await asyncio.sleep(1)  # the apply's pass waits behind the held termination
    _release()
    await _settled(client, pool, control, "respec", 3, "3 ready after the re-spec")


async def _scale_during_terminations(client: Client, control: httpx.AsyncClient) -> None:
    pool = await _started(client, control, "rescale", 3)
    _hold()
    await _scale(pool, 1)
    await _held(2, "the two DELETEs held")
    await pool.signal("scale", {"replicas": 4})
    await asyncio.sleep(1)  # the signal's pass waits behind the held terminations
    _release()
    await _settled(client, pool, control, "rescale", 4, "4 ready after the signal")


async def _health_report_during_terminations(client: Client, control: httpx.AsyncClient) -> None:
    pool = await _started(client, control, "owed", 1)
    (ready,) = [d["id"] for d in await _devices(control, "owed")]
    _hold()
    two_failed = lambda: _count(control, "owed", "failed", 2)  # noqa: E731
    await _boot_fails(control, pool, 3, two_failed, "both new devices failed to boot")
    await _held(1, "the failed devices' DELETE held")
    # The health check's word, while the pass awaits its terminations: it removed the
    # ready device (offline), so one replacement is owed at once.
    await _gone_at_the_provider(control, ready)
    await _report(pool, 3, {ready: "offline for 30s"})
    await asyncio.sleep(1)  # the report lands while the termination is held
    _release()
    await _settled(client, pool, control, "owed", 3, "3 ready after the replacements")


async def _doomed_device_reported(client: Client, control: httpx.AsyncClient) -> None:
    pool = await _started(client, control, "doomed", 1)
    HeldDeletes.refuse, HeldDeletes.refused = True, 0
    failed = lambda: _failed(control, "doomed")  # noqa: E731
    await _boot_fails(control, pool, 2, failed, "the second device failed to boot")
    (failed_id,) = [d["id"] for d in await _devices(control, "doomed") if d["status"] == "failed"]
    await _refused(0, "the failed device's DELETE refused: doomed")
    # The health check's word while it is doomed: it removed the failed device.
    await _report(pool, 2, {failed_id: "StartupTimeout: still failed 20s after creation"})
    await _refused(HeldDeletes.refused, "a pass after the report terminating it again")
    await _gone_at_the_provider(control, failed_id)
    HeldDeletes.refuse = False
    await _settled(client, pool, control, "doomed", 2, "2 ready")


async def _spec_change_with_a_retry_slot(client: Client, control: httpx.AsyncClient) -> None:
    pool = await _started(client, control, "retry", 2)
    HeldDeletes.refuse, HeldDeletes.refused = True, 0
    HeldDeletes.refuse_creates, HeldDeletes.create_gate = 1, asyncio.Event()
    failed = lambda: _failed(control, "retry")  # noqa: E731
    await _boot_fails(control, pool, 4, failed, "the created one failed to boot")
    await _refused(0, "the failed device's DELETE refused: doomed")
    await _until(lambda: _count(control, "retry", "ready", 3), "its replacement ready")
    _hold()
    await _held(1, "a pass terminating it again, held")
    await _scale(pool, 6)
    HeldDeletes.create_gate.set()  # the refused create answers: its slot awaits a retry
    await asyncio.sleep(1)
    # The held DELETE is refused (still doomed); the next pass's is held in turn.
    first, HeldDeletes.gate = HeldDeletes.gate, asyncio.Event()
    first.set()
    await _held(2, "the pass with the retry slot terminating it, held")
    await _respec(pool, "retry", 6, generation=4)
    await asyncio.sleep(1)  # the apply's pass waits behind the held termination
    HeldDeletes.refuse = False
    _release()
    HeldDeletes.create_gate = None
    await _settled(client, pool, control, "retry", 6, "6 ready after the re-spec")


# (scenario, pool, what it does): the histories are written as `<scenario>-<n>.json`.
SCENARIOS: list[tuple[str, str, Callable[[Client, httpx.AsyncClient], Awaitable[None]]]] = [
    ("scale-down-phase-kept", "kept", _scale_down_phase_kept),
    ("spec-change-during-terminations", "respec", _spec_change_during_terminations),
    ("scale-during-terminations", "rescale", _scale_during_terminations),
    ("health-report-during-terminations", "owed", _health_report_during_terminations),
    ("doomed-device-reported", "doomed", _doomed_device_reported),
    ("spec-change-with-a-retry-slot", "retry", _spec_change_with_a_retry_slot),
]


async def _started(
    client: Client, control: httpx.AsyncClient, name: str, replicas: int
) -> WorkflowHandle[Any, Any]:
    pool = await start_pool(client, name, replicas, settings=SETTINGS, proxy_ref=None)
    await _until(lambda: _ready(control, name, replicas), f"{replicas} ready")
    return pool


async def _scale(pool: WorkflowHandle[Any, Any], replicas: int) -> None:
    await pool.execute_update(UPDATE_SCALE, ScaleRequest(replicas=replicas), result_type=Accepted)


async def _boot_fails(
    control: httpx.AsyncClient,
    pool: WorkflowHandle[Any, Any],
    replicas: int,
    failed: Callable[[], Awaitable[bool]],
    what: str,
) -> None:
    """Scaled to `replicas` while every boot fails, until `failed`; then boots work again."""
    await _faults(control, provisionFailureRate=1.0)
    await _scale(pool, replicas)
    await _until(failed, what)
    await _faults(control)


def _hold() -> None:
    """DELETEs wait from now on, until `_release`."""
    HeldDeletes.gate, HeldDeletes.held = asyncio.Event(), 0


def _release() -> None:
    assert HeldDeletes.gate is not None
    HeldDeletes.gate.set()
    HeldDeletes.gate = None


async def _held(count: int, what: str) -> None:
    async def held() -> bool:
        return HeldDeletes.held >= count

    await _until(held, what)


async def _refused(before: int, what: str) -> None:
    async def refused() -> bool:
        return HeldDeletes.refused > before

    await _until(refused, what)


async def _respec(
    pool: WorkflowHandle[Any, Any], name: str, replicas: int, generation: int
) -> None:
    """`apply` with osVersion "15" (the manifest's is "14"): a spec change to `generation`."""
    spec = pool_manifest(name, replicas=replicas, providerCredentialRef="default", proxy=None)
    spec["spec"]["osVersion"] = "15"
    request = ApplyRequest(
        metadata=ObjectMeta(name=name), spec=DevicePoolSpec.model_validate(spec["spec"])
    )
    accepted = await pool.execute_update(UPDATE_APPLY, request, result_type=Accepted)
    assert accepted.generation == generation, f"the apply was no spec change: {accepted}"


async def _report(pool: WorkflowHandle[Any, Any], devices: int, terminated: dict[str, str]) -> None:
    """The health check's `health_report`: of `devices`, one unhealthy and removed."""
    now = datetime.now(UTC)
    report = HealthReport(checked_at=now, devices=devices, terminated=terminated, **ONE_REMOVED)
    await pool.signal("health_report", report)


async def _gone_at_the_provider(control: httpx.AsyncClient, device_id: str) -> None:
    gone = await control.delete(
        f"/api/v1/devices/{device_id}", headers={"Authorization": f"Bearer {KEY}"}
    )
    gone.raise_for_status()


async def _settled(
    client: Client,
    pool: WorkflowHandle[Any, Any],
    control: httpx.AsyncClient,
    name: str,
    replicas: int,
    what: str,
) -> None:
    """`replicas` ready, a pass or two more, then the pool deleted."""
    await _until(lambda: _ready(control, name, replicas), what)
    await asyncio.sleep(2)
    await _delete(client, pool, control, name)


async def _count(control: httpx.AsyncClient, pool: str, status: str, count: int) -> bool:
    return sum(1 for d in await _devices(control, pool) if d["status"] == status) == count


async def _delete(
    client: Client, pool: WorkflowHandle[Any, Any], control: httpx.AsyncClient, name: str
) -> None:
    for device in await _devices(control, name):
        session = f"/_emulator/devices/{device['id']}/session"
        (await control.post(session, json={"active": False})).raise_for_status()
    await pool.cancel()
    with contextlib.suppress(Exception):
        await client.get_workflow_handle(pool_workflow_id(name)).result()


async def _faults(control: httpx.AsyncClient, **faults: float) -> None:
    (await control.post("/_emulator/faults", json=faults)).raise_for_status()


async def _devices(control: httpx.AsyncClient, pool: str) -> list[dict[str, Any]]:
    answer = await control.get(
        "/api/v1/devices",
        params={"label": f"pool={pool}"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    answer.raise_for_status()
    return [d for d in answer.json()["items"] if d["status"] not in ("terminating", "terminated")]


async def _ready(control: httpx.AsyncClient, pool: str, count: int) -> bool:
    devices = await _devices(control, pool)
    return len(devices) == count and all(d["status"] == "ready" for d in devices)


async def _live(control: httpx.AsyncClient, pool: str, count: int) -> bool:
    return len(await _devices(control, pool)) == count


async def _failed(control: httpx.AsyncClient, pool: str) -> bool:
    return any(d["status"] == "failed" for d in await _devices(control, pool))


async def _status(pool: WorkflowHandle[Any, Any], **want: int) -> bool:
    status = await pool.query("status")
    return all(status.get(key) == value for key, value in want.items())


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    await eventually(check, what=f"{what} (recording)", timeout=timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the histories (made if missing)")
    asyncio.run(record(parser.parse_args().out))
    # Written: leave without the SDK's runtime teardown, which can abort the interpreter
    # at exit ("PyGILState_Release: thread state ... must be current").
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
