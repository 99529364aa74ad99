"""The BitCloudPhone emulator as a FastAPI app: the public `/api/v1` contract and the
`/_emulator` control plane (no auth) that tests and benchmarks drive.

The HTTP layer only translates: every rule lives in the provider,
`emulator.state.Emulator` and the private modules it composes, reachable as
`app.state.emulator`. Faults (injected errors, latency, lost
responses) wrap the public API only, in an ASGI middleware.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devicepool.emulator._bodies import parse_json_body
from devicepool.emulator._control import add_control_plane, new_app
from devicepool.emulator._problems import (
    INVALID_ARGUMENT,
    SERVER_ERROR,
    ProblemError,
    code_for_status,
    problem_response,
)
from devicepool.emulator._statefile import StateFileError
from devicepool.emulator.config import EmulatorConfig
from devicepool.emulator.state import Emulator

__all__ = ["EmulatorConfig", "StateFileError", "create_app"]

_CREATE_PATH = re.compile(r"^/api/v1/[^/]+/devices/?$")


def create_app(config: EmulatorConfig | None = None) -> FastAPI:
    """Build an emulator app with its own provider: in memory, or on `config.state_file`.

    With a state file, the app's lifespan (or `app.state.emulator.close()`)
    releases the file; every change is on disk as soon as it is answered.
    Raises `StateFileError` if the file cannot be used.
    """
    emulator = Emulator(config or EmulatorConfig())
    app = new_app("BitCloudPhone emulator", close=emulator.close)
    app.state.emulator = emulator
    app.add_middleware(_FaultInjection, emulator=emulator)
    _install_error_handlers(app)
    _add_public_api(app, emulator)
    _add_control_plane(app, emulator)
    return app


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    """Beside `ProblemError` (`new_app`): FastAPI's own errors and crashes as problems too."""

    async def on_validation(_: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors()
        )
        return problem_response(ProblemError(400, INVALID_ARGUMENT, details or "invalid request"))

    async def on_http(_: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        detail = error.detail if isinstance(error.detail, str) else str(error.detail)
        return problem_response(
            ProblemError(
                error.status_code,
                code_for_status(error.status_code),
                detail,
                headers=dict(error.headers or {}),
            )
        )

    async def on_crash(_: Request, error: Exception) -> Response:
        # Starlette still re-raises after answering, so the traceback reaches the log.
        return problem_response(ProblemError(500, SERVER_ERROR, f"internal error: {error!r}"))

    app.add_exception_handler(Exception, on_crash)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)


def _add_public_api(app: FastAPI, emulator: Emulator) -> None:
    def account_of(request: Request) -> str:
        return emulator.authenticate(request.headers.get("authorization"))

    # Handlers are `async def` on purpose: they run on the event loop, one at a
    # time between awaits, so the provider's check-then-act needs no lock.

    @app.post("/api/v1/devices/status:batch")
    async def batch_status(request: Request) -> Response:
        account = account_of(request)
        body = parse_json_body(await request.body())
        return _json(emulator.batch_status(account, body))

    @app.post("/api/v1/{platform}/devices", status_code=202)
    async def create_device(platform: str, request: Request) -> Response:
        answer = emulator.create_device(
            authorization=request.headers.get("authorization"),
            platform=platform,
            raw_body=await request.body(),
            idempotency_key=request.headers.get("idempotency-key"),
        )
        return _json(answer.body, answer.status, answer.headers)

    @app.get("/api/v1/devices")
    async def list_devices(
        request: Request, page_size: int | None = None, page_token: str | None = None
    ) -> Response:
        # page_size is typed so FastAPI's own validation (answered as 400) checks it.
        account = account_of(request)
        query = request.query_params
        return _json(
            emulator.list_devices(
                account,
                labels=query.getlist("label"),
                statuses=query.getlist("status"),
                page_size=page_size,
                page_token=page_token,
            )
        )

    @app.get("/api/v1/devices/{device_id}")
    async def get_device(device_id: str, request: Request) -> Response:
        return _json(emulator.get_device(account_of(request), device_id))

    @app.get("/api/v1/devices/{device_id}/status")
    async def device_status(device_id: str, request: Request) -> Response:
        return _json(emulator.device_status(account_of(request), device_id))

    @app.post("/api/v1/devices/{device_id}/reboot", status_code=202)
    async def reboot(device_id: str, request: Request) -> Response:
        return _json(emulator.reboot(account_of(request), device_id), 202)

    @app.delete("/api/v1/devices/{device_id}", status_code=202)
    async def delete(device_id: str, request: Request) -> Response:
        return _json(emulator.delete(account_of(request), device_id), 202)

    @app.get("/api/v1/regions")
    async def regions(request: Request) -> Response:
        account_of(request)
        return _json(emulator.list_regions())


def _add_control_plane(app: FastAPI, emulator: Emulator) -> None:
    @app.post("/_emulator/devices/{device_id}/session")
    async def session(device_id: str, request: Request) -> Response:
        body = parse_json_body(await request.body())
        active = body.get("active") if isinstance(body, dict) else None
        if not isinstance(active, bool):
            raise ProblemError(400, INVALID_ARGUMENT, 'body must be {"active": true|false}')
        return _json(emulator.set_session(device_id, active))

    @app.post("/_emulator/devices/{device_id}/offline")
    async def offline(device_id: str) -> Response:
        return _json(emulator.set_offline(device_id, True))

    @app.post("/_emulator/devices/{device_id}/online")
    async def online(device_id: str) -> Response:
        return _json(emulator.set_offline(device_id, False))

    @app.post("/_emulator/regions/{name}")
    async def region(name: str, request: Request) -> Response:
        body = parse_json_body(await request.body())
        status = body.get("status") if isinstance(body, dict) else None
        return _json(emulator.set_region(name, status))

    async def body_of(request: Request) -> Any:
        return parse_json_body(await request.body(), empty={})

    add_control_plane(app, emulator, body_of=body_of)

    @app.get("/_emulator/creates")
    async def creates() -> Response:
        """Read-only: accepted-create timestamps per account (for window checks)."""
        return _json(emulator.creates())


class _FaultInjection:
    """Applies the configured faults to `/api/v1` requests.

    Latency delays the request; an injected 429/500 answers before the app sees
    the request; a timeout lets the app do its work (the device IS created) and
    then holds the answer back for `timeoutSeconds`, like a response lost on the
    way, so that only a retry with the same Idempotency-Key is safe.
    """

    def __init__(self, app: ASGIApp, emulator: Emulator) -> None:
        self.app = app
        self.emulator = emulator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/v1/"):
            await self.app(scope, receive, send)
            return
        is_create = scope["method"] == "POST" and bool(_CREATE_PATH.match(scope["path"]))
        decision = self.emulator.draw_faults(is_create=is_create)
        if decision.latency_seconds > 0:
            await asyncio.sleep(decision.latency_seconds)
        if decision.reject is not None:
            await problem_response(decision.reject)(scope, receive, send)
            return
        if decision.hang_seconds is None:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        await self.app(scope, receive, hold)
        await asyncio.sleep(decision.hang_seconds)
        for message in held:
            await send(message)
