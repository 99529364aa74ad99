"""The worker's probes when it is *not* ready: `/readyz` says 503, `/healthz` still 200.

README: `/readyz` is "connected to Temporal, every queue polling". No server:
the Temporal client is a lazy one pointed at a closed port, so its health check
fails as it would against a Temporal that is down, and the workers are
stand-ins that only say whether they run (all `/readyz` reads of them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry
from temporalio.client import Client

from devicepool.activities.models import PoolSettings
from devicepool.testing import free_port as closed_port  # nothing listens on it
from devicepool.worker.config import WorkerConfig
from devicepool.worker.http import start_http_server
from devicepool.worker.main import _Running
from devicepool.worker.metrics import WorkerGauges


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Callable[[], Awaitable[bool]]], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(ready: Callable[[], Awaitable[bool]]) -> str:
        server, port = await start_http_server(host="127.0.0.1", port=0, ready=ready)
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_readyz_is_503_while_not_ready_and_healthz_still_200(
    serve: Callable[[Callable[[], Awaitable[bool]]], Awaitable[str]],
) -> None:
    answers = [False, True]

    async def ready() -> bool:
        return answers.pop(0)

    url = await serve(ready)
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        not_ready = await http.get("/readyz")
        assert (not_ready.status_code, not_ready.text) == (503, "not ready\n")
        assert (await http.get("/healthz")).status_code == 200
        now_ready = await http.get("/readyz")
        assert (now_ready.status_code, now_ready.text) == (200, "ready\n")


class StandInWorker:
    """What `_Running` reads of a `temporalio.worker.Worker`: its queue, whether it runs."""

    def __init__(self, task_queue: str) -> None:
        self.task_queue = task_queue
        self.is_running = False
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        self.is_running = True
        await self.stopped.wait()
        self.is_running = False


async def test_not_ready_before_polling_when_a_worker_stopped_or_temporal_is_down() -> None:
    down = await Client.connect(f"127.0.0.1:{closed_port()}", lazy=True)
    workers = [StandInWorker("devicepool"), StandInWorker("devicepool-watch")]
    gauges = WorkerGauges(CollectorRegistry())
    running = _Running(down, workers, gauges)  # type: ignore[arg-type]
    assert await running.ready() is False  # nothing polls yet

    running.start(WorkerConfig(accounts={}, proxy_pools={}, settings=PoolSettings()))
    await asyncio.sleep(0)  # the workers' run() begins
    assert all(w.is_running for w in workers)
    # Every worker polls, but Temporal does not answer its health check.
    assert await running.ready() is False

    # With Temporal answering, one worker that stopped is enough to be not ready.
    async def healthy(**_: object) -> bool:
        return True

    down.service_client.check_health = healthy  # type: ignore[method-assign]
    assert await running.ready() is True
    workers[1].stopped.set()
    await asyncio.sleep(0)
    assert await running.ready() is False
    workers[0].stopped.set()
