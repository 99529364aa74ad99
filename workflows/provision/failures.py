"""What a batch's creates retry, and what a failed create says: the provider's verdict
(`ErrorType`, or None when it never refused) and its one-line reason. Pure: no workflow
code, passed through the sandbox."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from devicepool.activities.errors import parse_resets_at, quota_name
from devicepool.api.errors import NON_RETRYABLE_ERROR_TYPES, ErrorType

# A create that fails with one of these will not succeed by trying again. A
# region outage is retryable in general, but for creates the pool handles it
# itself (durable back-off, region probes) instead of a retry loop per device.
CREATE_NON_RETRYABLE = [*NON_RETRYABLE_ERROR_TYPES, ErrorType.REGION_UNAVAILABLE.value]

CREATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=CREATE_NON_RETRYABLE,
)


# Failures that are not the provider refusing the device: throttling, a call that
# never got an answer, and devicepool's own configuration (the pool's reference
# check reports those).
_NOT_A_VERDICT = frozenset(
    {
        ErrorType.RATE_LIMITED,
        ErrorType.TIMEOUT,
        ErrorType.TRANSPORT,
        ErrorType.UNKNOWN_ACCOUNT,
        ErrorType.UNKNOWN_PROXY_POOL,
    }
)


def _application_cause(err: ActivityError) -> ApplicationError | None:
    cause: BaseException | None = err.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    return cause


def quota_refusal(err: ActivityError) -> tuple[str, datetime | None] | None:
    """The quota a failed create was refused for (its name, `QuotaExceeded` when the
    provider named none) and when it resets (None: no clock does); None if not a quota."""
    cause = _application_cause(err)
    if cause is None or cause.type != ErrorType.QUOTA_EXCEEDED.value:
        return None
    details = cause.details[0] if cause.details else None
    if not isinstance(details, dict):
        return "QuotaExceeded", None
    name = quota_name(details.get("quota")) or "QuotaExceeded"
    return name, parse_resets_at(details.get("resetsAt"))


def provider_verdict(err: ActivityError) -> ErrorType | None:
    """The provider's refusal behind a failed create, or None when it never refused.

    An activity timeout wraps the last attempt's failure (if any) as its cause;
    a create lost with a killed worker has none.
    """
    cause = _application_cause(err)
    if cause is None or cause.type is None:
        return None
    try:
        verdict = ErrorType(cause.type)
    except ValueError:
        return None
    return None if verdict in _NOT_A_VERDICT else verdict


def reason_of(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}" if cause.type else cause.message
    return str(cause or err)
