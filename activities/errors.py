"""Typed provider errors, and their one translation into Temporal failures.

Every failed provider call is a `ProviderError`; the subclass says what happened
and `error_type` names it in the shared vocabulary (`api.errors.ErrorType`)::

    ProviderError                       error_type               HTTP   retryable
    ├── InvalidArgumentError            INVALID_ARGUMENT         400    no
    ├── UnauthenticatedError            UNAUTHENTICATED          401    no
    ├── QuotaExceededError              QUOTA_EXCEEDED           402    no
    ├── NotFoundError                   NOT_FOUND                404    no
    ├── InvalidStateError               INVALID_STATE            409    no
    ├── IdempotencyKeyReusedError       IDEMPOTENCY_KEY_REUSED   422    no
    ├── RateLimitedError                RATE_LIMITED             429    yes, after `retry_after`
    ├── ServerError                     SERVER_ERROR             5xx    yes
    │   └── RegionUnavailableError      REGION_UNAVAILABLE       503    yes
    └── TransportError                  TRANSPORT                -      yes
        └── TransportTimeoutError       TIMEOUT                  -      yes

`error_from_response` picks the subclass from the problem+json `code`, else the
HTTP status. `to_application_error` is the only way into a Temporal
`ApplicationError` (`type` is the `ErrorType` value; a 429 is BENIGN, its
`next_retry_delay` from `Retry-After`, at most `MAX_RETRY_AFTER_SECONDS`; a quota
refusal's details add `quota`, the quota's name, and `resetsAt`, when it resets, each None
when the provider said none). No message built here holds the API key: the client never
hands it over, and scrubs it out of anything the provider echoes back.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from devicepool.activities.models import MAX_RETRY_AFTER_SECONDS, bounded_retry_after
from devicepool.api.errors import ErrorType

__all__ = [
    "MAX_RETRY_AFTER_SECONDS",
    "TEARDOWN_PENDING",
    "IdempotencyKeyReusedError",
    "InvalidArgumentError",
    "InvalidStateError",
    "NotFoundError",
    "ProviderError",
    "QuotaExceededError",
    "RateLimitedError",
    "RegionUnavailableError",
    "ServerError",
    "TransportError",
    "TransportTimeoutError",
    "UnauthenticatedError",
    "configuration_error",
    "error_from_response",
    "parse_resets_at",
    "quota_name",
    "to_application_error",
]


class ProviderError(Exception):
    """A provider call failed. `status` is the HTTP status (None for transport errors)."""

    default_error_type: ClassVar[ErrorType] = ErrorType.SERVER_ERROR

    def __init__(
        self,
        error_type: ErrorType,
        status: int | None,
        detail: str,
        retry_after: float | None = None,
    ) -> None:
        self.error_type = error_type
        self.status = status
        self.detail = detail
        self.retry_after = retry_after
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no response"
        text = f"{self.error_type.value} ({where}): {self.detail}"
        if self.retry_after is not None:
            text += f" (retry after {self.retry_after:g}s)"
        return text

    @property
    def retryable(self) -> bool:
        return self.error_type.retryable

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(error_type={self.error_type.value!r}, "
            f"status={self.status!r}, detail={self.detail!r}, retry_after={self.retry_after!r})"
        )


class InvalidArgumentError(ProviderError):
    default_error_type = ErrorType.INVALID_ARGUMENT


class UnauthenticatedError(ProviderError):
    default_error_type = ErrorType.UNAUTHENTICATED


class QuotaExceededError(ProviderError):
    """A quota is used up. `quota`: its name (`DailyCreateQuota`, `ProfileCap`, ...);
    `resets_at`: when a clock resets it (a daily quota); None for either when not known."""

    default_error_type = ErrorType.QUOTA_EXCEEDED
    quota: str | None = None
    resets_at: datetime | None = None


class NotFoundError(ProviderError):
    default_error_type = ErrorType.NOT_FOUND


class InvalidStateError(ProviderError):
    default_error_type = ErrorType.INVALID_STATE


class IdempotencyKeyReusedError(ProviderError):
    """The same `Idempotency-Key` came with another body (HTTP 422)."""

    default_error_type = ErrorType.IDEMPOTENCY_KEY_REUSED


class RateLimitedError(ProviderError):
    """HTTP 429; `retry_after` carries the provider's `Retry-After` in seconds."""

    default_error_type = ErrorType.RATE_LIMITED


class ServerError(ProviderError):
    default_error_type = ErrorType.SERVER_ERROR


class RegionUnavailableError(ServerError):
    default_error_type = ErrorType.REGION_UNAVAILABLE


class TransportError(ProviderError):
    """No HTTP answer at all (connection refused, reset, protocol error)."""

    default_error_type = ErrorType.TRANSPORT


class TransportTimeoutError(TransportError):
    default_error_type = ErrorType.TIMEOUT


_CLASS_BY_TYPE: dict[ErrorType, type[ProviderError]] = {
    cls.default_error_type: cls
    for cls in (
        InvalidArgumentError,
        UnauthenticatedError,
        QuotaExceededError,
        NotFoundError,
        InvalidStateError,
        IdempotencyKeyReusedError,
        RateLimitedError,
        ServerError,
        RegionUnavailableError,
        TransportError,
        TransportTimeoutError,
    )
}

# The `code`s the provider contract defines (all but the transport's own), and what a
# bare status means without one.
_PROVIDER_CODES = frozenset(_CLASS_BY_TYPE) - {ErrorType.TRANSPORT, ErrorType.TIMEOUT}
_TYPE_BY_STATUS: dict[int, ErrorType] = {
    400: ErrorType.INVALID_ARGUMENT,
    401: ErrorType.UNAUTHENTICATED,
    402: ErrorType.QUOTA_EXCEEDED,
    403: ErrorType.UNAUTHENTICATED,
    404: ErrorType.NOT_FOUND,
    409: ErrorType.INVALID_STATE,
    422: ErrorType.IDEMPOTENCY_KEY_REUSED,
    429: ErrorType.RATE_LIMITED,
}


def _type_for(status: int, code: Any) -> ErrorType:
    if isinstance(code, str) and code in _PROVIDER_CODES:
        from_code = ErrorType(code)
        # A code that contradicts the status class (e.g. `not_found` on a 500) is
        # not trusted: retryability must follow what the server actually said.
        if (status >= 500) == (from_code in (ErrorType.REGION_UNAVAILABLE, ErrorType.SERVER_ERROR)):
            return from_code
    if status >= 500:
        return ErrorType.SERVER_ERROR
    return _TYPE_BY_STATUS.get(status, ErrorType.INVALID_ARGUMENT)


def error_from_response(
    status: int, body: Any, *, retry_after: float | None = None
) -> ProviderError:
    """Build the typed error for a non-2xx answer (`body`: the decoded problem+json, or text)."""
    code: Any = None
    detail = ""
    if isinstance(body, dict):
        code = body.get("code")
        detail = str(body.get("detail") or body.get("title") or "")
    elif isinstance(body, str):
        detail = body.strip()[:500]
    error_type = _type_for(status, code)
    if not detail:
        detail = f"HTTP {status}"
    error = _CLASS_BY_TYPE.get(error_type, ProviderError)(error_type, status, detail, retry_after)
    if isinstance(error, QuotaExceededError) and isinstance(body, dict):
        # Problem+json extension members a provider may add to a 402.
        error.quota = quota_name(body.get("quota"))
        error.resets_at = parse_resets_at(body.get("resetsAt"))
    return error


_QUOTA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,39}")


def quota_name(value: Any) -> str | None:
    """A quota's name as a condition reason takes it (CamelCase, at most 40), else None."""
    return value if isinstance(value, str) and _QUOTA_NAME.fullmatch(value) else None


def parse_resets_at(value: Any) -> datetime | None:
    """An ISO 8601 instant with its offset (`...Z`), in UTC; None for anything else."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.astimezone(UTC) if when.tzinfo is not None else None


def _iso(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def to_application_error(exc: ProviderError) -> ApplicationError:
    """The Temporal failure for a provider error (the house's retry rules live here)."""
    error_type = exc.error_type
    # Bounded again here: whoever built `exc`, the delay must fit a timedelta and the cap.
    retry_after = bounded_retry_after(exc.retry_after)
    # A 429 is expected under load and handled by the retry, after its delay: not worth an
    # error log or metric.
    rate_limited = error_type is ErrorType.RATE_LIMITED
    delay = timedelta(seconds=retry_after) if rate_limited and retry_after is not None else None
    details: dict[str, Any] = {"status": exc.status, "retryAfter": retry_after}
    if isinstance(exc, QuotaExceededError):
        details["quota"] = quota_name(exc.quota)
        details["resetsAt"] = _iso(exc.resets_at)
    return ApplicationError(
        str(exc),
        details,
        type=error_type.value,
        non_retryable=not error_type.retryable,
        next_retry_delay=delay,
        category=ApplicationErrorCategory.BENIGN
        if rate_limited
        else ApplicationErrorCategory.UNSPECIFIED,
    )


def configuration_error(error_type: ErrorType, message: str) -> ApplicationError:
    """A worker-side configuration problem (unknown account / proxy pool): never retried."""
    return ApplicationError(message, type=error_type.value, non_retryable=True)


# `terminate_pool` raises this (retryable) while devices are still on their way out,
# so the activity's retry policy keeps the finalizer going.
TEARDOWN_PENDING = ErrorType.TEARDOWN_PENDING
