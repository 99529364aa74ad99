"""The finalizer: what a deleted pool does before its workflow may end.

Steps, in order (run by `DevicePoolWorkflow` when it is cancelled):

1. child starts still in progress resolve, so their cancels land;
2. the health child and every provisioning batch in flight are cancelled;
3. the batches get a bounded wait to report their end, so no create lands after
   the sweep (a create already sent finishes; see `activities.devices`);
4. `terminate_pool` runs until the provider lists none of the pool's devices
   alive. An account the worker no longer knows does not end the finalizer: it
   shows the problem and waits for the configuration to come back — unless
   the pool never rented anything.

`verdict()` is the pure decision of step 4; the rest are the workflow steps.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError

from devicepool.activities.definitions import DeviceActivityDefinitions
from devicepool.activities.models import TerminatePoolInput
from devicepool.api.errors import ErrorType
from devicepool.workflows.errors import error_message, error_type
from devicepool.workflows.policies import PROVIDER_RETRY

__all__ = ["SweepVerdict", "cancel_children", "sweep", "verdict", "wait_for_batches"]

ACCOUNT_RETRY = timedelta(seconds=60)


class SweepVerdict(StrEnum):
    DONE = "done"
    WAIT_FOR_ACCOUNT = "wait_for_account"
    FAIL = "fail"


def verdict(error: str | None, *, rented_anything: bool) -> SweepVerdict:
    """What a failed `terminate_pool` means for the finalizer."""
    if error != ErrorType.UNKNOWN_ACCOUNT:
        return SweepVerdict.FAIL
    if not rented_anything:
        return SweepVerdict.DONE  # this pool never rented anything under that account
    return SweepVerdict.WAIT_FOR_ACCOUNT


async def cancel_children(workflow_ids: list[str]) -> None:
    """Ask each child to cancel; one already gone is fine."""
    for workflow_id in workflow_ids:
        try:
            await workflow.get_external_workflow_handle(workflow_id).cancel()
        except FailureError as err:
            workflow.logger.info("%s already ended: %s", workflow_id, err)


async def wait_for_batches(unreported: Callable[[], set[str]], *, timeout: timedelta) -> None:
    """Let running batches stop creating before the sweep; one that never answers is waited out."""
    try:
        await workflow.wait_condition(
            lambda: not unreported(),
            timeout=timeout,
            timeout_summary="wait for provisioning batches to stop",
        )
    except TimeoutError:
        workflow.logger.warning("batches still running at teardown: %s", sorted(unreported()))


async def sweep(
    *, account: str, pool: str, rented_anything: bool, blocked: Callable[[str], None]
) -> None:
    """Terminate every device of the pool; `blocked(message)` while the account is unknown."""
    while True:
        try:
            await workflow.execute_activity_method(
                DeviceActivityDefinitions.terminate_pool,
                TerminatePoolInput(account=account, pool=pool),
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=PROVIDER_RETRY,
                summary="terminate every device of the pool",
            )
            return
        except ActivityError as err:
            match verdict(error_type(err), rented_anything=rented_anything):
                case SweepVerdict.DONE:
                    return
                case SweepVerdict.FAIL:
                    raise
            # Devices exist under an account the worker no longer knows: wait
            # for the configuration to come back.
            blocked(f"cannot delete devices: {error_message(err)}")
            await workflow.sleep(ACCOUNT_RETRY, summary="wait for the account to be configured")
