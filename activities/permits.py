"""The worker's side of the per-account permit ledger (`workflows/ledger.py`).

- `LedgerConfig`: an account's creation window as the worker is configured
  (capacity per window, window length, safety margin). Workers send it to the
  ledger at startup (`register_accounts`, a signal-with-start).
- `RateLimitedReport`: what a create that still met a 429 tells the ledger, so
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

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from activities.devices import DeviceActivities
from activities.models import AccountSettings, CreateDeviceInput, CreateDeviceResult
from api.errors import ErrorType
from api.names import (
    SIGNAL_LEDGER_CONFIGURE,
    SIGNAL_RATE_LIMITED,
    TASK_QUEUE,
    WORKFLOW_ACCOUNT_LEDGER,
    ledger_workflow_id,
)


class _Camel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", serialize_by_alias=True
    )


class LedgerConfig(_Camel):
    """One account's creation window: `capacity` creates per `window_seconds`."""

    capacity: int = Field(default=20, ge=1)
    window_seconds: float = Field(default=60.0, gt=0)
    # Added to every window (clock skew between the provider and Temporal); also
    # how long the first request after an idle spell waits for others to share.
    margin_seconds: float = Field(default=1.0, ge=0)

    @classmethod
    def of(cls, account: AccountSettings) -> LedgerConfig:
        return cls(
            capacity=account.creates_per_minute,
            window_seconds=account.window_seconds,
            margin_seconds=account.window_margin_seconds,
        )


class LedgerInput(_Camel):
    account: str
    config: LedgerConfig | None = None
    # Carried across continue-as-new (a `workflows.ledger.LedgerState` as JSON).
    state: dict[str, object] | None = None


class RateLimitedReport(_Camel):
    pool: str
    retry_after_seconds: float


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


@activity.defn(name="ledger_hold")
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
