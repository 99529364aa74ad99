"""The BitBrowser Local API emulator as FastAPI apps: one per node, all serving one account.

Each node's app answers the Local API at its root, as the desktop client does
on its loopback port, and the `/_emulator` control plane (no auth). Every
Local API call is a `POST` with a JSON body answered in the envelope
(`_envelope`); the rules live in `state.BitBrowserEmulator`, shared by every
node's app (`app.state.emulator`; `app.state.node` is the node's name).

A node taken down (`POST /_emulator/node {"up": false}`) answers its Local
API with HTTP 503 and a plain-text body: a closed desktop client refuses the
connection, which a port that keeps its control plane cannot do; its control
plane keeps answering, so it can be brought up again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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

    With `config.state_file`, the account is read from it (or starts empty) and
    written after every call; `app.state.emulator.close()` releases the file.
    Raises `StateFileError` if the file cannot be used.
    """
    emulator = BitBrowserEmulator(config or BitBrowserConfig())
    return {name: create_app(emulator, name) for name in emulator.nodes}


def create_app(emulator: BitBrowserEmulator, node_name: str) -> FastAPI:
    """The app of one node of `emulator`'s account."""
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
    app.add_middleware(_CommitControlPlane, emulator=emulator)
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
    @app.get("/_emulator/stats")
    async def stats() -> Response:
        return JSONResponse(emulator.stats())

    @app.get("/_emulator/secrets")
    async def secrets() -> Response:
        """The secrets live objects hold: for tests that look for leaks. Never logged."""
        return JSONResponse({"secrets": emulator.secrets()})

    @app.get("/_emulator/faults")
    async def get_faults() -> Response:
        return JSONResponse(emulator.faults.to_json())

    @app.post("/_emulator/faults")
    async def set_faults(request: Request) -> Response:
        return JSONResponse(emulator.set_faults(await _json_body(request)))

    @app.get("/_emulator/clock")
    async def get_clock() -> Response:
        return JSONResponse(emulator.clock_json())

    @app.post("/_emulator/clock")
    async def set_clock(request: Request) -> Response:
        return JSONResponse(emulator.set_clock(await _json_body(request)))

    @app.post("/_emulator/reset")
    async def reset() -> Response:
        emulator.reset()
        return JSONResponse(emulator.stats())

    @app.get("/_emulator/node")
    async def get_node() -> Response:
        return JSONResponse(emulator.node_json(node))

    @app.post("/_emulator/node")
    async def set_node(request: Request) -> Response:
        body = await _json_body(request)
        up = body.get("up") if isinstance(body, dict) else None
        return JSONResponse(emulator.set_node_up(node, up))

    @app.get("/_emulator/nodes")
    async def get_nodes() -> Response:
        return JSONResponse([emulator.node_json(n) for n in emulator.nodes.values()])

    @app.post("/_emulator/nodes/{name}")
    async def set_other_node(name: str, request: Request) -> Response:
        body = await _json_body(request)
        up = body.get("up") if isinstance(body, dict) else None
        return JSONResponse(emulator.set_node_up(emulator.node(name), up))

    @app.post("/_emulator/browsers/{profile_id}/kill")
    async def kill(profile_id: str, request: Request) -> Response:
        return JSONResponse(emulator.kill(profile_id, await _json_body(request)))

    @app.post("/_emulator/phones/{phone_id}/offline")
    async def phone_offline(phone_id: str) -> Response:
        return JSONResponse(emulator.set_phone_offline(phone_id, True))

    @app.post("/_emulator/phones/{phone_id}/online")
    async def phone_online(phone_id: str) -> Response:
        return JSONResponse(emulator.set_phone_offline(phone_id, False))


def _add_local_api(app: FastAPI, emulator: BitBrowserEmulator, node: Node) -> None:
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]

    # Handlers are `async def`: they run on the event loop, one at a time between awaits.
    @app.api_route("/{path:path}", methods=methods, include_in_schema=False)
    async def local_api(path: str, request: Request) -> Response:
        if not node.up:
            return PlainTextResponse(NODE_DOWN_BODY, status_code=503)
        try:
            emulator.authenticate(request.headers.get("x-api-key"))
            if request.method != "POST":
                raise LocalApiError(text.NOT_POST, status=405)
            decision = emulator.draw_faults()
            await asyncio.sleep(decision.latency_seconds)
            if decision.server_error:
                return PlainTextResponse("Internal Server Error (injected fault)", status_code=500)
            if decision.failure:
                raise LocalApiError(text.BUSY)
            body = parse_body(await request.body())
            try:
                answer = ok(await emulator.call(node, "/" + path, body))
            finally:
                emulator.commit()
        except LocalApiError as error:
            return refusal(error)
        if decision.hang_seconds is not None:
            # The work is done; the answer is lost on the way (the client times out).
            await asyncio.sleep(decision.hang_seconds)
        return answer


class _CommitControlPlane:
    """Writes the account to its state file before a control-plane `POST` is answered.

    (The Local API commits in its own handler.)
    """

    def __init__(self, app: ASGIApp, emulator: BitBrowserEmulator) -> None:
        self.app = app
        self.emulator = emulator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].startswith("/_emulator/")
        ):
            await self.app(scope, receive, send)
            return

        async def commit_first(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.emulator.commit()
            await send(message)

        await self.app(scope, receive, commit_first)
