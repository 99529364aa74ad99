"""The HTTP side every emulator shares: its FastAPI app, problem answers, and the control plane's
common routes (`/_emulator/stats`, `secrets`, `faults`, `clock`, `reset`).

An emulator brings its provider object (`Provider`: what each route asks) and how a call on it
is held (`read` / `change`: e.g. a transaction on a state file); the answers' shapes are its
own. This module imports no vendor package.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from devicepool.emulator._problems import ProblemError, invalid, problem_response

Held = Callable[[Callable[[], Any]], Response]
BodyOf = Callable[[Request], Awaitable[Any]]


class Faults(Protocol):
    def to_json(self) -> Any: ...


class Provider(Protocol):
    """What the common control-plane routes ask of an emulator's provider object."""

    @property
    def faults(self) -> Faults: ...

    def set_faults(self, body: Any) -> Any: ...
    def clock_json(self) -> Any: ...
    def set_clock(self, body: Any) -> Any: ...
    def stats(self) -> Any: ...
    def reset(self) -> None: ...


def new_app(title: str, *, close: Callable[[], None] | None = None) -> FastAPI:
    """An emulator's app: its docs under `/_emulator/`, a `ProblemError` answered as a problem;
    `close` runs when the app's lifespan ends."""
    lifespan = None
    if close is not None:

        @contextlib.asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            try:
                yield
            finally:
                close()

    app = FastAPI(
        title=title,
        docs_url="/_emulator/docs",
        redoc_url=None,
        openapi_url="/_emulator/openapi.json",
        lifespan=lifespan,
    )

    async def on_problem(_: Request, error: Exception) -> Response:
        assert isinstance(error, ProblemError)
        return problem_response(error)

    app.add_exception_handler(ProblemError, on_problem)
    return app


async def json_body(request: Request) -> Any:
    """A control-plane body: JSON, or `{}` when empty."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return await request.json()
    except ValueError:
        raise invalid("request body is not valid JSON") from None


def plain(answer: Callable[[], Any]) -> Response:
    return JSONResponse(answer())


def add_control_plane(
    app: FastAPI,
    emulator: Provider,
    *,
    read: Held = plain,
    change: Held = plain,
    body_of: BodyOf = json_body,
    secrets: Callable[[], list[str]] | None = None,
) -> None:
    """The common `/_emulator/` routes. `read` / `change` hold a call that reads / changes the
    provider; the faults are this process's, never held. `secrets`: serve `/_emulator/secrets`."""

    @app.get("/_emulator/stats")
    async def stats() -> Response:
        return read(emulator.stats)

    if secrets is not None:
        live = secrets

        @app.get("/_emulator/secrets")
        async def get_secrets() -> Response:
            """The secrets answers would carry now: for tests that look for leaks. Never logged."""
            return read(lambda: {"secrets": live()})

    @app.get("/_emulator/faults")
    async def get_faults() -> Response:
        return JSONResponse(emulator.faults.to_json())

    @app.post("/_emulator/faults")
    async def set_faults(request: Request) -> Response:
        return JSONResponse(emulator.set_faults(await body_of(request)))

    @app.get("/_emulator/clock")
    async def get_clock() -> Response:
        return read(emulator.clock_json)

    @app.post("/_emulator/clock")
    async def set_clock(request: Request) -> Response:
        body = await body_of(request)
        return change(lambda: emulator.set_clock(body))

    @app.post("/_emulator/reset")
    async def reset() -> Response:
        def reset_and_stats() -> Any:
            emulator.reset()
            return emulator.stats()

        return change(reset_and_stats)
