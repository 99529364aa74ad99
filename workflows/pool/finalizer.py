"""The finalizer: what a deleted pool does before its workflow may end (`tear_down`).

In order: child starts in progress resolve; the health child and every batch are
cancelled; the batches report their end (one slow to answer is asked after, and waited
for while it runs), so no create lands after the sweep; then `terminate_pool` until the
provider lists none of the pool's devices alive, never giving up. Each sweep window is
`teardown_blocked_after_seconds`, the activity's retries inside it, so a lasting
retryable error reaches the workflow as a block. `verdict()` and `window_failure()` are
the sweep's pure decisions. What a user sees: docs/pools.md, 'Converging, scaling, teardown'.
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
    TimeoutType,
)
from temporalio.exceptions import (
    TimeoutError as TemporalTimeout,  # an activity's; the builtin is a timer's
)

from devicepool.activities.definitions import DeviceActivityDefinitions
from devicepool.activities.models import PoolSettings, TerminatePoolInput, TerminatePoolResult
from devicepool.api.errors import ErrorType
from devicepool.api.names import health_workflow_id
from devicepool.workflows.pool import calls
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.reconciler.kind import TeardownBlocked, TryAgain
from devicepool.workflows.reconciler.teardown import until_torn_down
from devicepool.workflows.shared.errors import (
    PROVIDER_RETRY,
    condition_reason,
    error_message,
    error_type,
)
from devicepool.workflows.shared.placement import Route

# A delete whose batch ended without its report asks which batches still run, then
# sweeps; v0.1.0 failed the pool there instead (the except caught the wrong class).
SILENT_BATCH_PATCH = "teardown-outlives-a-silent-batch"

__all__ = ["SweepVerdict", "tear_down", "verdict", "window_failure"]

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
    """What a sweep window that ran out of time failed on: `(error type, message)`; None
    when it is no block (devices still on their way out, `teardown_pending`, or a long
    sweep still working with no attempt failed before it)."""
    failure: BaseException | None = err.cause
    if isinstance(failure, TemporalTimeout) and failure.type == TimeoutType.SCHEDULE_TO_CLOSE:
        failure = failure.cause  # the last failed attempt's error, if one failed
    if failure is None:
        return None
    if isinstance(failure, ApplicationError):
        if failure.type == ErrorType.TEARDOWN_PENDING:
            return None
        return failure.type, failure.message
    if isinstance(failure, TemporalTimeout):  # an attempt's heartbeat or start-to-close
        return ErrorType.TIMEOUT, str(failure)
    return None, str(failure)


async def tear_down(
    book: SlotBook,
    *,
    pool: str,
    route: Route,
    settings: PoolSettings,
    rented_anything: bool,
    blocked: Callable[[TeardownBlocked], None],
    hand_over: Callable[[], Awaitable[None]],
) -> TerminatePoolResult | None:
    """Cancel, wait for the batches, sweep; the sweep's answer (None when the account is
    gone and the pool never rented anything). `blocked` shows why the sweep cannot finish
    yet; `hand_over()` continues-as-new when the history is long (it does not return then)."""
    for workflow_id in [health_workflow_id(pool), *book.batch_ids()]:
        try:
            await workflow.get_external_workflow_handle(workflow_id).cancel()
        except FailureError as err:
            workflow.logger.info("%s already ended: %s", workflow_id, err)
    timeout = timedelta(
        seconds=settings.startup_timeout_seconds + settings.batch_check_grace_seconds
    )
    await _wait_for_batches(book.unreported, timeout=timeout)

    async def once() -> TerminatePoolResult | TeardownBlocked | TryAgain | None:
        try:
            return await workflow.execute_activity_method(
                DeviceActivityDefinitions.terminate_pool,
                TerminatePoolInput(account=route.account, pool=pool),
                schedule_to_close_timeout=timedelta(
                    seconds=settings.teardown_blocked_after_seconds
                ),
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
        blocked=blocked,
        hand_over=hand_over,
        first=SWEEP_RETRY_FIRST,
        most=SWEEP_RETRY_MAX,
        summary="wait, then sweep the provider again",
    )


async def _wait_for_batches(unreported: Callable[[], set[str]], *, timeout: timedelta) -> None:
    """Let running batches stop creating before the sweep. After `timeout`, those that
    still run are waited for again (a create on its way must land before the sweep, or
    it would be an orphan); the ones that ended without reporting are not."""
    while True:
        try:
            await workflow.wait_condition(
                lambda: not unreported(),
                timeout=timeout,
                timeout_summary="wait for provisioning batches to stop",
            )
            return
        except TimeoutError:  # the timer's
            if not workflow.patched(SILENT_BATCH_PATCH):
                raise  # serves v0.1.0: its pools failed here, and replay fails them again
            left = sorted(unreported())
            try:
                still = await calls.running_workflows(left)
            except ActivityError as err:
                workflow.logger.warning("cannot ask after batches %s: %s", left, err)
                still = []
            if not still:
                workflow.logger.warning("batches still unreported at teardown: %s", left)
                return
            workflow.logger.info("waiting for batches that still run: %s", still)


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
