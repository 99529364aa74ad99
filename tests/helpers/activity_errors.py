"""The `ActivityError` a workflow sees when an activity fails, made in a test.

Only what the code under test reads is a parameter (the activity's type, the retry
state, the message); the event ids and identity are placeholders nothing reads.
"""

from __future__ import annotations

from temporalio.exceptions import ActivityError, RetryState


def activity_error(
    cause: BaseException,
    activity_type: str,
    retry_state: RetryState | None,
    message: str = "activity failed",
) -> ActivityError:
    """An `ActivityError` for `activity_type` ending with `retry_state`, caused by `cause`."""
    err = ActivityError(
        message,
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type=activity_type,
        activity_id="7",
        retry_state=retry_state,
    )
    err.__cause__ = cause
    return err
