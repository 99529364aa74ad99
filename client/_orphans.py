"""`PoolClient.orphans`: ask each account's janitor (`workflows/orphans/workflow.py`) for its orphans.

The client has no HTTP client and no keys: the janitor scans when asked (update
`sweep_orphans`) and, with `delete`, terminates each after checking it once more."""

from __future__ import annotations

from typing import Any

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import (
    UPDATE_SWEEP_ORPHANS,
    WORKFLOW_ORPHAN_SWEEP,
    account_from_janitor_id,
    janitor_workflow_id,
)
from devicepool.client._temporal_errors import temporal_errors
from devicepool.client.errors import DevicePoolError, TemporalUnreachable
from devicepool.workflows.orphans.state import OrphanReport, SweepRequest


async def janitor_accounts(client: Client, address: str) -> list[str]:
    """The accounts whose janitor runs (as visibility lists them)."""
    query = f"WorkflowType = '{WORKFLOW_ORPHAN_SWEEP}' AND ExecutionStatus = 'Running'"
    with temporal_errors(address, None):
        found = {account_from_janitor_id(e.id) async for e in client.list_workflows(query)}
    return sorted(account for account in found if account is not None)


async def sweep_orphans(
    client: Client,
    address: str,
    *,
    accounts: list[str] | None,
    delete: bool,
    timeout: Any,
) -> list[OrphanReport]:
    """One fresh report per account (`delete`: after terminating its orphans)."""
    names = accounts or await janitor_accounts(client, address)
    if not names:
        raise DevicePoolError(
            "no orphan sweep is running: every worker starts one per account it serves "
            "— is `devicepool worker` (or `devicepool dev`) running?"
        )
    reports = []
    for account in names:
        handle = client.get_workflow_handle(janitor_workflow_id(account))
        try:
            result = await handle.execute_update(
                UPDATE_SWEEP_ORPHANS,
                SweepRequest(delete=delete),
                result_type=OrphanReport,
                rpc_timeout=timeout,
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            raise DevicePoolError(f"orphan sweep of account {account!r}: {cause or err}") from err
        except RPCTimeoutOrCancelledError as err:
            raise DevicePoolError(
                f"orphan sweep of account {account!r}: no worker answered in time "
                "— is `devicepool worker` (or `devicepool dev`) running?"
            ) from err
        except RPCError as err:
            if err.status == RPCStatusCode.UNAVAILABLE:
                raise TemporalUnreachable(address, str(err)) from err
            if err.status == RPCStatusCode.NOT_FOUND:
                raise DevicePoolError(
                    f"no orphan sweep runs for account {account!r} (no worker serves it)"
                ) from err
            raise DevicePoolError(f"Temporal: {err.message}") from err
        reports.append(result)
    return reports
