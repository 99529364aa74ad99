"""The node worker says "serving" only once the registry has its first beat (no server).

`devicepool dev --apply` starts the node workers one by one, waits for each one's
"node worker NAME serving" line, then applies the example BrowserPool. The line came
before the first beat reached the registry, so the pool's first pass could find only
node-1 alive and place all four profiles there (no pass moves a profile after): the
e2e test's first wait for a 2/2 spread timed out once in CI.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from devicepool.worker import node as node_worker
from devicepool.worker.node import NodeOptions, run_node_worker


class _Idle:
    def __init__(self, queue: str) -> None:
        self.task_queue = queue
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        await self.stopped.wait()

    async def shutdown(self) -> None:
        self.stopped.set()


async def _health(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"success": True, "data": {}})


async def test_serving_is_said_after_the_first_beat_reached_the_registry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    order: list[str] = []

    async def slow_beat(client: Any, beat: Any) -> None:
        await asyncio.sleep(0.3)  # the registry's signal on its way
        order.append("beat")

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "serving" in record.getMessage():
                order.append("serving")

    monkeypatch.setattr(node_worker, "send_beat", slow_beat)
    monkeypatch.setattr(
        node_worker, "node_workers", lambda client, *a, **k: [_Idle("devicepool-node-node-1")]
    )
    handler = Recorder()
    caplog.set_level(logging.INFO, logger=node_worker.log.name)
    node_worker.log.addHandler(handler)
    stop = asyncio.Event()
    options = NodeOptions(node="node-1", labels={"node": "node-1"}, bitbrowser_url="http://n1")
    task = asyncio.ensure_future(
        run_node_worker(
            options, client=None, shutdown_event=stop, transport=httpx.MockTransport(_health)
        )  # type: ignore[arg-type]
    )
    try:
        for _ in range(100):
            if "serving" in order:
                break
            await asyncio.sleep(0.05)
        assert order[:2] == ["beat", "serving"], order
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        node_worker.log.removeHandler(handler)
