"""The teardown loop every kind runs when its pool is deleted: step until done, never give up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow

from devicepool.workflows.reconciler.kind import TeardownBlocked, TryAgain

__all__ = ["until_torn_down"]

T = TypeVar("T")


async def until_torn_down(
    step: Callable[[], Awaitable[T | TeardownBlocked | TryAgain]],
    *,
    blocked: Callable[[TeardownBlocked], None],
    hand_over: Callable[[], Awaitable[None]],
    first: timedelta,
    most: timedelta,
    summary: str,
) -> T:
    """Run `step` until it is done; its result. A block is shown (`blocked`) and tried
    again after `first`, doubling to `most`; `hand_over()` continues-as-new when due."""
    pause = first
    while True:
        outcome = await step()
        if isinstance(outcome, TryAgain):
            await hand_over()
            await workflow.sleep(outcome.after, summary=outcome.summary)
        elif isinstance(outcome, TeardownBlocked):
            blocked(outcome)
            await hand_over()
            await workflow.sleep(pause, summary=summary)
            pause = min(most, 2 * pause)
        else:
            return outcome
