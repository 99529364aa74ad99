"""Each account's ledger and janitor, started (or reconfigured) by every worker at start-up.

A signal-with-start per account and workflow: idempotent with many workers; a running one only
gets `configure` (the last worker to start wins). It is also how `apply` knows an account
exists: its ledger runs."""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from devicepool.activities.orphan_models import JanitorConfig
from devicepool.activities.settings import AccountSettings, LedgerConfig
from devicepool.api.names import (
    SIGNAL_JANITOR_CONFIGURE,
    SIGNAL_LEDGER_CONFIGURE,
    TASK_QUEUE,
    WORKFLOW_ACCOUNT_LEDGER,
    WORKFLOW_ORPHAN_SWEEP,
    janitor_workflow_id,
    ledger_workflow_id,
)
from devicepool.workflows.ledger.state import LedgerInput
from devicepool.workflows.orphans.state import JanitorInput

__all__ = ["register_accounts", "start_janitors"]


async def register_accounts(client: Client, accounts: Mapping[str, AccountSettings]) -> None:
    """Start (or reconfigure) each account's permit ledger."""
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


async def start_janitors(
    client: Client, accounts: Mapping[str, AccountSettings], config: JanitorConfig
) -> None:
    """Start (or reconfigure) each account's orphan sweep."""
    for account in accounts.values():
        await client.start_workflow(
            WORKFLOW_ORPHAN_SWEEP,
            JanitorInput(account=account.name),
            id=janitor_workflow_id(account.name),
            task_queue=TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=SIGNAL_JANITOR_CONFIGURE,
            # Per account: an account a node worker serves has its scans there.
            start_signal_args=[config.model_copy(update={"node": account.node})],
            static_summary=f"orphan sweep of account `{account.name}`",
        )
