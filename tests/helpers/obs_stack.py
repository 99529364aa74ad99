"""The stack of each tests/observability module: what it is (`ObsStack`) and when its worker serves.

tests/observability/conftest.py starts it: a dev server with the Web UI, the
emulator over real HTTP and the production `run_worker` (`worker_running`); `ObsStack`
scrapes the worker's `/metrics` and sets the emulator's faults.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from devicepool.activities.models import AccountSettings
from devicepool.api.names import ledger_workflow_id
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import ControlPlane
from devicepool.worker.config import WorkerConfig
from devicepool.worker.main import run_worker
from tests.helpers.metrics import samples_of
from tests.helpers.servers import InProcessServer
from tests.helpers.settings import FAST, proxy_pools

API_KEY = "obs-test-key"
# The workflow tests' intervals (a copy: what changes here changes the observability tests only).
OBS_SETTINGS = FAST.model_copy()


@dataclass
class ObsStack:
    client: Client
    ui_port: int
    metrics_url: str
    emulator_url: str

    async def scrape_text(self) -> str:
        # Plain HTTP: `verify=False` loads no CA bundle (~17 ms of CPU a client, a scrape a poll).
        async with httpx.AsyncClient(timeout=10, verify=False) as http:
            answer = await http.get(f"{self.metrics_url}/metrics")
        answer.raise_for_status()
        return answer.text

    async def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of a scrape, keyed by (name, labels)."""
        return samples_of(await self.scrape_text())

    async def value(self, name: str, **labels: str) -> float | None:
        return (await self.samples()).get((name, frozenset(labels.items())))

    async def faults(self, **rates: float) -> None:
        async with httpx.AsyncClient(base_url=self.emulator_url, timeout=5) as http:
            await ControlPlane(http).faults(**rates)


async def worker_serves(client: Client, account: str, worker: asyncio.Task[None]) -> None:
    """Wait for the worker's permit ledger of `account`: `PoolClient.apply` refuses
    a pool whose account no worker serves, and the worker starts it asynchronously."""
    handle = client.get_workflow_handle(ledger_workflow_id(account))
    for _ in range(150):
        if worker.done():
            worker.result()
            raise AssertionError("the worker stopped before it started its ledger")
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no running ledger for account {account!r} after 15 s")


@contextlib.asynccontextmanager
async def worker_running(
    config: WorkerConfig, client: Client, accounts: Iterable[str], *, every: float, **more: Any
) -> AsyncIterator[None]:
    """The production worker on `client`, its /metrics on 127.0.0.1, its pool gauges and
    statuses read every `every` seconds, once it serves `accounts`; stopped on the way out."""
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(
            config,
            client,
            shutdown_event=stop,
            metrics_host="127.0.0.1",
            pool_metrics_max_age=every,
            pool_status_max_age=every,
            **more,
        )
    )
    try:
        for account in accounts:
            await worker_serves(client, account, worker)
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker, 30)


def emulator_server(api_key: str, port: int, seed: int) -> InProcessServer:
    """The emulator over real HTTP on `port` (uvicorn in this event loop): account
    `default` with `api_key`, devices ready after a second, creates unthrottled."""
    app = create_app(
        EmulatorConfig(
            accounts={"default": [api_key]},
            provision_seconds=1,
            creates_per_minute=1000,
            terminate_seconds=0.2,
            seed=seed,
        )
    )
    return InProcessServer(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )


def worker_config(
    api_key: str, emulator_url: str, proxy_password: str, metrics_port: int
) -> WorkerConfig:
    """The production worker's config for one account, `default`, on the emulator at
    `emulator_url`, with the stacks' proxy pool and `OBS_SETTINGS`."""
    return WorkerConfig(
        accounts={
            "default": AccountSettings(
                name="default",
                base_url=emulator_url,
                api_key=SecretStr(api_key),
                creates_per_minute=1000,
                timeout_seconds=3,
            )
        },
        proxy_pools=proxy_pools(proxy_password),
        settings=OBS_SETTINGS,
        metrics_port=metrics_port,
        graceful_shutdown_seconds=1,
    )
