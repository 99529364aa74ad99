"""The one error vocabulary shared by the provider clients, activities and workflows.

Provider errors (the contract's problem+json `code`) and devicepool's own configuration errors
each have one name here: the `type` of the `ApplicationError`s activities raise, what workflows
match on and metrics label by. Never spell one as a string literal elsewhere."""

from __future__ import annotations

from enum import StrEnum


class ErrorType(StrEnum):
    # provider contract
    INVALID_ARGUMENT = "invalid_argument"  # 400
    UNAUTHENTICATED = "unauthenticated"  # 401
    QUOTA_EXCEEDED = "quota_exceeded"  # 402
    NOT_FOUND = "not_found"  # 404
    INVALID_STATE = "invalid_state"  # 409
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"  # 422
    RATE_LIMITED = "rate_limited"  # 429
    REGION_UNAVAILABLE = "region_unavailable"  # 503 with that code
    SERVER_ERROR = "server_error"  # other 5xx
    TIMEOUT = "timeout"  # transport timeout
    TRANSPORT = "transport"  # connection refused, reset, ...
    # devicepool's own
    UNKNOWN_ACCOUNT = "unknown_account"
    UNKNOWN_PROXY_POOL = "unknown_proxy_pool"
    # `terminate_pool` ran but devices are still on their way out: try again.
    TEARDOWN_PENDING = "teardown_pending"

    @property
    def retryable(self) -> bool:
        return self in _RETRYABLE


_RETRYABLE = frozenset(
    {
        ErrorType.RATE_LIMITED,
        ErrorType.REGION_UNAVAILABLE,
        ErrorType.SERVER_ERROR,
        ErrorType.TIMEOUT,
        ErrorType.TRANSPORT,
        ErrorType.TEARDOWN_PENDING,
    }
)

NON_RETRYABLE_ERROR_TYPES: list[str] = [t.value for t in ErrorType if not t.retryable]
