"""The pool's children and neighbours: its health check, its provisioning batches, its ledger.

Children are started with `ParentClosePolicy.ABANDON` and addressed by id, so they
survive the pool's continue-as-new and report to whichever run is current.
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
from devicepool.workflows.shared.errors import forget, tell
from devicepool.workflows.shared.placement import route
from devicepool.workflows.shared.protocol import (
    HealthConfig,
    HealthInput,
    PermitIntent,
    ProvisionBatchInput,
    WithdrawSlots,
)

__all__ = ["Neighbours", "batch_input", "check_batches", "incarnation", "start_batch"]


class Neighbours:
    """One run's dealings with the pool's ledger, health check and batches: commands that
    need no answer run in the background, in order; the hand-over and the finalizer wait
    for `quiet`. None raises for a failure the next pass retries."""

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
        """Announce (or withdraw) a permit request: the ledger deals the pool into its next
        round. No ledger for the account (yet): batches then create without permits."""
        intent = PermitIntent(pool=self.pool, expecting=expecting)
        self.later(tell(ledger_workflow_id(self.account), SIGNAL_PERMIT_INTENT, intent))

    def withdraw(self, batch_id: str, slots: list[int]) -> None:
        """Ask a batch to drop slots the pool no longer needs (one already gone is fine)."""
        self.later(tell(batch_id, SIGNAL_WITHDRAW_SLOTS, WithdrawSlots(slots=sorted(slots))))

    def ensure_health(self, state: PoolState, settings: PoolSettings, config: HealthConfig) -> None:
        """Start the health check unless this run has it (`_start_health`)."""
        if not self.health_running:
            self.health_running = True
            self.later(self._start_health(state, settings, state.health_told or config))

    async def _start_health(
        self, state: PoolState, settings: PoolSettings, config: HealthConfig
    ) -> None:
        """Start the health child, or adopt it still running after continue-as-new. The pool's
        first start (`state.health_started` unset) replaces one an earlier pool of the name
        left running, never adopting its old settings."""
        info = workflow.info()
        options: dict[str, Any] = {}
        if not state.health_started:
            options["id_reuse_policy"] = WorkflowIDReusePolicy.TERMINATE_IF_RUNNING
        try:
            child = await workflow.start_child_workflow(
                WORKFLOW_POOL_HEALTH,
                HealthInput(
                    pool=self.pool,
                    parent_workflow_id=info.workflow_id,
                    account=self.account,
                    settings=settings,
                    config=config,
                    pool_first_run_id=info.first_execution_run_id,
                ),
                id=health_workflow_id(self.pool),
                task_queue=TASK_QUEUE,
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"health checks of {self.pool}",
                **options,
            )
            forget(child)
        except WorkflowAlreadyStartedError:
            # Abandoned by the previous run at continue-as-new: it keeps its
            # offline clocks and reports to this run (signals go by id).
            workflow.logger.info("pool %s: health check already running", self.pool)
        except FailureError as err:
            workflow.logger.warning("pool %s: health check not started: %s", self.pool, err)
            self.health_running = False  # tried again next pass
            return
        self.health_running = state.health_started = True

    async def sync_health(self, state: PoolState, wanted: HealthConfig) -> None:
        """Tell the health check when `maxUnhealthy` or the desired size changed (a miss
        is a warning: it goes on judging by the old `maxUnhealthy`)."""
        health = health_workflow_id(self.pool)
        told = wanted != state.health_told and await tell(
            health, SIGNAL_HEALTH_CONFIG, wanted, warn=True
        )
        if told:
            state.health_told = wanted


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
        # A child's input only: a replay compares a child's type and id, not this.
        reserve_keep=spec.reserve.keep if spec.reserve is not None else 0,
    )


def incarnation() -> str:
    """This pool's incarnation: constant across continue-as-new, new when the pool
    is deleted (or terminated) and applied again under the same name."""
    return workflow.info().first_execution_run_id[-12:]


async def check_batches(book: SlotBook, *, pool: str, every: timedelta) -> None:
    """Batches quiet for `every` are asked after; only one that ended without reporting is
    settled, its slots keeping their keys (docs/pools.md, 'Converging, scaling, teardown')."""
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
        forget(child)
    except FailureError as err:
        # E.g. the id is taken by a batch of a terminated earlier pool of that name.
        workflow.logger.warning("batch %s did not start: %s", child_id, err)
        return False
    return True
