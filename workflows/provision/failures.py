"""What a batch's creates retry, and what a failed create says: the provider's verdict
(`ErrorType`, or None when it never refused), its one-line reason, and how the batch's own
cancel ended it (not sent, or cut short). Pure: no workflow code, passed through the
sandbox."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from devicepool.activities.errors import parse_resets_at, quota_name
from devicepool.api.errors import NON_RETRYABLE_ERROR_TYPES, ErrorType

if TYPE_CHECKING:
    from temporalio.workflow import ActivityHandle

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


# How a create ended, for the ledger (`_run_grant`) and the report (`_create_one`).
CREATED = "created"
FAILED_CREATE = "failed"
# The batch's cancel stopped it during an attempt: it may have reached the provider,
# which did not refuse it (spent, not failed).
CUT_SHORT = "cut short"
# The batch's cancel stopped it with no attempt under way (queued for a worker, or
# waiting to retry): it sends nothing more (the permit goes back unused).
NOT_SENT = "not sent"


def stopped_by_the_cancel(
    err: ActivityError,
    create: ActivityHandle[Any] | None,
    stopped: list[ActivityHandle[Any]],
) -> str | None:
    """How the batch's cancel (`_await_started_creates`) ended a create: `NOT_SENT` when no
    attempt was under way, `CUT_SHORT` when one was; None if something else ended it.

    A server records an attempt's start only once it ends (with a retry policy), so the
    error names a started event only when an attempt ran into the cancel. Cancelled with
    none running, the activity was queued for a worker or waiting to retry: neither sends
    anything more. (The time-skipping test server names none, -1: always `NOT_SENT`.)"""
    if create is None or not isinstance(err.cause, CancelledError):
        return None
    if not any(create is handle for handle in stopped):
        return None
    return CUT_SHORT if err.started_event_id > 0 else NOT_SENT
