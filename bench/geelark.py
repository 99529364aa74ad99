"""How close does a pool of GeeLark cloud phones get to the bound GeeLark's limits set?

Starts a Temporal dev server, the GeeLark emulator as a real HTTP process (`python -m
devicepool.emulator.geelark`, its clock `--speed` times faster, boots `--boot` s) and one
`devicepool worker` whose config has one account, `api: geelark` (key mode), with its
minute (`windowSeconds`), margin and pool intervals divided by the speed and no idle grace.
A pool of N phones is applied; once the emulator runs all N (ground truth: `started`), it
is scaled to 0 (each phone stopped, confirmed stopped, deleted), then the pool is deleted.
Figures are virtual seconds (real seconds x speed). The bound for 0 -> N, from the limits
that bind:

    T(N) = (W + m) * max(floor((N - 1) / C), floor((N - 1) / R)) + B

W = 60 s, the ledger's window (a create permit counts until its create ends plus W + m) and
GeeLark's minute; m the account's `windowMarginSeconds`, 1 s; C its `createsPerMinute`; R =
200, the requests a minute per endpoint the adapter paces (each create is at least one
`phone/list` mark look-up, one `phone/addNew` and one `phone/start`, so each of those
endpoints carries N calls; listings and `phone/status` reads add to theirs); B the boot.
The last create is granted at (W + m) * floor((N - 1) / C) and its phone runs B later.
Ratio = measured / T(N). N -> 0 has no ratio: its unavoidable calls (one `phone/stop` and
one `phone/delete` a phone) meet no limit below R phones, so what it takes is the worker's
own calls, printed by endpoint (from the worker's `/metrics`, read 2.5 s after each leg:
it renders them every 2 s).

From the emulator's `/_emulator/stats`: refusals for going over a minute (40007) or an
hour (40014), locks, `duplicateNames` (the most seen at any poll), phones created, phones
left, minutes billed. Requested device-minutes = N x (scale-down - apply): what the pool
asked to run. Run device-minutes = the integral of the emulator's `running` (started or
booting: what it bills) over the polls; billed minutes round each phone's up.

    .venv/bin/python bench/geelark.py [--phones 100] [--speed 4] [--boot 20]
        [--creates-per-minute 20] [--timeout 480]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from _results import recorded
from _stack import dev_server, geelark_process, start_pool, worker_process
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from devicepool.api.names import QUERY_STATUS, UPDATE_SCALE, ledger_workflow_id
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from devicepool.testing import free_port
from devicepool.workflows.pool.messages import Accepted, ScaleRequest

ACCOUNT = "geelark"
WINDOW = 60.0  # the ledger's window and GeeLark's request minute, virtual seconds
MARGIN = 1.0  # the account's windowMarginSeconds (its default), virtual seconds
PER_ENDPOINT = 200  # GeeLark's requests a minute per endpoint, as the adapter paces them
POLL = 0.05  # real seconds between two looks at the emulator's stats
RENDER_SECONDS = 2.5  # the worker renders /metrics every 2 s


@dataclass(frozen=True)
class Bound:
    """T(N) of the module docstring, term by term (virtual seconds)."""

    n: int
    creates_per_minute: int
    boot: float
    margin: float = MARGIN

    @property
    def ledger(self) -> float:
        return (WINDOW + self.margin) * ((self.n - 1) // self.creates_per_minute)

    @property
    def pacer(self) -> float:
        return (WINDOW + self.margin) * ((self.n - 1) // PER_ENDPOINT)

    @property
    def total(self) -> float:
        return max(self.ledger, self.pacer) + self.boot

    def formula(self) -> str:
        n, c, w = self.n, self.creates_per_minute, WINDOW + self.margin
        return (
            f"T({n}) = (W + m) * max(floor((N-1)/C), floor((N-1)/R)) + B"
            f" = {w:g} * max({(n - 1) // c}, {(n - 1) // PER_ENDPOINT}) + {self.boot:g}"
            f" = {self.total:g} s  (C {c}/min, R {PER_ENDPOINT}/min per endpoint)"
        )


class Meter:
    """The integral of a count over time from samples, each value held until the next."""

    def __init__(self) -> None:
        self.total = 0.0
        self._last: tuple[float, int] | None = None

    def sample(self, t: float, value: int) -> None:
        if self._last is not None:
            self.total += self._last[1] * max(0.0, t - self._last[0])
        self._last = (t, value)

    def since(self, mark: float) -> float:
        """What was counted after `mark`, a `total` read earlier."""
        return self.total - mark


_CALLS = re.compile(r'^devicepool_api_requests_total\{operation="POST /open/v1/([^"]+)"\} (\S+)$')


def calls_by_endpoint(metrics: str) -> Counter[str]:
    """The worker's GeeLark calls by endpoint (`phone/list`, ...) from its `/metrics`."""
    found: Counter[str] = Counter()
    for line in metrics.splitlines():
        if (match := _CALLS.match(line)) is not None:
            found[match.group(1)] += int(float(match.group(2)))
    return found


def by_endpoint(calls: Counter[str]) -> str:
    return ", ".join(f"{path.removeprefix('phone/')} {k}" for path, k in calls.most_common())


class Watch:
    """The emulator's stats, polled; virtual seconds since `start`; the integral of
    `running`; the most duplicate names seen."""

    def __init__(self, http: httpx.AsyncClient, metrics: str, speed: float) -> None:
        self.http, self.metrics_url, self.speed = http, metrics, speed
        self.start = time.monotonic()
        self.running = Meter()
        self.duplicates = 0
        self.stats: dict[str, Any] = {}
        self.pool: WorkflowHandle[Any, Any] | None = None  # once applied

    def now(self) -> float:
        return (time.monotonic() - self.start) * self.speed

    async def look(self) -> dict[str, Any]:
        self.stats = (await self.http.get("/_emulator/stats")).json()
        phones = self.stats["phones"]
        self.running.sample(self.now(), phones["running"])
        self.duplicates = max(self.duplicates, phones["duplicateNames"])
        return dict(phones)

    async def calls(self) -> Counter[str]:
        async with httpx.AsyncClient(timeout=10) as http:
            return calls_by_endpoint((await http.get(self.metrics_url)).text)

    async def until(
        self,
        what: str,
        done: Callable[[dict[str, Any]], bool],
        *,
        within: float,
        marks: dict[str, Callable[[dict[str, Any]], bool]] | None = None,
    ) -> tuple[float, dict[str, float]]:
        """Poll until `done(phones)`, at most `within` real seconds; the virtual second it
        held, and the first at which each of `marks` held."""
        deadline, seen = time.monotonic() + within, {}
        while True:
            phones = await self.look()
            now = self.now()
            for name, mark in (marks or {}).items():
                if name not in seen and mark(phones):
                    seen[name] = now
            if done(phones):
                return now, seen
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: not within {within:g} s (emulator: {phones}, "
                    f"{self.stats['requests']})"
                )
            await asyncio.sleep(POLL)


def worker_config(path: Path, *, url: str, speed: float, creates: int, metrics: int) -> None:
    """The worker's config: one `api: geelark` account on the emulator, key mode; the
    minute, its margin and the pool's intervals divided by the speed, no idle grace."""
    lines = [
        "accounts:",
        f"  {ACCOUNT}:",
        "    api: geelark",
        f"    baseUrl: {url}",
        f"    appId: {DEFAULT_APP_ID}",
        "    apiKeyEnv: BENCH_KEY",
        f"    createsPerMinute: {creates}",
        f"    windowSeconds: {WINDOW / speed}",
        f"    windowMarginSeconds: {MARGIN / speed}",
        "intervals:",
        f"  resyncSeconds: {30 / speed}",
        f"  healthSeconds: {60 / speed}",
        f"  offlineAfterSeconds: {180 / speed}",
        f"  startupTimeoutSeconds: {300 / speed}",
        "  idleGraceSeconds: 0",
        f"  backoffInitialSeconds: {30 / speed}",
        f"  backoffMaxSeconds: {900 / speed}",
        f"metricsPort: {metrics}",
    ]
    path.write_text("\n".join(lines) + "\n")


async def ledger_started(client: Client, *, within: float) -> None:
    """Wait until the worker has started the account's ledger (it is up and polling)."""
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(ledger_workflow_id(ACCOUNT)).describe()
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker did not start the ledger within {within:g} s")
        await asyncio.sleep(0.2)


async def clear_of_midnight(http: httpx.AsyncClient, *, room: float) -> None:
    """Move the emulator's clock just past the next UTC midnight if the run (`room` virtual
    seconds) could cross it: each UTC day of a phone is billed apart, rounded up."""
    now = datetime.fromisoformat((await http.get("/_emulator/clock")).json()["now"])
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    if (left := (midnight - now).total_seconds()) < room:
        await http.post("/_emulator/clock", json={"advanceSeconds": left + 1})
        print(f"(the emulator's clock moved {left + 1:.0f} s on, past UTC midnight)")


async def explain(pool: WorkflowHandle[Any, Any] | None) -> None:
    """Print what the pool says of itself (a failed run's first clue)."""
    if pool is None:
        return
    with contextlib.suppress(Exception):
        status = await asyncio.wait_for(pool.query(QUERY_STATUS), 10)
        print(f"pool {pool.id}: phase {status.get('phase')}, deviceIds {status.get('deviceIds')}")
        for c in status.get("conditions", []):
            print(f"  {c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}")


def accepted(watch: Watch) -> int:
    return int(watch.stats["requests"]["accepted"])


async def settled_calls(watch: Watch) -> Counter[str]:
    """The worker's calls by endpoint once its `/metrics` shows this moment."""
    deadline = time.monotonic() + RENDER_SECONDS
    while time.monotonic() < deadline:  # the emulator still looked at meanwhile
        await watch.look()
        await asyncio.sleep(POLL)
    return await watch.calls()


async def run(client: Client, watch: Watch, args: argparse.Namespace) -> None:
    n, speed = args.phones, args.speed
    bound = Bound(n, args.creates_per_minute, args.boot)
    within = 3 * bound.total / speed + 60  # real seconds any one leg may take
    print(bound.formula())
    await clear_of_midnight(watch.http, room=3 * bound.total + 600)
    await watch.look()

    # 0 -> N
    before, calls, applied = accepted(watch), await watch.calls(), watch.now()
    watch.pool = handle = await start_pool(
        client, f"gl-{uuid.uuid4().hex[:6]}", n, account=ACCOUNT, region="sgp"
    )
    up, marks = await watch.until(
        f"0 -> {n}",
        lambda p: p["started"] >= n,
        within=within,
        marks={
            "first": lambda p: p["created"] >= 1,
            "add": lambda p: p["created"] >= n,
            "start": lambda p: p["starts"] >= n,
        },
    )
    took, last_add, last_start = up - applied, marks["add"] - applied, marks["start"] - applied
    print(
        f"0 -> {n}: all running {took:6.1f} s (bound {bound.total:g} s, "
        f"{took / bound.total:4.2f}x); first addNew {marks['first'] - applied:4.1f} s, "
        f"last addNew {last_add:6.1f} s, last start "
        f"{last_start:6.1f} s (bound {max(bound.ledger, bound.pacer):g} s); "
        f"{accepted(watch) - before} requests"
    )
    calls = (now := await settled_calls(watch)) - calls
    print(f"    the worker's calls: {by_endpoint(calls)}")

    # N -> 0: scale to 0 (each phone stopped, confirmed stopped, deleted)
    before, calls, down, wanted = accepted(watch), now, watch.now(), watch.running.total
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=0), result_type=Accepted)
    half = n - n // 2
    stopped, marks = await watch.until(
        f"{n} -> 0 (stop)",
        lambda p: p["running"] == 0,
        within=within,
        marks={"half": lambda p: p["running"] <= n - half},
    )
    deadline = time.monotonic() + within
    while (status := await handle.query(QUERY_STATUS))["deviceIds"] or status["pendingDevices"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} -> 0: the pool still shows devices: {status['deviceIds']}")
        await watch.look()
        await asyncio.sleep(POLL)
    await watch.look()
    settled = watch.now()
    print(
        f"{n} -> 0: {half} stopped {marks['half'] - down:6.1f} s, all stopped (billing ends) "
        f"{stopped - down:6.1f} s, the pool shows none {settled - down:6.1f} s; "
        f"{accepted(watch) - before} requests"
    )
    calls = (now := await settled_calls(watch)) - calls
    print(f"    the worker's calls: {by_endpoint(calls)}")

    # delete the pool
    before, calls, deleting = accepted(watch), now, watch.now()
    await handle.cancel()
    deadline = time.monotonic() + within
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        if time.monotonic() > deadline:
            raise TimeoutError(f"delete: the pool still runs after {within:g} s")
        await watch.look()
        await asyncio.sleep(POLL)
    phones = await watch.look()
    print(
        f"delete: the pool ended {watch.now() - deleting:6.1f} s, {phones['total']} phones "
        f"left; {accepted(watch) - before} requests"
    )
    calls = (now := await settled_calls(watch)) - calls
    print(f"    the worker's calls: {by_endpoint(calls)}")

    stats, ended = watch.stats, watch.now()
    requests, phones = stats["requests"], stats["phones"]
    print(
        f"requests: {requests['accepted']} accepted ({requests['accepted'] / n:.1f} a phone); "
        f"refused over a minute (40007) {requests['rateLimited']}, over an hour (40014) "
        f"{requests['locked']}; locks {requests['locks']}; 47002 "
        f"{requests['concurrencyRefused']}; busiest endpoint {requests['maxPerMinute']} in a "
        f"minute (limit {PER_ENDPOINT})"
    )
    print(
        f"phones: {phones['created']} created for {n}, {phones['starts']} starts, duplicate "
        f"names {watch.duplicates} (most at any look), {phones['total']} left"
    )
    requested = n * (down - applied) / 60
    ran, after = wanted / 60, watch.running.since(wanted) / 60
    print(
        f"device-minutes: requested {requested:.1f} ({n} x {down - applied:.1f} s, apply to "
        f"scale-down); run {ran + after:.1f} ({ran:.1f} until the scale-down, {after:.1f} "
        f"after); billed {stats['minutesBilled']} (${stats['moneyBilled']:.3f}; each phone's "
        f"minutes rounded up); {ended - applied:.0f} s in all"
    )
    clean = (
        phones["created"] == n
        and not watch.duplicates
        and not phones["total"]
        and not requests["rateLimited"]
        and not requests["locked"]
    )
    if not clean:
        print("NOT CLEAN: extra creates, duplicates, phones left or refusals (above)")


async def main(args: argparse.Namespace) -> None:
    speed = args.speed
    print(
        f"{args.phones} GeeLark phones on one account; emulator speed {speed:g}, boot "
        f"{args.boot:g} s; virtual seconds (real x {speed:g})"
    )
    emulator = ["--speed", str(speed), "--boot-seconds", str(args.boot), "--seed", "1"]
    metrics = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-geelark-") as tmp:
        config, log = Path(tmp) / "worker.yaml", Path(tmp) / "worker.log"
        async with (
            await dev_server(dev_server_extra_args=["--log-level", "error"]) as env,
            geelark_process(emulator, tries=200) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            worker_config(
                config, url=url, speed=speed, creates=args.creates_per_minute, metrics=metrics
            )
            address = env.client.service_client.config.target_host
            with log.open("wb") as out:
                worker = worker_process(config, address=address, key=DEFAULT_API_KEY, log=out)
            try:
                watch = Watch(http, f"http://127.0.0.1:{metrics}/metrics", speed)
                await ledger_started(env.client, within=60)
                await run(env.client, watch, args)
            except BaseException:
                print("worker log, last lines:\n" + "\n".join(log.read_text().splitlines()[-20:]))
                await explain(watch.pool)
                raise
            finally:
                worker.terminate()
                worker.wait(20)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phones", type=int, default=100)
    parser.add_argument("--speed", type=float, default=4)
    parser.add_argument("--boot", type=float, default=20, help="the emulator's boot seconds")
    parser.add_argument("--creates-per-minute", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=480, help="real seconds, the whole run")
    args = parser.parse_args()
    if args.phones < 1 or args.speed <= 0 or args.boot < 0 or args.creates_per_minute < 1:
        parser.error("--phones and --creates-per-minute >= 1, --speed > 0, --boot >= 0")

    async def bounded() -> None:
        async with asyncio.timeout(args.timeout):
            await main(args)

    with recorded("geelark", "GeeLark cloud phones 0 -> N -> 0", parser, args):
        asyncio.run(bounded())
