"""The BitBrowser Local API emulator as FastAPI apps: one per node, all serving one account.

Each node's app answers the Local API at its root, as the desktop client does
on its loopback port, and the `/_emulator` control plane (no auth). Every
Local API call is a `POST` with a JSON body answered in the envelope
(`_envelope`); the rules live in `state.BitBrowserEmulator`, shared by every
node's app (`app.state.emulator`; `app.state.node` is the node's name). Each
request is one `transaction` of the emulator (with the account on disk: under
its file's lock, on what the account's other processes wrote); a body is read
before it starts, since a transaction is held across no await but the
emulator's own.

A node taken down (`POST /_emulator/node {"up": false}`) answers its Local
API with HTTP 503 and a plain-text body: a closed desktop client refuses the
connection, which a port that keeps its control plane cannot do; its control
plane keeps answering, so it can be brought up again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from devicepool.emulator._problems import ProblemError, problem_response
from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._bodies import parse_body
from devicepool.emulator.bitbrowser._envelope import LocalApiError, ok, refusal
from devicepool.emulator.bitbrowser._statefile import StateFileError
from devicepool.emulator.bitbrowser.config import BitBrowserConfig
from devicepool.emulator.bitbrowser.state import BitBrowserEmulator, Node

__all__ = ["BitBrowserConfig", "BitBrowserEmulator", "StateFileError", "create_app", "create_apps"]

NODE_DOWN_BODY = "node down (emulated): the BitBrowser client is not running"


def create_apps(config: BitBrowserConfig | None = None) -> dict[str, FastAPI]:
    """One app per configured node, all on one emulated account (in node order).

    With `config.state_file` (or `config.accounts_dir`), the account is read
    from its file (or starts empty), shared with the other processes on it and
    written after every call; `app.state.emulator.close()` lets it go. Raises
    `StateFileError` if the file cannot be used.
    """
    emulator = BitBrowserEmulator(config or BitBrowserConfig())
    return {name: create_app(emulator, name) for name in emulator.local}


def create_app(emulator: BitBrowserEmulator, node_name: str) -> FastAPI:
    """The app of one node of `emulator`'s account (one this process serves)."""
    if node_name not in emulator.local:
        raise ValueError(f"{node_name!r} is not served here; nodes: {emulator.local}")
    node = emulator.node(node_name)
    app = FastAPI(
        title=f"BitBrowser Local API emulator ({node.name})",
        docs_url="/_emulator/docs",
        redoc_url=None,
        openapi_url="/_emulator/openapi.json",
    )
    app.state.emulator = emulator
    app.state.node = node.name

    async def on_problem(_: Request, error: Exception) -> Response:
        assert isinstance(error, ProblemError)
        return problem_response(error)

    app.add_exception_handler(ProblemError, on_problem)
    _add_control_plane(app, emulator, node)
    _add_local_api(app, emulator, node)
    return app


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return await request.json()
    except ValueError:
        raise ProblemError(400, "invalid_argument", "request body is not valid JSON") from None


def _add_control_plane(app: FastAPI, emulator: BitBrowserEmulator, node: Node) -> None:
    def read(answer: Callable[[], Any]) -> Response:
        with emulator.transaction(write=False):
            return JSONResponse(answer())

    def change(answer: Callable[[], Any]) -> Response:
        with emulator.transaction():
            return JSONResponse(answer())

    @app.get("/_emulator/stats")
    async def stats() -> Response:
        return read(emulator.stats)

    @app.get("/_emulator/secrets")
    async def secrets() -> Response:
        """The secrets live objects hold: for tests that look for leaks. Never logged."""
        return read(lambda: {"secrets": emulator.secrets()})

    @app.get("/_emulator/faults")
    async def get_faults() -> Response:
        return JSONResponse(emulator.faults.to_json())  # this process's

    @app.post("/_emulator/faults")
    async def set_faults(request: Request) -> Response:
        return JSONResponse(emulator.set_faults(await _json_body(request)))

    @app.get("/_emulator/clock")
    async def get_clock() -> Response:
        return read(emulator.clock_json)

    @app.post("/_emulator/clock")
    async def set_clock(request: Request) -> Response:
        body = await _json_body(request)
        return change(lambda: emulator.set_clock(body))

    @app.post("/_emulator/reset")
    async def reset() -> Response:
        def reset_and_stats() -> dict[str, Any]:
            emulator.reset()
            return emulator.stats()

        return change(reset_and_stats)

    @app.get("/_emulator/node")
    async def get_node() -> Response:
        return read(lambda: emulator.node_json(node))

    @app.post("/_emulator/node")
    async def set_node(request: Request) -> Response:
        body = await _json_body(request)
        up = body.get("up") if isinstance(body, dict) else None
        return change(lambda: emulator.set_node_up(node, up))

    @app.get("/_emulator/nodes")
    async def get_nodes() -> Response:
        return read(lambda: [emulator.node_json(n) for n in emulator.nodes.values()])

    @app.post("/_emulator/nodes/{name}")
    async def set_other_node(name: str, request: Request) -> Response:
        body = await _json_body(request)
        up = body.get("up") if isinstance(body, dict) else None
        return change(lambda: emulator.set_node_up(emulator.node(name), up))

    @app.post("/_emulator/browsers/{profile_id}/kill")
    async def kill(profile_id: str, request: Request) -> Response:
        body = await _json_body(request)
        return change(lambda: emulator.kill(profile_id, body))

    @app.get("/_emulator/adb")
    async def get_adb() -> Response:
        return read(emulator.adb_json)

    @app.post("/_emulator/adb")
    async def set_adb(request: Request) -> Response:
        body = await _json_body(request)
        return change(lambda: emulator.set_adb(body))

    @app.post("/_emulator/phones/{phone_id}/offline")
    async def phone_offline(phone_id: str) -> Response:
        return change(lambda: emulator.set_phone_offline(phone_id, True))

    @app.post("/_emulator/phones/{phone_id}/online")
    async def phone_online(phone_id: str) -> Response:
        return change(lambda: emulator.set_phone_offline(phone_id, False))


def _add_local_api(app: FastAPI, emulator: BitBrowserEmulator, node: Node) -> None:
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]

    # Handlers are `async def`: they run on the event loop, one at a time between awaits.
    @app.api_route("/{path:path}", methods=methods, include_in_schema=False)
    async def local_api(path: str, request: Request) -> Response:
        raw = await request.body()
        with emulator.transaction():
            if not node.up:  # (another process of the account may have taken it down)
                return PlainTextResponse(NODE_DOWN_BODY, status_code=503)
            try:
                emulator.authenticate(request.headers.get("x-api-key"))
                if request.method != "POST":
                    raise LocalApiError(text.NOT_POST, status=405)
                decision = emulator.draw_faults()
                await emulator.pause(decision.latency_seconds)
                if decision.server_error:
                    return PlainTextResponse(
                        "Internal Server Error (injected fault)", status_code=500
                    )
                if decision.failure:
                    raise LocalApiError(text.BUSY)
                body = parse_body(raw)
                answer = ok(await emulator.call(node, "/" + path, body))
            except LocalApiError as error:
                return refusal(error)
        if decision.hang_seconds is not None:
            # The work is done; the answer is lost on the way (the client times out).
            await asyncio.sleep(decision.hang_seconds)
        return answer
