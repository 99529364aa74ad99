"""`ProvisionBatch`: the child workflow that rents one batch of devices for a pool.

Messages: signals `permits_granted` (`PermitGrant`, from the account's ledger)
and `withdraw_slots` (`WithdrawSlots`, from the pool); to the ledger
`request_permits`, `cancel_permits`, `permits_used`; to its pool `batch_created`
and, when it ends, `batch_done` (`BatchReport`). Query `report`. Continue-as-new:
never (a batch lasts one startup timeout plus its creates' retry budget).

Each slot is one permitted, idempotent `create_device`, then `get_statuses` until it
boots. Why: docs/pools.md, "Converging, scaling, teardown" and "Orphans";
docs/scaling.md, "Rate limits".
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError, FailureError

from devicepool.workflows.provision.boots import wait_until_booted

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.models import (
        HEARTBEAT_TIMEOUT,
        CreateDeviceInput,
        PoolRunInput,
    )
    from devicepool.api.names import (
        LABEL_SLOT,
        SIGNAL_BATCH_CREATED,
        SIGNAL_BATCH_DONE,
        SIGNAL_PERMIT_CANCEL,
        SIGNAL_PERMIT_REQUEST,
        SIGNAL_PERMITS_GRANTED,
        SIGNAL_PERMITS_USED,
        SIGNAL_WITHDRAW_SLOTS,
        WORKFLOW_PROVISION_BATCH,
        create_idempotency_key,
        ledger_workflow_id,
        slot_label,
    )
    from devicepool.workflows.provision.failures import (
        CREATE_RETRY,
        CREATED,
        FAILED_CREATE,
        NOT_SENT,
        provider_verdict,
        quota_refusal,
        reason_of,
        stopped_by_the_cancel,
    )
    from devicepool.workflows.shared.errors import (
        raise_if_cancelled,
        signal_past_a_cancel,
        tell,
    )
    from devicepool.workflows.shared.placement import Route
    from devicepool.workflows.shared.protocol import (
        BatchReport,
        PermitGrant,
        PermitRequest,
        PermitsUsed,
        ProvisionBatchInput,
        QuotaRefusal,
        WithdrawSlots,
    )


# A create refused for a used-up quota: the batch sends none of its remaining creates (they
# are withdrawn, the permits handed back) until the quota resets. Batches before it sent them.
QUOTA_STOPS_BATCH_PATCH = "quota-stops-the-batch"
# A cancel that came while the batch asked for permits (a pool deleted right after it
# started the batch) ends it before any create. Batches before it created every slot,
# without permits, and took the cancel after (R23 #2). Asked only when such a cancel came.
CANCEL_AT_REQUEST_PATCH = "batch-cancel-at-request-creates-nothing"
# A cancel that came while granted creates ran waits for them before the batch reports its
# end, so they land before the pool's sweep and the report names their devices. Batches
# before it ended at once, the creates landing after (R25 #2). Asked only then.
CANCEL_AWAITS_CREATES_PATCH = "batch-cancel-awaits-its-creates"


@workflow.defn(name=WORKFLOW_PROVISION_BATCH)
class ProvisionBatchWorkflow:
    def __init__(self) -> None:
        self._report: BatchReport | None = None
        self._grants: list[PermitGrant] = []
        # grant id -> permits not yet reported back to the ledger
        self._unreported: dict[str, int] = {}
        self._gated = False
        # (index, slot) still waiting for a permit, and slots the pool withdrew
        self._pending: list[tuple[int, int]] = []
        self._dropped: list[int] = []
        # The pool that started this batch has ended (terminated, failed, completed).
        self._gone = False
        # The creates started, one task per grant (or one ungated), and their activities.
        self._runs: list[asyncio.Future[None]] = []
        self._creates: list[workflow.ActivityHandle[Any]] = []
        # The creates the batch's cancel stopped (`_await_started_creates`).
        self._stopped: list[workflow.ActivityHandle[Any]] = []

    @workflow.run
    async def run(self, input: ProvisionBatchInput) -> BatchReport:
        report = BatchReport(
            workflow_id=workflow.info().workflow_id,
            slots=list(input.slots),
            incarnation=input.incarnation,
        )
        self._report = report
        try:
            await self._create_all(input, report)
            raise_if_cancelled()
            # Tell the pool at once which slots became which devices: from now
            # on it counts them by observation, not as creates in flight (a
            # device removed while this batch still waits for boots must be
            # replaced, not counted).
            await tell(input.parent_workflow_id, SIGNAL_BATCH_CREATED, report)
            if not self._gone:
                await wait_until_booted(input, report)
        except (asyncio.CancelledError, ActivityError) as err:
            # A cancel that arrived during an activity may surface as that
            # activity's failure (workflows/shared/errors.py).
            if isinstance(err, ActivityError) and workflow.cancellation_reason() is None:
                raise
            report.cancelled = True
            if not await self._await_started_creates(input):
                await self._release_permits(input)
            await tell(input.parent_workflow_id, SIGNAL_BATCH_DONE, report)
            raise
        await tell(input.parent_workflow_id, SIGNAL_BATCH_DONE, report)
        return report

    @workflow.query(name="report")
    def report(self) -> BatchReport | None:
        return self._report

    @workflow.signal(name=SIGNAL_PERMITS_GRANTED)
    def permits_granted(self, grant: PermitGrant) -> None:
        self._grants.append(grant)

    @workflow.signal(name=SIGNAL_WITHDRAW_SLOTS)
    def withdraw_slots(self, request: WithdrawSlots) -> None:
        """The pool needs fewer devices: slots still waiting for a permit are dropped."""
        wanted = set(request.slots)
        self._dropped += [slot for _, slot in self._pending if slot in wanted]
        self._pending = [(i, slot) for i, slot in self._pending if slot not in wanted]

    async def _await_started_creates(self, input: ProvisionBatchInput) -> bool:
        """On a cancel with creates running: withdraw the permit request, cancel their
        activities and wait until each ended (a create on its way to the provider lands and
        reports its device; one queued or between retries starts no further attempt), then
        hand back the grants no create used. True if it did (the permits are released).
        `CANCEL_AWAITS_CREATES_PATCH`, asked only when some still run."""
        running = [run for run in self._runs if not run.done()]
        if not (running and workflow.patched(CANCEL_AWAITS_CREATES_PATCH)):
            return False
        for create in self._creates:
            # The activities, not the runs: a run may be telling the ledger (errors.py).
            if not create.done():
                self._stopped.append(create)
                create.cancel()
        if self._gated:
            await self._cancel_request(input)  # no grant is spent from now: none asked for
        await asyncio.gather(*running, return_exceptions=True)
        if self._gated:
            for grant in self._grants:
                await self._used(input, PermitsUsed(grant_id=grant.grant_id, unused=grant.count))
            for grant_id in list(self._unreported):  # a run the ledger did not hear from
                await self._used(input, PermitsUsed(grant_id=grant_id))
        self._grants.clear()
        return True

    async def _settle_withdrawn(self, input: ProvisionBatchInput, report: BatchReport) -> None:
        """Tell the pool at once, and ask the ledger only for what is still needed."""
        report.withdrawn += self._dropped
        self._dropped = []
        await tell(input.parent_workflow_id, SIGNAL_BATCH_CREATED, report)
        if self._pending:
            self._gated = await self._ask(input, len(self._pending))
            _take_a_cancel()
        else:
            await self._cancel_request(input)

    async def _cancel_request(self, input: ProvisionBatchInput) -> None:
        await tell(
            ledger_workflow_id(input.account), SIGNAL_PERMIT_CANCEL, workflow.info().workflow_id
        )

    async def _create_all(self, input: ProvisionBatchInput, report: BatchReport) -> None:
        """Create every slot: under the account's permits when it has a ledger, else at once."""
        self._pending = list(enumerate(input.slots))
        runs = self._runs
        self._gated = await self._ask(input, len(self._pending), first=True)
        _take_a_cancel()
        while self._pending and self._gated:
            try:
                await workflow.wait_condition(
                    lambda: bool(self._grants) or bool(self._dropped),
                    timeout=timedelta(seconds=input.startup_timeout_seconds),
                    timeout_summary="wait for create permits",
                )
            except TimeoutError:
                if await self._pool_gone(input):
                    break
                # Nothing for a long time: ask again (the ledger may have restarted).
                self._gated = await self._ask(input, len(self._pending))
                _take_a_cancel()
                continue
            if self._dropped:
                await self._settle_withdrawn(input, report)
                continue
            if await self._pool_gone(input):
                break  # the grant goes back with the others below
            grant = self._grants.pop(0)
            if _quota_holds(report):
                # The rest would be refused: none is sent, the grant goes back unused.
                report.withdrawn += [slot for _, slot in self._pending]
                self._pending = []
                await self._used(input, PermitsUsed(grant_id=grant.grant_id, unused=grant.count))
                await self._cancel_request(input)
                break
            self._unreported[grant.grant_id] = grant.count
            take, self._pending = self._pending[: grant.count], self._pending[grant.count :]
            runs.append(asyncio.ensure_future(self._run_grant(input, report, grant, take)))
        if self._gone:
            # Nobody needs the rest: the ledger gets the request back, and the
            # grants not spent go back unused below.
            report.withdrawn += [slot for _, slot in self._pending]
            self._pending = []
            await self._cancel_request(input)
        if self._pending:
            runs.append(asyncio.ensure_future(self._run_grant(input, report, None, self._pending)))
            self._pending = []
        if self._dropped:  # withdrawn while the last grant came in
            await self._settle_withdrawn(input, report)
        await asyncio.gather(*runs)
        # Grants that arrived after the last slot was covered go straight back.
        for grant in self._grants:
            await self._used(input, PermitsUsed(grant_id=grant.grant_id, unused=grant.count))
        self._grants.clear()

    async def _pool_gone(self, input: ProvisionBatchInput) -> bool:
        """Whether the pool that started this batch has ended: then nobody needs the rest.

        Asked before each grant is spent and after each long wait for one (not
        knowing is not gone). A pool continuing-as-new is still the same pool.
        """
        parent = workflow.info().parent
        try:
            found = await workflow.execute_activity_method(
                DeviceActivityDefinitions.pool_running,
                PoolRunInput(
                    workflow_id=input.parent_workflow_id,
                    run_id=parent.run_id if parent is not None else "",
                ),
                start_to_close_timeout=timedelta(seconds=10),
                schedule_to_close_timeout=timedelta(minutes=1),
                summary="is the pool still running?",
            )
        except ActivityError as err:
            raise_if_cancelled()
            workflow.logger.warning("pool %s: not known if still running: %s", input.pool, err)
            return False
        raise_if_cancelled()
        if found.running:
            return False
        workflow.logger.warning(
            "pool %s is gone (its workflow is %s): its batch rents nothing more",
            input.pool,
            found.status,
        )
        self._gone = True
        return True

    async def _ask(self, input: ProvisionBatchInput, count: int, *, first: bool = False) -> bool:
        """Ask the account's ledger for `count` permits; False if it has none (create ungated).
        `first`: the batch's first step, where nothing else runs (`signal_past_a_cancel`)."""
        request_id = workflow.info().workflow_id
        request = PermitRequest(
            request_id=request_id,
            requester=request_id,
            pool=input.pool,
            count=count,
            replacement=input.replacement,
            # A create keeps its permit at most for its whole retry budget.
            lease_seconds=input.startup_timeout_seconds + 60,
        )
        try:
            if first:
                await signal_past_a_cancel(_ledger(input), SIGNAL_PERMIT_REQUEST, request)
            else:
                await _ledger(input).signal(SIGNAL_PERMIT_REQUEST, request)
        except FailureError as err:
            if isinstance(err, CancelledError):
                # Not sent: the batch was cancelled first (the request is not the ledger's).
                workflow.logger.info("pool %s: permit request not sent: %s", input.pool, err)
                return False
            if workflow.cancellation_reason() is not None:
                # `_take_a_cancel` ends the batch next (logs go out only past replay,
                # where the patch it asks holds).
                workflow.logger.info(
                    "pool %s: account %s has no permit ledger (%s), and the batch was "
                    "cancelled meanwhile: it creates nothing more",
                    input.pool,
                    input.account,
                    err,
                )
                return False
            workflow.logger.warning(
                "pool %s: account %s has no permit ledger (%s); creating without permits",
                input.pool,
                input.account,
                err,
            )
            return False
        return True

    async def _run_grant(
        self,
        input: ProvisionBatchInput,
        report: BatchReport,
        grant: PermitGrant | None,
        items: list[tuple[int, int]],
    ) -> None:
        """The creates one grant (or, ungated, none) covers; then tell the ledger how they went."""
        outcomes = await asyncio.gather(
            *(self._create_one(input, report, i, slot) for i, slot in items)
        )
        if grant is not None:
            not_sent = sum(1 for _, outcome in outcomes if outcome == NOT_SENT)
            used = PermitsUsed(
                grant_id=grant.grant_id,
                done_at=[at for at, outcome in outcomes if outcome != NOT_SENT],
                failed=sum(1 for _, outcome in outcomes if outcome == FAILED_CREATE),
                unused=grant.count - len(items) + not_sent,
            )
            await self._used(input, used)

    async def _used(self, input: ProvisionBatchInput, used: PermitsUsed) -> None:
        self._unreported.pop(used.grant_id, None)
        await tell(ledger_workflow_id(input.account), SIGNAL_PERMITS_USED, used)

    async def _release_permits(self, input: ProvisionBatchInput) -> None:
        """On cancellation: withdraw the request, report unreported grants as used now."""
        if not self._gated:
            return
        ledger = _ledger(input)
        try:
            await ledger.signal(SIGNAL_PERMIT_CANCEL, workflow.info().workflow_id)
            for grant in self._grants:
                self._unreported.setdefault(grant.grant_id, grant.count)
            self._grants.clear()
            for grant_id in list(self._unreported):
                # Creates may have reached the provider: count them from now.
                await ledger.signal(SIGNAL_PERMITS_USED, PermitsUsed(grant_id=grant_id))
                self._unreported.pop(grant_id, None)
        except FailureError as err:
            workflow.logger.info("ledger of %s did not take the release: %s", input.account, err)

    async def _create_one(
        self, input: ProvisionBatchInput, report: BatchReport, index: int, slot: int
    ) -> tuple[datetime, str]:
        """One create; returns when it finished (for the ledger) and how (`CREATED`...)."""
        total = len(input.slots)
        create: workflow.ActivityHandle[Any] | None = None
        try:
            create = workflow.start_activity_method(
                DeviceActivityDefinitions.create_device,
                CreateDeviceInput(
                    account=input.account,
                    pool=input.pool,
                    template=input.template,
                    name=f"{input.pool}-{slot}",
                    idempotency_key=create_idempotency_key(
                        input.pool, input.generation, slot, input.incarnation
                    ),
                    extra_labels={LABEL_SLOT: slot_label(slot, input.incarnation)},
                    replacement=input.replacement,
                    # An activity's input only: a replay does not compare it (no patch).
                    reserve_keep=input.reserve_keep,
                ),
                **Route(input.account, input.node).create(),
                # Twice the provider client's own timeout: an attempt lost with
                # a killed worker is retried elsewhere (same key) that soon.
                start_to_close_timeout=timedelta(seconds=20),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                # The whole budget for one create, 429 waits included.
                schedule_to_close_timeout=timedelta(seconds=input.startup_timeout_seconds),
                retry_policy=CREATE_RETRY,
                # On deletion, wait for a create already on its way to the
                # provider to finish, so the pool's final sweep sees its device
                # (a create landing after the sweep would be an orphan).
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"create device {index + 1}/{total} (slot {slot})",
            )
            self._creates.append(create)
            result = await create
        except ActivityError as err:
            stopped = stopped_by_the_cancel(err, create, self._stopped)
            if stopped == NOT_SENT:
                # Never rented, never refused: like a slot the batch had no permit for.
                report.withdrawn.append(slot)
                return workflow.now(), NOT_SENT
            report.failed_slots[slot] = reason_of(err)
            if provider_verdict(err) is None:
                report.unanswered_slots.append(slot)
            _note_quota(report, err, slot)
            return workflow.now(), stopped or FAILED_CREATE
        report.created[slot] = result.device.id
        return workflow.now(), CREATED


def _quota_holds(report: BatchReport) -> bool:
    """A create of this batch was refused for a quota that has not reset yet."""
    quota = report.quota
    if quota is None or (quota.resets_at is not None and workflow.now() >= quota.resets_at):
        return False
    return workflow.patched(QUOTA_STOPS_BATCH_PATCH)


def _note_quota(report: BatchReport, err: ActivityError, slot: int) -> None:
    """A create refused for a used-up quota: the pool holds its creates (the last said)."""
    refusal = quota_refusal(err)
    if refusal is None:
        return
    reason, resets_at = refusal
    slots = [*(report.quota.slots if report.quota else ()), slot]
    report.quota = QuotaRefusal(
        reason=reason, message=report.failed_slots[slot], resets_at=resets_at, slots=slots
    )


def _take_a_cancel() -> None:
    """After a permit request: a cancel that came meanwhile ends the batch here, before it
    creates what the ledger did not permit (a cancelled or failed request reads as "no
    ledger": create at once). `CANCEL_AT_REQUEST_PATCH`, asked only then."""
    if workflow.cancellation_reason() is not None and workflow.patched(CANCEL_AT_REQUEST_PATCH):
        raise_if_cancelled()


def _ledger(input: ProvisionBatchInput) -> workflow.ExternalWorkflowHandle[Any]:
    return workflow.get_external_workflow_handle(ledger_workflow_id(input.account))
