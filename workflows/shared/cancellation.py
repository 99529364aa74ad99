"""Noticing a workflow cancellation that an awaited activity absorbed.

Why: docs/architecture.md, 'Notes for developers'.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow


def raise_if_cancelled() -> None:
    """Raise `CancelledError` if the server asked this workflow to cancel."""
    reason = workflow.cancellation_reason()
    if reason is not None:
        raise asyncio.CancelledError(reason or "workflow cancelled")
