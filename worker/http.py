"""The worker's small HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.

Deliberately minimal (asyncio streams, no framework): Prometheus scrapes
`/metrics` (the worker's registry; `before_scrape` lets collectors that read
Temporal refresh first, asynchronously); Kubernetes probes
`/healthz` (the process answers) and `/readyz` (connected to Temporal and every
worker polling).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

ReadyCheck = Callable[[], Awaitable[bool]]
BeforeScrape = Callable[[], Awaitable[None]]


async def start_http_server(
    *,
    host: str,
    port: int,
    ready: ReadyCheck,
    registry: CollectorRegistry = REGISTRY,
    before_scrape: BeforeScrape | None = None,
) -> tuple[asyncio.Server, int]:
    """Start serving; returns the server and the bound port (useful with port 0)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            # Drain the headers; none of them matter here.
            while await asyncio.wait_for(reader.readline(), timeout=5) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            method, path = (parts[0], parts[1].split("?")[0]) if len(parts) >= 2 else ("", "")
            if method not in ("GET", "HEAD"):
                status, ctype, body = (
                    "405 Method Not Allowed",
                    "text/plain",
                    b"method not allowed\n",
                )
            elif path == "/metrics":
                if before_scrape is not None:
                    await before_scrape()
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(registry)
            elif path == "/healthz":
                status, ctype, body = "200 OK", "text/plain", b"ok\n"
            elif path == "/readyz":
                ok = await ready()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", b"ready\n" if ok else b"not ready\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host=host, port=port)
    bound = server.sockets[0].getsockname()[1]
    return server, int(bound)
