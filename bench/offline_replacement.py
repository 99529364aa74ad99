"""How long from a device going offline to its replacement being requested?

Default thresholds (offline after 180 s, health check every 60 s): a pool of 3
converges, one device is taken offline through the emulator's control plane,
and the emulator's own timestamps tell when the device was terminated and when
its replacement was created. Real time: about 3.5 minutes.

    .venv/bin/python bench/offline_replacement.py [--offline-after 180] [--health 60]
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from datetime import datetime

import httpx
from _results import recorded
from _stack import AUTH, local_stack, start_pool

from devicepool.activities.models import PoolSettings


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def devices(http: httpx.AsyncClient, pool: str) -> list[dict]:
    answer = await http.get("/api/v1/devices", params={"label": f"pool={pool}"}, headers=AUTH)
    return answer.json()["items"]


async def main(offline_after: float, health: float) -> None:
    settings = PoolSettings(
        resync_seconds=5, health_seconds=health, offline_after_seconds=offline_after
    )
    async with local_stack(provision_seconds=5, settings=settings) as (client, http):
        pool = f"offline-{uuid.uuid4().hex[:6]}"
        handle = await start_pool(
            client, pool, 3, account="default", region="us-west", settings=settings
        )
        while True:
            items = await devices(http, pool)
            if len(items) == 3 and all(d["status"] == "ready" for d in items):
                break
            await asyncio.sleep(0.5)
        victim = items[0]["id"]
        known = {d["id"] for d in items}
        await http.post(f"/_emulator/devices/{victim}/offline")
        went_offline = at(
            (await http.get(f"/api/v1/devices/{victim}", headers=AUTH)).json()["updatedAt"]
        )
        terminated = created = None
        while terminated is None or created is None:
            await asyncio.sleep(1)
            for d in await devices(http, pool):
                if d["id"] == victim and d["status"] in ("terminating", "terminated"):
                    terminated = terminated or at(d["updatedAt"])
                if d["id"] not in known:
                    created = created or at(d["createdAt"])
        print(f"offline threshold {offline_after:g}s, health interval {health:g}s")
        print(
            f"offline -> terminated:           {(terminated - went_offline).total_seconds():.1f}s"
        )
        print(f"offline -> replacement created:  {(created - went_offline).total_seconds():.1f}s")
        print(f"terminated -> replacement created: {(created - terminated).total_seconds():.1f}s")
        await handle.cancel()
        await asyncio.sleep(3)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline-after", type=float, default=180)
    parser.add_argument("--health", type=float, default=60)
    args = parser.parse_args()
    with recorded("offline_replacement", "Offline device replacement", parser, args):
        asyncio.run(main(args.offline_after, args.health))
