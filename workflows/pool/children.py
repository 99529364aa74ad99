"""The pool's children and neighbours: its health check, its provisioning batches, its ledger.

Children are started with `ParentClosePolicy.ABANDON` and addressed by id, so
they survive the pool's continue-as-new and report to whichever run is
current. Each function here is one command of the pool workflow; none of them
raises for a failure the pool simply retries on its next pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, FailureError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from devicepool.activities.models import PoolSettings, device_template
from devicepool.api.names import (
    SIGNAL_HEALTH_CONFIG,
    SIGNAL_PERMIT_INTENT,
    SIGNAL_WITHDRAW_SLOTS,
    TASK_QUEUE,
    WORKFLOW_POOL_HEALTH,
    WORKFLOW_PROVISION_BATCH,
    health_workflow_id,
    ledger_workflow_id,
)
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool import calls
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.shared.placement import route
from devicepool.workflows.shared.protocol import (
    HealthConfig,
    HealthInput,
    PermitIntent,
    ProvisionBatchInput,
    WithdrawSlots,
)

__all__ = [
    "Neighbours",
    "batch_input",
    "check_batches",
    "start_batch",
    "start_health",
    "tell_health",
    "tell_ledger",
    "withdraw_slots",
]


class Neighbours:
    """One run's dealings with the pool's ledger, health check and batches.

    Commands that need no answer (child starts, signals) run in the background,
    in the order they are asked for; the hand-over and the finalizer wait until
    they all resolved (`quiet`).
    """

    def __init__(self, *, pool: str, account: str) -> None:
        self.pool, self.account = pool, account
        self.health_running = False  # this run started (or found) the health check
        self._pending: set[asyncio.Task[Any]] = set()

    def later(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def quiet(self) -> bool:
        return not self._pending

    def tell_ledger(self, *, expecting: bool) -> None:
        self.later(tell_ledger(account=self.account, pool=self.pool, expecting=expecting))

    def withdraw(self, batch_id: str, slots: list[int]) -> None:
        self.later(withdraw_slots(batch_id, slots))

    def ensure_health(self, state: PoolState, settings: PoolSettings, config: HealthConfig) -> None:
        """Start the health check unless this run has it (a new pool replaces a check a
        dead pool of its name left running; a continued run adopts its own)."""
        if not self.health_running:
            self.health_running = True
            self.later(self._start_health(state, settings, state.health_told or config))

    async def _start_health(
        self, state: PoolState, settings: PoolSettings, config: HealthConfig
    ) -> None:
        self.health_running = await start_health(
            replace_stale=not state.health_started,
            pool=self.pool,
            account=self.account,
            settings=settings,
            config=config,
        )
        state.health_started = state.health_started or self.health_running

    async def sync_health(self, state: PoolState, wanted: HealthConfig) -> None:
        """Tell the health check when `maxUnhealthy` or the desired size changed."""
        if wanted != state.health_told and await tell_health(pool=self.pool, config=wanted):
            state.health_told = wanted


async def tell_ledger(*, account: str, pool: str, expecting: bool) -> None:
    """Announce (or withdraw) a permit request, so the ledger deals this pool into the next round."""
    try:
        await workflow.get_external_workflow_handle(ledger_workflow_id(account)).signal(
            SIGNAL_PERMIT_INTENT, PermitIntent(pool=pool, expecting=expecting)
        )
    except FailureError as err:
        # No ledger for this account (yet): batches then create without permits.
        workflow.logger.info("ledger of %s not told: %s", account, err)


async def start_health(
    *,
    pool: str,
    account: str,
    settings: PoolSettings,
    config: HealthConfig,
    replace_stale: bool = False,
) -> bool:
    """Start the health child, or find it still running; False if it must be tried again.

    `replace_stale`: the pool's first start of its check. A health check still
    running under that id then belongs to an earlier pool of the same name (its
    workflow was terminated by hand): it is replaced, never adopted with its
    old settings. Later starts (after continue-as-new) adopt the running one.
    """
    info = workflow.info()
    options: dict[str, Any] = {}
    if replace_stale:
        options["id_reuse_policy"] = WorkflowIDReusePolicy.TERMINATE_IF_RUNNING
    try:
        child = await workflow.start_child_workflow(
            WORKFLOW_POOL_HEALTH,
            HealthInput(
                pool=pool,
                parent_workflow_id=info.workflow_id,
                account=account,
                settings=settings,
                config=config,
                pool_first_run_id=info.first_execution_run_id,
            ),
            id=health_workflow_id(pool),
            task_queue=TASK_QUEUE,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"health checks of {pool}",
            **options,
        )
        _forget_outcome(child)
    except WorkflowAlreadyStartedError:
        # Abandoned by the previous run at continue-as-new: it keeps its
        # offline clocks and reports to this run (signals go by id).
        workflow.logger.info("pool %s: health check already running", pool)
    except FailureError as err:
        workflow.logger.warning("pool %s: health check not started: %s", pool, err)
        return False
    return True


async def tell_health(*, pool: str, config: HealthConfig) -> bool:
    """Send the health child a changed spec (`maxUnhealthy`, replicas); False if it was not told."""
    try:
        await workflow.get_external_workflow_handle(health_workflow_id(pool)).signal(
            SIGNAL_HEALTH_CONFIG, config
        )
    except FailureError as err:
        workflow.logger.warning("health check of %s not told: %s", pool, err)
        return False
    return True


def batch_input(
    *,
    pool: str,
    spec: DevicePoolSpec,
    settings: PoolSettings,
    generation: int,
    slots: list[int],
    replacement: bool,
) -> ProvisionBatchInput:
    """What a batch needs to create `slots` under `generation`'s keys (names only, no secrets)."""
    return ProvisionBatchInput(
        pool=pool,
        parent_workflow_id=workflow.info().workflow_id,
        replacement=replacement,
        account=spec.account,
        template=device_template(spec),
        generation=generation,
        slots=slots,
        incarnation=incarnation(),
        startup_timeout_seconds=settings.startup_timeout_seconds,
        poll_seconds=min(5.0, settings.resync_seconds),
        node=route(spec.account, settings).node,
    )


def incarnation() -> str:
    """This pool's incarnation: constant across continue-as-new, new when the pool
    is deleted (or terminated) and applied again under the same name."""
    return workflow.info().first_execution_run_id[-12:]


async def check_batches(book: SlotBook, *, pool: str, every: timedelta) -> None:
    """Batches quiet for `every` are asked after; one is let go only once it has ended.

    A batch may wait for the account's window for many minutes (a long
    backlog, other pools): that is not a failure, and its creates may still
    land. Only a batch that ended without reporting (its run terminated by
    hand) is settled, and its slots keep their keys.
    """
    now = workflow.now()
    due = book.due_for_check(now=now, every=every)
    if not due:
        return
    try:
        running = set(await calls.running_workflows(due))
    except ActivityError as err:
        workflow.logger.warning("pool %s: cannot ask after batches: %s", pool, err)
        return
    book.still_running(running, workflow.now())
    for child_id in sorted(set(due) - running - book.reported()):
        lost = book.lost(child_id)
        workflow.logger.warning(
            "batch %s ended without reporting; slots %s planned again under their keys",
            child_id,
            lost,
        )


async def withdraw_slots(batch_id: str, slots: list[int]) -> None:
    """Ask a batch to drop slots the pool no longer needs (a batch already gone is fine)."""
    try:
        await workflow.get_external_workflow_handle(batch_id).signal(
            SIGNAL_WITHDRAW_SLOTS, WithdrawSlots(slots=sorted(slots))
        )
    except FailureError as err:
        workflow.logger.info("batch %s not told to withdraw: %s", batch_id, err)


async def start_batch(child_id: str, input: ProvisionBatchInput) -> bool:
    """Start a provisioning batch; False if it could not start (the pool re-plans its slots)."""
    try:
        child = await workflow.start_child_workflow(
            WORKFLOW_PROVISION_BATCH,
            input,
            id=child_id,
            task_queue=TASK_QUEUE,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"provision {len(input.slots)} device(s) for {input.pool}",
        )
        _forget_outcome(child)
    except FailureError as err:
        # E.g. the id is taken by a batch of a terminated earlier pool of that name.
        workflow.logger.warning("batch %s did not start: %s", child_id, err)
        return False
    return True


def _forget_outcome(child: asyncio.Future[Any]) -> None:
    """An abandoned child reports by signal; its result future is never awaited.
    Retrieve its outcome anyway, so a cancelled child logs no "never retrieved"."""
    child.add_done_callback(lambda done: done.cancelled() or done.exception())
