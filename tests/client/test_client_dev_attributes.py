"""`devicepool dev` on a data dir an older build made: the server registers its
`--search-attribute`s only when it creates its database, so the stack registers a newer
build's (`DevicePoolRowAt`) itself, before its worker checks them and refuses to start."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from devicepool.api.names import SA_ROW_AT, SEARCH_ATTRIBUTES
from devicepool.client._dev_config import DevOptions
from devicepool.client._dev_processes import stop_child
from devicepool.client._dev_stack import DevStack
from devicepool.connect import connect
from devicepool.testing import eventually, free_port
from tests.helpers.servers import temporal_binary

pytestmark = pytest.mark.devserver


async def test_a_data_dir_of_an_older_build_gets_the_new_search_attribute(tmp_path: Path) -> None:
    port = await _older_build_server(tmp_path)

    (tmp_path / "logs").mkdir()
    stack = DevStack(DevOptions(data_dir=tmp_path, port=port), out=lambda line: None)
    await stack._start_server()
    try:
        await stack._wait_temporal()
        assert set(SEARCH_ATTRIBUTES) <= await _registered(port)
    finally:
        for child in stack.children:
            await stop_child(child)
            child.log.close()


async def _older_build_server(tmp_path: Path) -> int:
    """An older build's server made the data dir (its search attributes without
    `DevicePoolRowAt`) and stopped; its port. A port another process took between the
    pick and the server's bind ends that server at once: a new port is tried (as
    `start_dev_server` does), and the last one's stderr is shown if none comes up."""
    older = [f"{n}={t}" for n, t in SEARCH_ATTRIBUTES.items() if n != SA_ROW_AT]
    log = tmp_path / "older-server.log"
    for _ in range(3):
        port = free_port()
        command = [temporal_binary(), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        command += ["--port", str(port), "--log-level", "error"]
        command += ["--db-filename", str(tmp_path / "temporal.db")]
        for pair in older:
            command += ["--search-attribute", pair]
        # A server in the background, as `devicepool dev` runs it.
        with log.open("wb") as err:
            before = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)  # noqa: ASYNC220

        async def up(server: subprocess.Popen[bytes] = before, at: int = port) -> object:
            if server.poll() is not None:
                return "exited"
            return await _registered(at)

        try:
            had = await eventually(
                up, timeout=60, what="the older build's server", retry_on=(Exception,)
            )
            if had == "exited":
                continue
            assert isinstance(had, set)
            assert SA_ROW_AT not in had and "DevicePoolPhase" in had
            return port
        finally:
            if before.poll() is None:
                before.send_signal(signal.SIGINT)
            before.wait(timeout=30)
    raise AssertionError(f"the older build's server never came up: {log.read_text()[-2000:]}")


async def _registered(port: int) -> set[str]:
    client = await connect(address=f"127.0.0.1:{port}", env={})
    answer = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    return set(answer.custom_attributes)
