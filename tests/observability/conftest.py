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
from collections.abc import AsyncIterator

import pytest
import uvicorn
from pydantic import SecretStr

from devicepool.activities.models import AccountSettings, ProxyPoolSettings
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import free_port
from devicepool.worker.config import WorkerConfig
from devicepool.worker.main import run_worker, sdk_runtime
from tests.helpers.obs_stack import API_KEY, OBS_SETTINGS, ObsStack, worker_serves
from tests.helpers.servers import InProcessServer, dev_server


@pytest.fixture(scope="session")
async def obs_stack() -> AsyncIterator[ObsStack]:
    runtime, buffer = sdk_runtime()
    ui_port, emulator_port, metrics_port = free_port(), free_port(), free_port()
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    server = InProcessServer(
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
    async with await dev_server(runtime=runtime, ui=True, ui_port=ui_port) as env:
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
