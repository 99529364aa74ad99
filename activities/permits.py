"""The worker's side of the per-account permit ledger (`workflows/ledger.py`).

- `LedgerConfig` (in `activities.models`): an account's creation window as the worker is configured
  (capacity per window, window length, safety margin). Workers send it to the
  ledger at startup (`register_accounts`, a signal-with-start).
- `RateLimitedReport` (in `activities.models`): what a create that still met a 429 tells the ledger, so
  it can pause and restart slowly (the activity itself retries after
  `Retry-After`, see `activities/errors.py`).
- `LedgerReportingActivities`: `DeviceActivities` whose `create_device` also
  reports a 429 to its account's ledger (best effort: the report must never
  make the create itself fail).

No secrets here: accounts are named, never keyed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from devicepool.activities.definitions import LEDGER_HOLD
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import (
    AccountSettings,
    CreateDeviceInput,
    CreateDeviceResult,
    LedgerConfig,
    LedgerInput,
    RateLimitedReport,
)
from devicepool.api.errors import ErrorType
from devicepool.api.names import (
    SIGNAL_LEDGER_CONFIGURE,
    SIGNAL_RATE_LIMITED,
    TASK_QUEUE,
    WORKFLOW_ACCOUNT_LEDGER,
    ledger_workflow_id,
)


async def register_accounts(client: Client, accounts: Mapping[str, AccountSettings]) -> None:
    """Start (or reconfigure) each account's ledger: a signal-with-start per account.

    Idempotent and safe with many workers: an existing ledger only receives the
    `configure` signal (the last worker to start wins if configs differ).
    """
    for account in accounts.values():
        await client.start_workflow(
            WORKFLOW_ACCOUNT_LEDGER,
            LedgerInput(account=account.name),
            id=ledger_workflow_id(account.name),
            task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=SIGNAL_LEDGER_CONFIGURE,
            start_signal_args=[LedgerConfig.of(account)],
            static_summary=f"creation window of account `{account.name}`",
        )


@activity.defn(name=LEDGER_HOLD)
async def ledger_hold(seconds: float) -> None:
    """A sub-second pause for the ledger, run as a local activity.

    Server timers fire with about one second of granularity (measured on the
    dev server: a 0.1-s timer fired after 1.0 s); a local activity sleeps
    in the worker, precisely, and writes one marker to history.
    """
    await asyncio.sleep(seconds)


class LedgerReportingActivities(DeviceActivities):
    """`DeviceActivities` whose creates tell the account's ledger about any 429."""

    def pool_queue_activities(self) -> list[Any]:
        return [*super().pool_queue_activities(), ledger_hold]

    @activity.defn(name="create_device")
    async def create_device(self, input: CreateDeviceInput) -> CreateDeviceResult:
        try:
            return await super().create_device(input)
        except ApplicationError as err:
            if err.type == ErrorType.RATE_LIMITED.value:
                delay = err.next_retry_delay.total_seconds() if err.next_retry_delay else 1.0
                # Best effort: the ledger may be gone; the retry must still happen.
                with contextlib.suppress(Exception):
                    await (
                        activity.client()
                        .get_workflow_handle(ledger_workflow_id(input.account))
                        .signal(
                            SIGNAL_RATE_LIMITED,
                            RateLimitedReport(pool=input.pool, retry_after_seconds=delay),
                        )
                    )
            raise
