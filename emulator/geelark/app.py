"""The GeeLark Open API emulator as a FastAPI app.

The Open API is served under `/open/v1/...` (and `/open/v2/phone/newOne`), as at
`https://openapi.geelark.com`: every call a `POST` with a JSON body, answered HTTP 200 in the
envelope (`_envelope`). A call goes through, in order: auth (40002/40003/40013), the request
windows and the two-hour lock (40007/40014, `_limits`), the concurrency limit (47002),
injected latency and whole-call faults, the body (40001), the handler; a successful call may
then be held (`timeoutRate`: the change is made, the answer never comes in time). Our
choices: a method other than POST answers HTTP 405, an unknown path HTTP 404, both with an
envelope (code 40000, 40005), counting in no window.

The control plane, `/_emulator/...` (no auth): `stats`, `faults`, `clock`, `reset`,
`secrets`, and per phone `stop` (the provider shuts it down), `expire`, `busy`, `touch`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from devicepool.emulator._control import add_control_plane, json_body, new_app
from devicepool.emulator.geelark import _envelope
from devicepool.emulator.geelark._bodies import parse_body
from devicepool.emulator.geelark._envelope import GeeLarkError, answer, refusal
from devicepool.emulator.geelark.config import GeeLarkConfig
from devicepool.emulator.geelark.state import GeeLarkEmulator, StateFileError

__all__ = ["GeeLarkConfig", "GeeLarkEmulator", "StateFileError", "create_app"]

# Calls that change nothing but counters (the state file is not written after them).
READS = frozenset(
    f"open/v1/{path}"
    for path in ("phone/list", "phone/status", "adb/getData", "pay/wallet", "pay/plan/info")
)


def create_app(config: GeeLarkConfig | None = None) -> FastAPI:
    """The app of one emulated team (`app.state.emulator`). With `config.state_file`, the team
    is read from it (or starts empty) and written after every call; `app.state.emulator.close()`
    lets it go. Raises `StateFileError` if the file cannot be used."""
    emulator = GeeLarkEmulator(config or GeeLarkConfig())
    app = new_app("GeeLark Open API emulator")
    app.state.emulator = emulator
    _add_control_plane(app, emulator)
    _add_open_api(app, emulator)
    return app


def _add_control_plane(app: FastAPI, emulator: GeeLarkEmulator) -> None:
    def change(answer: Callable[[], Any]) -> Response:
        found = answer()
        emulator.commit()
        return JSONResponse(found)

    add_control_plane(app, emulator, change=change, secrets=emulator.secrets)

    @app.post("/_emulator/phones/{phone_id}/stop")
    async def provider_stop(phone_id: str) -> Response:
        return change(lambda: emulator.provider_stop(phone_id))

    @app.post("/_emulator/phones/{phone_id}/expire")
    async def expire(phone_id: str) -> Response:
        return change(lambda: emulator.expire(phone_id))

    @app.post("/_emulator/phones/{phone_id}/busy")
    async def busy(phone_id: str, request: Request) -> Response:
        body = await json_body(request)
        return change(lambda: emulator.set_busy(phone_id, body))

    @app.post("/_emulator/phones/{phone_id}/touch")
    async def touch(phone_id: str) -> Response:
        return change(lambda: emulator.touch(phone_id))


def _add_open_api(app: FastAPI, emulator: GeeLarkEmulator) -> None:
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    config = emulator.config

    @app.api_route("/{path:path}", methods=methods, include_in_schema=False)
    async def open_api(path: str, request: Request) -> Response:
        path = path.strip("/")
        trace_id = request.headers.get("traceid", "")
        if not emulator.knows(path):
            emulator.unknown_paths += 1
            return _refused(trace_id, _envelope.NOT_FOUND, f"no API {path!r}", status=404)
        if request.method != "POST":
            return _refused(
                trace_id, _envelope.UNKNOWN, "every Open API call is a POST", status=405
            )
        raw = await request.body()
        locks = emulator.windows.locks

        def keep() -> None:
            # The state file: after every call that changed the team or took a lock. A read
            # changes nothing a restart could not work out again from the clock.
            if path not in READS or emulator.windows.locks != locks:
                emulator.commit()

        try:
            who = _envelope.authenticate(
                request.headers, app_id=config.app_id, api_key=config.api_key, token=config.token
            )
            emulator.windows.admit(who, path, emulator.now())
            emulator.windows.enter(who, config.max_concurrent_requests)
        except GeeLarkError as error:
            keep()
            return refusal(trace_id, error)
        try:
            faults = emulator.faults
            if faults.latency_ms:
                await asyncio.sleep(faults.latency_ms / 1000)
            refused = emulator.dice.call_refusal(faults)
            if refused is not None:
                raise GeeLarkError(refused)
            try:
                data, code = await emulator.call(path, parse_body(raw))
            finally:
                keep()
            response = answer(trace_id, data, code=code)
            hang = emulator.dice.hang(faults, path)
            if hang is not None:
                # The change is made (and kept); the answer is held past a client's timeout.
                await asyncio.sleep(hang)  # real seconds: a client's timeout is real
            return response
        except GeeLarkError as error:
            return refusal(trace_id, error)
        finally:
            emulator.windows.leave(who)


def _refused(trace_id: str, code: int, message: str, *, status: int) -> Response:
    """A refusal in the envelope, answered with HTTP `status` (a path or method we never serve)."""
    response = refusal(trace_id, GeeLarkError(code, message))
    response.status_code = status
    return response
