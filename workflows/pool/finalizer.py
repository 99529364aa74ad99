"""The finalizer: what a deleted pool does before its workflow may end.

Steps, in order (run by `DevicePoolWorkflow` when it is cancelled):

1. child starts still in progress resolve, so their cancels land;
2. the health child and every provisioning batch in the book are cancelled;
3. the batches get time to report their end, so no create lands after the
   sweep (a create already sent finishes; see `activities.devices`); a batch
   that is slow to answer is asked after, and waited for while it still runs;
4. `terminate_pool` runs until the provider lists none of the pool's devices
   alive. It never gives up: a provider error it cannot get past (a rotated
   key, an account the worker no longer knows, a 402/403/409), or retryable
   errors (5xx, timeouts, 429s) that last `teardown_blocked_after_seconds`,
   keep the pool in phase Deleting with `TeardownBlocked=True` naming the
   error, and the sweep is tried again (5 s doubling to a minute) until the
   cause is fixed — except an unknown account under which the pool never
   rented anything. The pool continues-as-new meanwhile when its history
   grows, so this can last.

   Each sweep is one window of attempts (the activity's retry policy inside a
   schedule-to-close of `teardown_blocked_after_seconds`): without the bound, a
   retryable error never reached the workflow and the block never showed. A
   window that ran out while devices were only on their way out, or while an
   attempt still worked, is no block: the next window starts a second later.
   Failing attempts end a window as soon as the next retry would not fit in
   it, so the block shows within the bound, not only at its end.

`verdict()` and `window_failure()` are the pure decisions of step 4; the rest
are the workflow steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from enum import StrEnum

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from devicepool.activities.definitions import DeviceActivityDefinitions
from devicepool.activities.models import PoolSettings, TerminatePoolInput, TerminatePoolResult
from devicepool.api.errors import ErrorType
from devicepool.workflows.pool import calls
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.reconciler.kind import TeardownBlocked, TryAgain
from devicepool.workflows.reconciler.teardown import until_torn_down
from devicepool.workflows.shared.errors import error_message, error_type
from devicepool.workflows.shared.placement import Route, route
from devicepool.workflows.shared.policies import PROVIDER_RETRY

__all__ = [
    "SweepVerdict",
    "cancel_children",
    "sweep",
    "tear_down",
    "verdict",
    "wait_for_batches",
    "window_failure",
]

# Between sweeps that failed: 5 s doubling to a minute (a fixed key is used soon).
SWEEP_RETRY_FIRST = timedelta(seconds=5)
SWEEP_RETRY_MAX = timedelta(seconds=60)


class SweepVerdict(StrEnum):
    DONE = "done"
    RETRY = "retry"


def verdict(error: str | None, *, rented_anything: bool) -> SweepVerdict:
    """What a failed `terminate_pool` means for the finalizer: it never gives up,
    unless the pool never rented anything under an account the worker does not know."""
    if error == ErrorType.UNKNOWN_ACCOUNT and not rented_anything:
        return SweepVerdict.DONE
    return SweepVerdict.RETRY


def window_failure(err: ActivityError) -> tuple[str | None, str] | None:
    """What a sweep window that ran out of time failed on: `(error type, message)`.

    None when it is no block: the last attempt found devices still on their
    way out (`teardown_pending`), or the window closed on an attempt that was
    still working with none failed before it (a large pool's long sweep).
    """
    failure: BaseException | None = err.cause
    if isinstance(failure, TimeoutError) and failure.type == TimeoutType.SCHEDULE_TO_CLOSE:
        failure = failure.cause  # the last failed attempt's error, if one failed
    if failure is None:
        return None
    if isinstance(failure, ApplicationError):
        if failure.type == ErrorType.TEARDOWN_PENDING:
            return None
        return failure.type, failure.message
    if isinstance(failure, TimeoutError):  # an attempt's heartbeat or start-to-close
        return ErrorType.TIMEOUT, str(failure)
    return None, str(failure)


def condition_reason(error: str | None) -> str:
    """An error type as a condition reason: `unknown_account` → `UnknownAccount`."""
    return "".join(part.title() for part in (error or "provider_error").split("_"))


async def tear_down(
    book: SlotBook,
    *,
    pool: str,
    account: str,
    health_id: str,
    settings: PoolSettings,
    rented_anything: bool,
    blocked: Callable[[str, str], None],
    hand_over: Callable[[], Awaitable[None]],
) -> TerminatePoolResult | None:
    """Steps 2-4: cancel the children, wait for the batches, sweep the provider;
    the sweep's answer (None when the account never rented anything to sweep)."""
    await cancel_children([health_id, *book.batch_ids()])
    timeout = timedelta(seconds=settings.startup_timeout_seconds + 60)
    await wait_for_batches(book.unreported, timeout=timeout, running=_still_running)
    return await sweep(
        pool=pool,
        rented_anything=rented_anything,
        blocked=blocked,
        hand_over=hand_over,
        blocked_after=timedelta(seconds=settings.teardown_blocked_after_seconds),
        route=route(account, settings),
    )


async def _still_running(batch_ids: list[str]) -> list[str]:
    try:
        return await calls.running_workflows(batch_ids)
    except ActivityError as err:
        workflow.logger.warning("cannot ask after batches %s: %s", batch_ids, err)
        return []


async def cancel_children(workflow_ids: list[str]) -> None:
    """Ask each child to cancel; one already gone is fine."""
    for workflow_id in workflow_ids:
        try:
            await workflow.get_external_workflow_handle(workflow_id).cancel()
        except FailureError as err:
            workflow.logger.info("%s already ended: %s", workflow_id, err)


async def wait_for_batches(
    unreported: Callable[[], set[str]],
    *,
    timeout: timedelta,
    running: Callable[[list[str]], Awaitable[list[str]]] | None = None,
) -> None:
    """Let running batches stop creating before the sweep.

    After `timeout`, `running` (when given) asks which batches still run: those
    are waited for again (a create on its way must land before the sweep, or
    it would be an orphan); the ones that ended without reporting are not.
    """
    while True:
        try:
            await workflow.wait_condition(
                lambda: not unreported(),
                timeout=timeout,
                timeout_summary="wait for provisioning batches to stop",
            )
            return
        except TimeoutError:
            left = sorted(unreported())
            still = await running(left) if running is not None else []
            if not still:
                workflow.logger.warning("batches still unreported at teardown: %s", left)
                return
            workflow.logger.info("waiting for batches that still run: %s", still)


async def sweep(
    *,
    route: Route,
    pool: str,
    rented_anything: bool,
    blocked: Callable[[str, str], None],
    hand_over: Callable[[], Awaitable[None]],
    blocked_after: timedelta,
) -> TerminatePoolResult | None:
    """Terminate every device of the pool, trying again until it works: what the
    provider answered, or None when there is nothing to sweep (the account is gone
    and the pool never rented anything).

    `blocked(reason, message)` shows why the sweep cannot finish yet, at the
    latest `blocked_after` into a failing window; `hand_over()` continues-as-new
    when the history is long (it does not return then).
    """

    async def once() -> TerminatePoolResult | TeardownBlocked | TryAgain | None:
        try:
            return await workflow.execute_activity_method(
                DeviceActivityDefinitions.terminate_pool,
                TerminatePoolInput(account=route.account, pool=pool),
                schedule_to_close_timeout=blocked_after,
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=PROVIDER_RETRY,
                summary="terminate every device of the pool",
                **route.provider(),
            )
        except ActivityError as err:
            return _failed(err, route=route, rented_anything=rented_anything)

    return await until_torn_down(
        once,
        blocked=lambda block: blocked(block.reason, block.message),
        hand_over=hand_over,
        first=SWEEP_RETRY_FIRST,
        most=SWEEP_RETRY_MAX,
        summary="wait, then sweep the provider again",
    )


def _failed(
    err: ActivityError, *, route: Route, rented_anything: bool
) -> TeardownBlocked | TryAgain | None:
    """What a failed sweep means: a block, another window at once, or done (None)."""
    if silent := route.problem(err):
        reason, _, why = silent.partition(": ")
        return TeardownBlocked(reason, f"cannot delete devices: {why}")
    if err.retry_state == RetryState.TIMEOUT:
        failed = window_failure(err)
        if failed is None:
            # The policy's first interval: never a hot loop, however short the window.
            return TryAgain(PROVIDER_RETRY.initial_interval, "sweep again")
        kind, message = failed
    else:
        kind, message = error_type(err), error_message(err)
        if verdict(kind, rented_anything=rented_anything) == SweepVerdict.DONE:
            return None
    return TeardownBlocked(condition_reason(kind), f"cannot delete devices: {message}")
