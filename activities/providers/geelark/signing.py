"""How every GeeLark request proves who sends it: key mode (signed headers) or token mode.

Key mode (the vendor's "Request instructions"): headers `appId`, `traceId` (a UUIDv4), `ts`
(milliseconds), `nonce` (the traceId's first 6 characters) and `sign`, the upper-case hex
SHA-256 of `appId + traceId + ts + nonce + apiKey`. Token mode: `traceId` and
`Authorization: Bearer <token>`. Both are `httpx.Auth`, applied per request, so the secret
never sits in a client's default headers, a repr, or an error.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Generator

import httpx
from pydantic import SecretStr

from devicepool.activities.secrets import REDACTED

__all__ = ["KeyAuth", "TokenAuth", "geelark_auth", "sign"]


def sign(*, app_id: str, trace_id: str, ts: str, nonce: str, api_key: str) -> str:
    """The `sign` header of key mode."""
    text = f"{app_id}{trace_id}{ts}{nonce}{api_key}"
    return hashlib.sha256(text.encode()).hexdigest().upper()


def _new_trace() -> str:
    return str(uuid.uuid4())


def _now_ms() -> int:
    return int(time.time() * 1000)


class KeyAuth(httpx.Auth):
    """Key mode: a fresh traceId, ts and nonce, and their signature, on every request."""

    def __init__(
        self,
        app_id: str,
        api_key: SecretStr,
        *,
        new_trace: Callable[[], str] = _new_trace,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.app_id = app_id
        self._key = api_key
        self._new_trace = new_trace
        self._now_ms = now_ms

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        trace_id = self._new_trace()
        ts = str(self._now_ms())
        nonce = trace_id[:6]
        request.headers["appId"] = self.app_id
        request.headers["traceId"] = trace_id
        request.headers["ts"] = ts
        request.headers["nonce"] = nonce
        request.headers["sign"] = sign(
            app_id=self.app_id,
            trace_id=trace_id,
            ts=ts,
            nonce=nonce,
            api_key=self._key.get_secret_value(),
        )
        yield request

    def __repr__(self) -> str:
        return f"KeyAuth(app_id={self.app_id!r}, api_key=SecretStr({REDACTED!r}))"


class TokenAuth(httpx.Auth):
    """Token mode: the client app's token as a bearer, and a fresh traceId."""

    def __init__(self, token: SecretStr, *, new_trace: Callable[[], str] = _new_trace) -> None:
        self._token = token
        self._new_trace = new_trace

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["traceId"] = self._new_trace()
        request.headers["Authorization"] = f"Bearer {self._token.get_secret_value()}"
        yield request

    def __repr__(self) -> str:
        return f"TokenAuth(token=SecretStr({REDACTED!r}))"


def geelark_auth(app_id: str, secret: SecretStr) -> httpx.Auth:
    """Key mode when the account names its `appId` (the secret is its API key), else token
    mode (the secret is the token)."""
    return KeyAuth(app_id, secret) if app_id else TokenAuth(secret)
