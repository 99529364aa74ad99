"""What workflow code makes of a failure: an activity failure's type and message, the retry
policy of provider calls, a wait that timed out, a signal to a workflow that has ended, a
task never awaited, a cancellation an awaited activity absorbed (why: docs/architecture.md,
'Notes for developers'), and a signal a cancel must not reach once it failed.
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


async def signal_past_a_cancel(
    handle: workflow.ExternalWorkflowHandle[Any], signal: str, arg: Any
) -> None:
    """`handle.signal`, as the SDK awaits it (a cancel of the workflow meanwhile is taken
    after it: `raise_if_cancelled`), but for a cancel that comes in the workflow task that
    resolves it. The SDK then asks Core to cancel the signal it has just resolved, and for
    one that failed (no such workflow: an account without a ledger) Core refuses:
    "Nondeterminism error: Invalid transition in state machine", on every retry of the task,
    and the batch never ends (tests/replay/test_replay_batch_cancel.py). Here the signal
    runs in a task of its own, which the cancel does not reach; it is cancelled as the SDK
    would cancel it only if still unresolved once the tasks of this activation have run.

    Only where no other task of the workflow runs: the signal's command is made when its
    own task first runs, after the tasks ready before it."""
    sent = asyncio.ensure_future(handle.signal(signal, arg))
    while True:
        try:
            await asyncio.shield(sent)
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # as the SDK does: the cancel is taken later
            await asyncio.sleep(0)  # a resolution in this activation lands first
            if not sent.done():
                sent.cancel()
