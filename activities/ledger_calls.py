"""What activities tell or do for an account's permit ledger (`workflows/ledger/workflow.py`).

- `report_rate_limited`: a create that still met a 429 tells its account's ledger,
  which pauses and restarts slowly (best effort: the report never fails the create).
- `ledger_hold`: the ledger's sub-second pause, run as a local activity.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import activity
from temporalio.exceptions import ApplicationError

from devicepool.activities.models import RateLimitedReport
from devicepool.api.errors import ErrorType
from devicepool.api.names import SIGNAL_RATE_LIMITED, ledger_workflow_id

__all__ = ["ledger_hold", "report_rate_limited"]


async def report_rate_limited(err: ApplicationError, *, account: str, pool: str) -> None:
    """If `err` is a 429, tell the account's ledger (the ledger may be gone: never raises)."""
    if err.type != ErrorType.RATE_LIMITED.value:
        return
    delay = err.next_retry_delay.total_seconds() if err.next_retry_delay else 1.0
    with contextlib.suppress(Exception):
        await (
            activity.client()
            .get_workflow_handle(ledger_workflow_id(account))
            .signal(SIGNAL_RATE_LIMITED, RateLimitedReport(pool=pool, retry_after_seconds=delay))
        )


@activity.defn
async def ledger_hold(seconds: float) -> None:
    """A sub-second pause for the ledger, run as a local activity.

    Server timers fire with about one second of granularity (measured on the
    dev server: a 0.1-s timer fired after 1.0 s); a local activity sleeps
    in the worker, precisely, and writes one marker to history.
    """
    await asyncio.sleep(seconds)
