"""`devicepool codec-server`: the Temporal codec protocol over HTTP, for the Web UI and the CLI.

`POST /decode` and `/encode` take and answer ``{"payloads": [...]}`` (the JSON form of
``Payloads``); CORS answers the `--cors-origin` origins only, with the Private Network Access
answer a hosted (https) UI's browser asks for; `GET /healthz` says it serves. Whoever reaches
`/decode` reads the history: docs/operations.md, 'Encrypted history'."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from devicepool.codec import DecryptionError

# What the UI sends: the JSON body, its namespace, and a bearer token when the
# UI is set to pass the user's access token on.
ALLOWED_HEADERS = ["content-type", "x-namespace", "authorization"]

Transform = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


def create_app(codec: PayloadCodec, *, cors_origins: Sequence[str]) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    options: dict[str, Any] = {}
    if "allow_private_network" in inspect.signature(CORSMiddleware.__init__).parameters:
        # Private Network Access (Starlette >= 1.0; an older one does not know the header,
        # and Chrome then refuses a hosted UI's calls to a codec server on localhost).
        options["allow_private_network"] = True
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(cors_origins),
        allow_methods=["POST"],
        allow_headers=ALLOWED_HEADERS,
        allow_credentials=True,
        max_age=600,
        **options,
    )

    @app.post("/encode")
    async def encode(request: Request) -> Response:
        return await _apply(codec.encode, request)

    @app.post("/decode")
    async def decode(request: Request) -> Response:
        return await _apply(codec.decode, request)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _apply(transform: Transform, request: Request) -> Response:
    try:
        payloads = json_format.Parse(await request.body(), Payloads())
    except (json_format.ParseError, UnicodeDecodeError):
        return _problem(400, 'the body must be {"payloads": [...]}, the JSON form of Payloads')
    try:
        answer = Payloads(payloads=await transform(list(payloads.payloads)))
    except DecryptionError as err:
        # Names key ids only; the UI then shows the payload still encrypted.
        return _problem(422, str(err))
    return Response(json_format.MessageToJson(answer), media_type="application/json")


def _problem(status: int, detail: str) -> Response:
    import json

    return Response(
        json.dumps({"title": "cannot convert the payloads", "detail": detail}),
        status_code=status,
        media_type="application/problem+json",
    )
