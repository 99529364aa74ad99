"""What workflow code makes of a failure: an activity failure's type and message, the retry
policy of provider calls, a wait that timed out, a signal to a workflow that has ended, a
task never awaited, and a cancellation an awaited activity absorbed (why:
docs/architecture.md, 'Notes for developers').
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

# Every provider read and write that must eventually succeed: no attempt limit (a call's
# `schedule_to_close_timeout` bounds it). Creates have their own, in `provision/workflow.py`.
PROVIDER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)


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


def raise_if_cancelled() -> None:
    """Raise `CancelledError` if the server asked this workflow to cancel."""
    reason = workflow.cancellation_reason()
    if reason is not None:
        raise asyncio.CancelledError(reason or "workflow cancelled")


async def wait_condition(
    condition: Callable[[], bool], *, timeout: timedelta | None, summary: str
) -> bool:
    """`workflow.wait_condition` (the same timer), False where it timed out."""
    try:
        await workflow.wait_condition(condition, timeout=timeout, timeout_summary=summary)
    except TimeoutError:
        return False
    return True


async def tell(workflow_id: str, signal: str, arg: Any, *, warn: bool = False) -> bool:
    """Signal `workflow_id`; False (logged) if it could not be told (it has ended, most
    often: nobody to tell). `warn`: its missing the news is worth a warning."""
    try:
        await workflow.get_external_workflow_handle(workflow_id).signal(signal, arg)
    except FailureError as err:
        log = workflow.logger.warning if warn else workflow.logger.info
        log("%s not told %s: %s", workflow_id, signal, err)
        return False
    return True


def forget(task: asyncio.Future[Any], *, cancel: bool = False) -> None:
    """Never await `task` (an abandoned child reports by signal; a watch whose answer no
    longer matters is `cancel`led), yet retrieve its outcome: nothing logs "never retrieved"."""
    if cancel and not task.done():
        task.cancel()
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
