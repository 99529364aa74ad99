"""Reading an activity failure in workflow code: its error type and its message."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError


def error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def error_message(err: ActivityError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(err)
