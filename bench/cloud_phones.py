"""How close does a pool on BitBrowser cloud phones get to the Local API's 1 request a second?

A pool on an `api: bitbrowser` account (the in-process BitBrowser emulator,
its clock `--speed` times faster; the adapter paces 1.1 virtual seconds apart)
scales 0 -> N on new profiles (cold), N -> 0 (phones shut down, profiles kept),
then 0 -> N again on that warm reserve. The bound for 0 -> N is the calls that
cannot be avoided, one a second: cold, N adds + N power-ons (the last power-on
at 2N - 1 s); warm, N re-marks + N power-ons; then one boot (about 60 s from
off, what `--boot` sets); N -> 0, N shutdowns (billing stops at the last one,
at N - 1 s) and N re-marks into reserve (done at 2N - 1 s, the last one's second
counted as its "boot"). Figures are virtual seconds, from the emulator's own
request counter and stats; `requests` counts every `/phone/*` call (listings,
look-ups, status reads included), and for N -> 0 also a phone's share. The
engine's intervals run at the same speed; the scale-down has no idle grace.

    .venv/bin/python bench/cloud_phones.py [--phones 10] [--speed 10] [--boot 60] [--keep N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import httpx
from _results import recorded
from _stack import PROXY_POOLS, dev_server, phone_account, start_pool

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import PoolSettings
from devicepool.api.names import UPDATE_SCALE
from devicepool.api.v1beta1 import ReserveSpec
from devicepool.emulator.bitbrowser import BitBrowserConfig, create_apps
from devicepool.worker.build import account_workers, pool_queue_workers
from devicepool.workflows.pool.messages import Accepted, ScaleRequest

ACCOUNT, KEY, URL = "phones", "bench-local-key", "http://phones.bench"
UPDATE = "/phone/profile/update"


async def phones(http: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await http.get("/_emulator/stats")).json()["phones"])


async def until(http: httpx.AsyncClient, **wanted: int) -> dict[str, Any]:
    while True:
        stats = await phones(http)
        if all(stats[k] == v for k, v in wanted.items()):
            return stats
        await asyncio.sleep(0.02)


class Counted(httpx.AsyncBaseTransport):
    """The adapter's way to the emulator, counting its calls by path."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.paths: Counter[str] = Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths[request.url.path] += 1
        return await self.inner.handle_async_request(request)


async def leg(
    http: httpx.AsyncClient,
    speed: float,
    name: str,
    *,
    calls: int,
    boot: float,
    remarks: tuple[Counted, int] | None = None,
    **done: int,
) -> dict[str, Any]:
    """Wait for `done` (and `remarks`: that many more re-marks); print when the `calls`
    unavoidable calls could have been made and when the leg ended (`boot` after the
    last), against what they took (virtual seconds)."""
    start, before = time.monotonic(), await phones(http)
    updates = remarks[0].paths[UPDATE] if remarks else 0
    marks: dict[str, float] = {}
    while True:
        stats = await phones(http)
        now = (time.monotonic() - start) * speed
        if "power" not in marks and stats["powerOns"] - before["powerOns"] >= done.get("on", 0):
            marks["power"] = now
        if "off" not in marks and stats["shutdowns"] - before["shutdowns"] >= done.get("off", 0):
            marks["off"] = now
        remarked = remarks is None or remarks[0].paths[UPDATE] - updates >= remarks[1]
        if remarked and all(stats[k] == v for k, v in done.items() if k not in ("on", "off")):
            break
        await asyncio.sleep(0.02)
    requests = stats["requests"] - before["requests"]
    last, bound = calls - 1, calls - 1 + boot
    line = f"{name:<24} done {now:6.1f}s (bound {bound:5.1f}s, {now / bound:4.2f}x)"
    if done.get("on"):
        line += f"; last power-on {marks['power']:5.1f}s (bound {last:4.1f}s)"
    if done.get("off"):
        line += f"; last shutdown {marks['off']:5.1f}s (bound {done['off'] - 1:4.1f}s)"
    line += f"; {requests} requests, {requests / now:4.2f}/s"
    if done.get("off"):
        line += f", {requests / done['off']:3.1f} a phone"
    print(line)
    return stats


async def main(n: int, speed: float, boot: float, keep: int | None = None) -> None:
    app = create_apps(
        BitBrowserConfig(account="bench", api_key=KEY, speed=speed, phone_boot_seconds=boot)
    )["node-1"]
    # The engine's intervals at the emulator's speed; no idle grace, so a scale-down's pace
    # is the shutdowns' own.
    settings = PoolSettings(
        resync_seconds=30 / speed,
        health_seconds=60 / speed,
        offline_after_seconds=180 / speed,
        startup_timeout_seconds=300 / speed,
        idle_grace_seconds=0,
    )
    activities = DeviceActivities(
        accounts={ACCOUNT: phone_account(ACCOUNT, url=URL, key=KEY, speed=speed, phones=n)},
        proxy_pools=PROXY_POOLS,
        settings=settings,
        transport=(counted := Counted(httpx.ASGITransport(app=app))),
    )
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL)
    async with await dev_server() as env:
        workers = [
            *pool_queue_workers(env.client, activities),
            *account_workers(env.client, activities, [ACCOUNT]),
        ]
        running = [asyncio.ensure_future(w.run()) for w in workers]
        try:
            pool = f"phones-{uuid.uuid4().hex[:6]}"
            print(f"pool of {n} cloud phones, 1 request/s, boot {boot:g}s (virtual seconds)")
            handle = await start_pool(
                env.client,
                pool,
                n,
                account=ACCOUNT,
                proxy_ref="gw",
                reserve=None if keep is None else ReserveSpec(keep=keep),
                settings=settings,
            )
            cold = await leg(
                http, speed, f"0 -> {n} (new profiles)", calls=2 * n, boot=boot, running=n, on=n
            )

            async def scale(replicas: int) -> None:
                await handle.execute_update(
                    UPDATE_SCALE, ScaleRequest(replicas=replicas), result_type=Accepted
                )

            await scale(0)
            await leg(
                http,
                speed,
                f"{n} -> 0 (shut down)",
                calls=2 * n,
                boot=1,
                remarks=(counted, n),
                running=0,
                off=n,
            )
            await scale(n)
            warm = await leg(
                http, speed, f"0 -> {n} (warm reserve)", calls=2 * n, boot=boot, running=n, on=n
            )
            print(
                f"profiles made: {warm['created']} (cold {cold['created']}), "
                f"power-ons {warm['powerOns']}, most requests in one second "
                f"{warm['maxRequestsPerSecond']}, refused for going too fast {warm['rateLimited']}"
            )
            await handle.cancel()
            await until(http, running=0)
        finally:
            for worker in workers:
                await worker.shutdown()
            await asyncio.gather(*running, return_exceptions=True)
            await activities.aclose()
            await http.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phones", type=int, default=10)
    parser.add_argument("--speed", type=float, default=10)
    parser.add_argument("--boot", type=float, default=60)
    parser.add_argument(
        "--keep", type=int, default=None, help="spec.reserve.keep (default: unset, keep all)"
    )
    args = parser.parse_args()
    with recorded("cloud_phones", "Cloud phones at 1 request a second", parser, args):
        asyncio.run(main(args.phones, args.speed, args.boot, args.keep))
