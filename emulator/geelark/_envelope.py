"""The Open API's envelope, its codes, and the two ways a call authenticates.

Every answer is HTTP 200 `{"traceId", "code", "msg", "data"}`, `code` 0 on success; a refusal
carries a code of the vendor's error table and `data: null` (the docs show no `data` on a
refusal; we send null so the four keys are always there). The traceId is the request's,
echoed. `GeeLarkError` is a refusal raised anywhere and rendered by the app.

Auth (documented): token mode, `Authorization: Bearer <token>` with a `traceId` header; or key
mode, headers `appId`, `traceId`, `ts` (ms), `nonce` and `sign`, the uppercase hex SHA-256 of
appId + traceId + ts + nonce + apiKey. Where the docs are silent we chose: a wrong token, a
wrong sign, or a nonce that is not the traceId's first six characters answer 40003; an appId
we do not know answers 40013 (user not found); `ts` is not checked for freshness.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

# ------------------------------------------------------------------ the codes (vendor table)

OK = 0
UNKNOWN = 40000
BAD_BODY = 40001
TRACE_ID_EMPTY = 40002
SIGNATURE = 40003
INVALID = 40004
NOT_FOUND = 40005
PARTIAL = 40006
RATE_LIMITED = 40007
PAGE_SIZE = 40008
ALL_FAILED = 40009
HOURLY_LOCK = 40014
NO_USER = 40013
BALANCE = 41001
PHONE_NOT_FOUND = 42001
NOT_RUNNING = 42002
EXPIRED = 43004
TASK_RUNNING = 43005
REMOTE_CONTROL = 43006
OPEN_QUOTA = 43008
ALREADY_STARTED = 43009
STARTING = 43010
IN_USE = 43021
TAG_NOT_FOUND = 43022
BATCH_NEEDS_PRO = 44001
PROFILE_CAP = 44002
CREATE_QUOTA = 44004
PROXY_UNAVAILABLE = 45002
DEVICE_CONCURRENCY = 47001
CONCURRENCY = 47002
ADB_NOT_ENABLED = 49001
SERVER = 50000

MESSAGES = {
    OK: "success",
    UNKNOWN: "unknown error",
    BAD_BODY: "failed to read the request body",
    TRACE_ID_EMPTY: "traceId is empty",
    SIGNATURE: "signature verification failed",
    INVALID: "parameter validation failed",
    NOT_FOUND: "resource not found",
    PARTIAL: "partial success",
    RATE_LIMITED: "request rate limited, lifted in the next minute",
    PAGE_SIZE: "pageSize out of range",
    ALL_FAILED: "batch operation failed",
    HOURLY_LOCK: "hourly request limit exceeded, locked for two hours",
    NO_USER: "user not found",
    BALANCE: "balance not enough",
    PHONE_NOT_FOUND: "env not found",
    NOT_RUNNING: "env is not running",
    EXPIRED: "env is expired",
    TASK_RUNNING: "env is executing a task",
    REMOTE_CONTROL: "env is under remote control",
    OPEN_QUOTA: "daily open limit reached",
    ALREADY_STARTED: "env is started, stop it before deleting",
    STARTING: "env is starting, stop it before deleting",
    IN_USE: "env is in use",
    TAG_NOT_FOUND: "tag not found",
    BATCH_NEEDS_PRO: "batch creation is not allowed, please upgrade to the Pro plan",
    PROFILE_CAP: "cloud phone creation limit reached for the plan",
    CREATE_QUOTA: "maximum daily cloud phone creation limit reached",
    PROXY_UNAVAILABLE: "cloud phone proxy is unavailable",
    DEVICE_CONCURRENCY: "device concurrency limit reached",
    CONCURRENCY: "too many concurrent requests",
    ADB_NOT_ENABLED: "ADB is not enabled",
    SERVER: "internal server error",
}


class GeeLarkError(Exception):
    """A refusal in the envelope: `{"code": code, "msg": msg, "data": null}`, HTTP 200."""

    def __init__(self, code: int, msg: str | None = None) -> None:
        self.code = code
        self.msg = msg or MESSAGES.get(code, "error")
        super().__init__(f"{code} {self.msg}")


def invalid(why: str) -> GeeLarkError:
    return GeeLarkError(INVALID, f"parameter validation failed: {why}")


def answer(
    trace_id: str, data: Any = None, *, code: int = OK, msg: str | None = None
) -> JSONResponse:
    body = {"traceId": trace_id, "code": code, "msg": msg or MESSAGES.get(code, ""), "data": data}
    return JSONResponse(body)


def refusal(trace_id: str, error: GeeLarkError) -> JSONResponse:
    return answer(trace_id, None, code=error.code, msg=error.msg)


# ------------------------------------------------------------------ auth


def sign(app_id: str, trace_id: str, ts: str, nonce: str, api_key: str) -> str:
    """The documented signature: uppercase hex SHA-256 of appId+traceId+ts+nonce+apiKey."""
    return hashlib.sha256((app_id + trace_id + ts + nonce + api_key).encode()).hexdigest().upper()


def authenticate(
    headers: Mapping[str, str], *, app_id: str | None, api_key: str | None, token: str | None
) -> str:
    """Who is calling: the identity limits are counted under (`token`, or `key:<appId>`: each
    credential has its own windows and lock, our choice), or a GeeLarkError.

    The traceId is checked first (40002), then the mode the headers choose: a Bearer token,
    else the key headers."""
    trace_id = headers.get("traceid", "")
    if not trace_id:
        raise GeeLarkError(TRACE_ID_EMPTY)
    authorization = headers.get("authorization", "")
    if authorization:
        scheme, _, given = authorization.partition(" ")
        if token is None or scheme.lower() != "bearer":
            raise GeeLarkError(SIGNATURE)
        if not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise GeeLarkError(SIGNATURE)
        return "token"
    caller = headers.get("appid", "")
    if app_id is None or api_key is None or not caller:
        raise GeeLarkError(SIGNATURE)
    if caller != app_id:
        raise GeeLarkError(NO_USER)
    ts, nonce, given_sign = headers.get("ts", ""), headers.get("nonce", ""), headers.get("sign", "")
    if not ts or nonce != trace_id[:6]:
        raise GeeLarkError(SIGNATURE)
    expected = sign(app_id, trace_id, ts, nonce, api_key)
    # Our choice: the sign is compared as the docs write it, uppercase (a lowercase one fails).
    if not hmac.compare_digest(given_sign.encode(), expected.encode()):
        raise GeeLarkError(SIGNATURE)
    return f"key:{app_id}"
