"""Noticing a workflow cancellation that an awaited activity absorbed.

When a workflow is cancelled while it awaits an activity, the SDK turns the
cancel into a cancel request for that activity, clears the task's cancellation,
and the await then ends with the activity's outcome: an `ActivityError` (which
our code may reasonably catch and survive) or even a normal result. The
`asyncio.CancelledError` never reaches workflow code, so a loop that handles
activity failures would run on as if nothing happened — and a deleted pool
would keep reconciling. `workflow.cancellation_reason()` does remember the
request; long-running loops call `raise_if_cancelled()` after such awaits.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow


def raise_if_cancelled() -> None:
    """Raise `CancelledError` if the server asked this workflow to cancel."""
    reason = workflow.cancellation_reason()
    if reason is not None:
        raise asyncio.CancelledError(reason or "workflow cancelled")
