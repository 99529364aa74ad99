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

from devicepool.emulator._problems import ProblemError, invalid, problem_response
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
    app = FastAPI(
        title="GeeLark Open API emulator",
        docs_url="/_emulator/docs",
        redoc_url=None,
        openapi_url="/_emulator/openapi.json",
    )
    app.state.emulator = emulator

    async def on_problem(_: Request, error: Exception) -> Response:
        assert isinstance(error, ProblemError)
        return problem_response(error)

    app.add_exception_handler(ProblemError, on_problem)
    _add_control_plane(app, emulator)
    _add_open_api(app, emulator)
    return app


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return await request.json()
    except ValueError:
        raise invalid("request body is not valid JSON") from None


def _add_control_plane(app: FastAPI, emulator: GeeLarkEmulator) -> None:
    def json(answer: Callable[[], Any]) -> Response:
        return JSONResponse(answer())

    def change(answer: Callable[[], Any]) -> Response:
        found = answer()
        emulator.commit()
        return JSONResponse(found)

    @app.get("/_emulator/stats")
    async def stats() -> Response:
        return json(emulator.stats)

    @app.get("/_emulator/secrets")
    async def secrets() -> Response:
        """The secrets answers carry now: for tests that look for leaks. Never logged."""
        return json(lambda: {"secrets": emulator.secrets()})

    @app.get("/_emulator/faults")
    async def get_faults() -> Response:
        return json(emulator.faults.to_json)

    @app.post("/_emulator/faults")
    async def set_faults(request: Request) -> Response:
        body = await _json_body(request)
        return json(lambda: emulator.set_faults(body))

    @app.get("/_emulator/clock")
    async def get_clock() -> Response:
        return json(emulator.clock_json)

    @app.post("/_emulator/clock")
    async def set_clock(request: Request) -> Response:
        body = await _json_body(request)
        return change(lambda: emulator.set_clock(body))

    @app.post("/_emulator/reset")
    async def reset() -> Response:
        emulator.reset()
        return change(emulator.stats)

    @app.post("/_emulator/phones/{phone_id}/stop")
    async def provider_stop(phone_id: str) -> Response:
        return change(lambda: emulator.provider_stop(phone_id))

    @app.post("/_emulator/phones/{phone_id}/expire")
    async def expire(phone_id: str) -> Response:
        return change(lambda: emulator.expire(phone_id))

    @app.post("/_emulator/phones/{phone_id}/busy")
    async def busy(phone_id: str, request: Request) -> Response:
        body = await _json_body(request)
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
            response = refusal(trace_id, GeeLarkError(_envelope.NOT_FOUND, f"no API {path!r}"))
            response.status_code = 404
            return response
        if request.method != "POST":
            response = refusal(
                trace_id, GeeLarkError(_envelope.UNKNOWN, "every Open API call is a POST")
            )
            response.status_code = 405
            return response
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
