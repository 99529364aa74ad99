"""Serving an emulator's apps from one process: every socket bound before any serves, one line
per app on stdout once all listen, SIGINT/SIGTERM stops them all. Imports no vendor package.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def bind(host: str, ports: list[int]) -> list[socket.socket]:
    """One listening socket per port, all or none (ValueError names the port that failed)."""
    bound: list[socket.socket] = []
    for port in ports:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as error:
            sock.close()
            for other in bound:
                other.close()
            raise ValueError(f"cannot listen on {host}:{port}: {error.strerror}") from None
        bound.append(sock)
    return bound


def run(
    parser: argparse.ArgumentParser,
    sockets: list[socket.socket],
    create_apps: Callable[[], dict[str, FastAPI]],
    refused: type[Exception],
) -> int:
    """Build the apps (`refused`, e.g. a state file in use: the sockets closed, a usage error),
    serve them on `sockets` until a stop signal, then close their emulator; 0."""
    try:
        apps = create_apps()
    except refused as error:
        for sock in sockets:
            sock.close()
        parser.error(str(error))
    try:
        serve(apps, sockets)
    finally:
        next(iter(apps.values())).state.emulator.close()
    return 0


def serve(apps: dict[str, FastAPI], sockets: list[socket.socket]) -> None:
    """Serve every app on its socket until SIGINT/SIGTERM, then stop all and return."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # One handler stops every app's server (uvicorn's own would stop one of them).
            yield

    servers = [Server(uvicorn.Config(app, log_level="info")) for app in apps.values()]
    asyncio.run(_serve_all(servers, list(apps), sockets))


async def _serve_all(servers: list[Any], names: list[str], sockets: list[socket.socket]) -> None:
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop)
    tasks = [
        asyncio.create_task(server.serve(sockets=[sock]))
        for server, sock in zip(servers, sockets, strict=True)
    ]
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            stop()
            break
        await asyncio.sleep(0.05)
    else:
        for name, sock in zip(names, sockets, strict=True):
            host, port = sock.getsockname()[:2]
            print(f"{name} http://{host}:{port}", flush=True)
    await asyncio.gather(*tasks)
