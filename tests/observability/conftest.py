"""One stack for each observability module: dev server (Web UI on), emulator, `run_worker`.

Per module, not per session: the schedule keeps a module-scoped fixture's tests on
one xdist worker (one stack for the module, not one for each worker its tests land
on), and the stack stops with its module instead of idling on to the end of the run
(its worker's gauge refreshes and polls cost ~1 CPU-s a minute).

Unlike tests/workflows, the worker here is the production wiring
(`worker.main.run_worker`): the real `/metrics` endpoint on a free port, the
pool gauges read from visibility, the reconcile interceptor and the SDK metrics
buffer on the client's runtime. The emulator is served over real HTTP by
uvicorn in this event loop, so the worker config is the production shape too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from devicepool.testing import free_ports
from devicepool.worker.main import sdk_runtime
from tests.helpers.obs_stack import (
    API_KEY,
    ObsStack,
    emulator_server,
    worker_config,
    worker_running,
)
from tests.helpers.servers import dev_server


@pytest.fixture(scope="module")
async def obs_stack(request: pytest.FixtureRequest) -> AsyncIterator[ObsStack]:
    # How often the worker re-reads the pool gauges and statuses: a module's own
    # `GAUGES_EVERY`, else every half second (the metrics tests' scrapes wait on them).
    every = getattr(request.module, "GAUGES_EVERY", 0.5)
    runtime, buffer = sdk_runtime()
    ui_port, emulator_port, metrics_port = free_ports(3)  # distinct: calls one by one may not be
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    server = emulator_server(API_KEY, emulator_port, seed=11)
    serving = asyncio.create_task(server.serve())
    config = worker_config(API_KEY, emulator_url, "pw", metrics_port)
    async with await dev_server(runtime=runtime, ui=True, ui_port=ui_port) as env:
        stack = ObsStack(env.client, ui_port, f"http://127.0.0.1:{metrics_port}", emulator_url)
        try:
            async with worker_running(
                config, env.client, ["default"], every=every, sdk_metrics=buffer
            ):
                yield stack
        finally:
            server.should_exit = True
            await serving
