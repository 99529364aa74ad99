"""The worker's side of the per-account permit ledger (`workflows/ledger/workflow.py`).

- `LedgerConfig` (in `activities.models`): an account's creation window as the worker is configured
  (capacity per window, window length, safety margin). Workers send it to the
  ledger at startup (`register_accounts`, a signal-with-start).
- `RateLimitedReport` (in `activities.models`): what a create that still met a 429 tells the ledger, so
  it can pause and restart slowly (the activity itself retries after
  `Retry-After`, see `activities/errors.py`).
- The 429 report and the ledger's local activity live with the activities
  (`activities/ledger_calls.py`): `DeviceActivities.create_device` is the one create.

No secrets here: accounts are named, never keyed.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from devicepool.activities.models import (
    AccountSettings,
    LedgerConfig,
    LedgerInput,
)
from devicepool.api.names import (
    SIGNAL_LEDGER_CONFIGURE,
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
