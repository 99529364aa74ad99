"""The worker's small HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.

Answered by the standard library's threaded server, never by the event loop that runs every
workflow activation and watch. `/metrics` serves the body rendered last (every `render_every`
seconds in a worker thread, after `before_scrape`); `/readyz` asks `ready` on the loop, and a
loop silent for `READY_TIMEOUT` is not ready. Why: docs/operations.md, 'Metrics, alerts and the
dashboard'."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

ReadyCheck = Callable[[], Coroutine[Any, Any, bool]]
BeforeScrape = Callable[[], Awaitable[None]]

log = logging.getLogger("devicepool.metrics")

# How often `/metrics`' body is rendered again, at least: a render takes ~0.1 s
# at 1,000 pools, and a render never takes more than a fifth of the time.
RENDER_EVERY = 2.0
# How long the first scrape waits for the first render (the pool gauges' first
# listing included) before it renders by itself.
FIRST_RENDER_TIMEOUT = 15.0
READY_TIMEOUT = 5.0
REQUEST_TIMEOUT = 5.0


class RenderedMetrics:
    """The registry's exposition, rendered off the loop and off the scrape path."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        loop: asyncio.AbstractEventLoop,
        before_scrape: BeforeScrape | None = None,
        render_every: float = RENDER_EVERY,
    ) -> None:
        self._registry = registry
        self._loop = loop
        self._before = before_scrape
        self._every = render_every
        self._body: bytes | None = None
        self._rendered = threading.Event()
        self._wanted = asyncio.Event()  # set (on the loop) by the first scrape

    def body(self) -> bytes:
        """The last rendered body (any thread); the first scrape waits for the first render."""
        if not self._wanted.is_set():
            with contextlib.suppress(RuntimeError):  # a closed loop: render here
                self._loop.call_soon_threadsafe(self._wanted.set)
        if self._rendered.wait(FIRST_RENDER_TIMEOUT) and self._body is not None:
            return self._body
        return generate_latest(self._registry)

    async def run(self) -> None:
        """Render every `render_every` seconds once somebody scraped (nobody: nothing)."""
        await self._wanted.wait()
        while True:
            started = time.monotonic()
            try:
                if self._before is not None:
                    await self._before()
                self._body = await asyncio.to_thread(generate_latest, self._registry)
                self._rendered.set()
            except Exception as exc:  # keep serving the last body; the next round tries again
                log.warning("rendering /metrics failed: %s", exc)
            took = time.monotonic() - started
            await asyncio.sleep(max(self._every, 4 * took))


class HttpEndpoint:
    """The running endpoint: `close()`, then `await wait_closed()` (as an `asyncio.Server`)."""

    def __init__(self, httpd: ThreadingHTTPServer, render: asyncio.Task[None]) -> None:
        self._httpd = httpd
        self._render = render
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        self._stopping: threading.Thread | None = None

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._render.cancel()
        if self._stopping is None:
            self._stopping = threading.Thread(target=self._httpd.shutdown, daemon=True)
            self._stopping.start()

    async def wait_closed(self) -> None:
        self.close()
        assert self._stopping is not None
        await asyncio.to_thread(self._stopping.join)
        self._httpd.server_close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._render


async def start_http_server(
    *,
    host: str,
    port: int,
    ready: ReadyCheck,
    registry: CollectorRegistry = REGISTRY,
    before_scrape: BeforeScrape | None = None,
    render_every: float = RENDER_EVERY,
) -> tuple[HttpEndpoint, int]:
    """Start serving; returns the endpoint and the bound port (useful with port 0)."""
    loop = asyncio.get_running_loop()
    metrics = RenderedMetrics(
        registry, loop=loop, before_scrape=before_scrape, render_every=render_every
    )

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT

        def do_GET(self) -> None:
            self._answer(send_body=True)

        def do_HEAD(self) -> None:
            self._answer(send_body=False)

        def _not_allowed(self) -> None:
            self._send(405, "text/plain", b"method not allowed\n", True)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

        def _answer(self, *, send_body: bool) -> None:
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, metrics.body(), send_body)
            elif path == "/healthz":
                self._send(200, "text/plain", b"ok\n", send_body)
            elif path == "/readyz":
                ok = _ask_ready(loop, ready)
                body = b"ready\n" if ok else b"not ready\n"
                self._send(200 if ok else 503, "text/plain", body, send_body)
            else:
                self._send(404, "text/plain", b"not found\n", send_body)

        def _send(self, code: int, ctype: str, body: bytes, send_body: bool) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every 15 s is not worth a log line

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    httpd = Server((host, port), Handler)
    endpoint = HttpEndpoint(httpd, asyncio.create_task(metrics.run(), name="render /metrics"))
    endpoint.start()
    return endpoint, int(httpd.server_address[1])


def _ask_ready(loop: asyncio.AbstractEventLoop, ready: ReadyCheck) -> bool:
    try:
        answer = asyncio.run_coroutine_threadsafe(ready(), loop)
    except RuntimeError:  # the loop is closed
        return False
    try:
        return answer.result(READY_TIMEOUT)
    except Exception:
        answer.cancel()
        return False
