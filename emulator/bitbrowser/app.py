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

from devicepool.emulator._control import add_control_plane, json_body, new_app
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
    app = new_app(f"BitBrowser Local API emulator ({node.name})")
    app.state.emulator = emulator
    app.state.node = node.name
    _add_control_plane(app, emulator, node)
    _add_local_api(app, emulator, node)
    return app


def _add_control_plane(app: FastAPI, emulator: BitBrowserEmulator, node: Node) -> None:
    def read(answer: Callable[[], Any]) -> Response:
        with emulator.transaction(write=False):
            return JSONResponse(answer())

    def change(answer: Callable[[], Any]) -> Response:
        with emulator.transaction():
            return JSONResponse(answer())

    add_control_plane(app, emulator, read=read, change=change, secrets=emulator.secrets)

    async def set_up(request: Request, which: Callable[[], Node]) -> Response:
        body = await json_body(request)
        up = body.get("up") if isinstance(body, dict) else None
        return change(lambda: emulator.set_node_up(which(), up))

    @app.get("/_emulator/node")
    async def get_node() -> Response:
        return read(lambda: emulator.node_json(node))

    @app.post("/_emulator/node")
    async def set_node(request: Request) -> Response:
        return await set_up(request, lambda: node)

    @app.get("/_emulator/nodes")
    async def get_nodes() -> Response:
        return read(lambda: [emulator.node_json(n) for n in emulator.nodes.values()])

    @app.post("/_emulator/nodes/{name}")
    async def set_other_node(name: str, request: Request) -> Response:
        return await set_up(request, lambda: emulator.node(name))

    @app.post("/_emulator/browsers/{profile_id}/kill")
    async def kill(profile_id: str, request: Request) -> Response:
        body = await json_body(request)
        return change(lambda: emulator.kill(profile_id, body))

    @app.get("/_emulator/adb")
    async def get_adb() -> Response:
        return read(emulator.adb_json)

    @app.post("/_emulator/adb")
    async def set_adb(request: Request) -> Response:
        body = await json_body(request)
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
