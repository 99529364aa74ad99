"""What a sweep window that ran out of time means (`finalizer.window_failure`), pure.

Each sweep runs `terminate_pool` under a schedule-to-close of
`teardown_blocked_after_seconds`; the shapes below are what the dev server
hands back when that window ends (checked against Server 1.32): retryable
failures end it early as the last failure itself, an attempt still running
at the deadline ends it as a SCHEDULE_TO_CLOSE timeout whose cause is the
failure before it, if any.
"""

from __future__ import annotations

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from devicepool.api.errors import ErrorType
from devicepool.workflows.pool.finalizer import condition_reason, window_failure
from tests.helpers.activity_errors import activity_error


def ran_out(cause: BaseException) -> ActivityError:
    return activity_error(
        cause, "terminate_pool", RetryState.TIMEOUT, message="Activity task timed out"
    )


def cut(last: BaseException | None) -> TimeoutError:
    timeout = TimeoutError(
        "Not enough time to schedule next retry before activity ScheduleToClose timeout",
        type=TimeoutType.SCHEDULE_TO_CLOSE,
        last_heartbeat_details=[],
    )
    timeout.__cause__ = last
    return timeout


def provider(error: ErrorType, message: str) -> ApplicationError:
    return ApplicationError(message, type=error.value)


def test_retryable_errors_that_outlast_the_window_are_a_block_named_by_their_type() -> None:
    shown = window_failure(ran_out(provider(ErrorType.SERVER_ERROR, "HTTP 500: internal")))
    assert shown == (ErrorType.SERVER_ERROR, "HTTP 500: internal")
    assert condition_reason(shown[0]) == "ServerError"
    # The same when the deadline caught a later attempt still running.
    late = ran_out(cut(provider(ErrorType.RATE_LIMITED, "HTTP 429")))
    assert window_failure(late) == (ErrorType.RATE_LIMITED, "HTTP 429")


def test_an_attempt_that_timed_out_is_a_block_named_timeout() -> None:
    heartbeat = TimeoutError(
        "activity Heartbeat timeout", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[]
    )
    kind, message = window_failure(ran_out(cut(heartbeat))) or (None, "")
    assert condition_reason(kind) == "Timeout"
    assert "Heartbeat timeout" in message


def test_devices_on_their_way_out_or_a_sweep_still_working_are_no_block() -> None:
    pending = provider(ErrorType.TEARDOWN_PENDING, "2 device(s) not yet terminated")
    assert window_failure(ran_out(pending)) is None
    assert window_failure(ran_out(cut(pending))) is None
    # A large pool's first attempt, still deleting at the deadline, nothing failed.
    assert window_failure(ran_out(cut(None))) is None
