"""The provider's error vocabulary, rendered as RFC 9457 `application/problem+json`.

Every error the emulator answers is a `ProblemError` carrying an HTTP status
and a stable `code`:

    400 invalid_argument        401 unauthenticated       402 quota_exceeded
    404 not_found               405 method_not_allowed    409 invalid_state
    422 idempotency_key_reused  429 rate_limited          500 server_error
    503 region_unavailable
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://bitcloudphone.example/problems/"

INVALID_ARGUMENT = "invalid_argument"
UNAUTHENTICATED = "unauthenticated"
QUOTA_EXCEEDED = "quota_exceeded"
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
INVALID_STATE = "invalid_state"
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
REGION_UNAVAILABLE = "region_unavailable"

_TITLES = {
    INVALID_ARGUMENT: "Invalid argument",
    UNAUTHENTICATED: "Unauthenticated",
    QUOTA_EXCEEDED: "Quota exceeded",
    NOT_FOUND: "Not found",
    METHOD_NOT_ALLOWED: "Method not allowed",
    INVALID_STATE: "Invalid state",
    IDEMPOTENCY_KEY_REUSED: "Idempotency key reused",
    RATE_LIMITED: "Rate limited",
    SERVER_ERROR: "Internal server error",
    REGION_UNAVAILABLE: "Region unavailable",
}

_CODE_BY_STATUS = {
    400: INVALID_ARGUMENT,
    401: UNAUTHENTICATED,
    402: QUOTA_EXCEEDED,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    409: INVALID_STATE,
    422: IDEMPOTENCY_KEY_REUSED,
    429: RATE_LIMITED,
    500: SERVER_ERROR,
    503: REGION_UNAVAILABLE,
}


class ProblemError(Exception):
    """An error answer: raised anywhere in the emulator, rendered by the app."""

    def __init__(
        self, status: int, code: str, detail: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}


def invalid(detail: str) -> ProblemError:
    return ProblemError(400, INVALID_ARGUMENT, detail)


def code_for_status(status: int) -> str:
    return _CODE_BY_STATUS.get(status, SERVER_ERROR if status >= 500 else INVALID_ARGUMENT)


def problem_body(status: int, code: str, detail: str) -> dict[str, Any]:
    return {
        "type": PROBLEM_TYPE_BASE + code,
        "title": _TITLES.get(code, code.replace("_", " ").capitalize()),
        "status": status,
        "detail": detail,
        "code": code,
    }


def problem_response(error: ProblemError) -> JSONResponse:
    return JSONResponse(
        problem_body(error.status, error.code, error.detail),
        status_code=error.status,
        headers=error.headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )
