"""Reading an activity failure in workflow code: its error type and its message."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError


def error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def error_message(err: ActivityError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(err)


def condition_reason(error: str | None) -> str:
    """An error type as a condition reason: `unknown_account` → `UnknownAccount`."""
    return "".join(part.title() for part in (error or "provider_error").split("_"))


def problem(err: ActivityError) -> str:
    """`Reason: message` of an activity failure, as conditions and events say it."""
    return f"{condition_reason(error_type(err))}: {error_message(err)}"
