"""`ProvisionBatch`: the child workflow that rents one batch of devices for a pool.

Messages: none received; when it ends (completed, failed or cancelled) it sends
its parent pool the signal `batch_done` with a `BatchReport`.

Continue-as-new: never; a batch is short (≤ one startup timeout plus the
creates' own retry budget).

Why a child: the pool's own history stays small and each batch's creates,
retries and boot polling are readable on their own in the Web UI. The parent
starts it with `ParentClosePolicy.ABANDON`, so a parent's continue-as-new does
not terminate a batch halfway; the report reaches whichever run of the pool is
current, because signals address the workflow id.

Every create carries the deterministic idempotency key (pool, generation,
slot): an activity retry, a replay or a worker crash re-sends the same key and
the provider answers with the device it already made.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.devices import DeviceActivities
    from activities.models import (
        BUSY,
        FAILED,
        READY,
        TERMINATED,
        TERMINATING,
        CreateDeviceInput,
        GetStatusesInput,
    )
    from api.errors import ErrorType
    from api.names import (
        LABEL_SLOT,
        SIGNAL_BATCH_DONE,
        WORKFLOW_PROVISION_BATCH,
        account_task_queue,
        create_idempotency_key,
    )
    from workflows.messages import BatchReport, ProvisionBatchInput

# A create that fails with one of these will not succeed by trying again.
CREATE_NON_RETRYABLE = [
    ErrorType.INVALID_ARGUMENT,
    ErrorType.UNAUTHENTICATED,
    ErrorType.QUOTA_EXCEEDED,
    ErrorType.NOT_FOUND,
    ErrorType.INVALID_STATE,
    ErrorType.IDEMPOTENCY_KEY_REUSED,
    ErrorType.UNKNOWN_ACCOUNT,
    ErrorType.UNKNOWN_PROXY_POOL,
    ErrorType.REGION_UNAVAILABLE,
]

CREATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=[t.value for t in CREATE_NON_RETRYABLE],
)

STATUS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)


@workflow.defn(name=WORKFLOW_PROVISION_BATCH)
class ProvisionBatchWorkflow:
    def __init__(self) -> None:
        self._report: BatchReport | None = None

    @workflow.run
    async def run(self, input: ProvisionBatchInput) -> BatchReport:
        report = BatchReport(workflow_id=workflow.info().workflow_id, slots=list(input.slots))
        self._report = report
        try:
            await self._create_all(input, report)
            await self._wait_until_booted(input, report)
        except asyncio.CancelledError:
            report.cancelled = True
            await self._tell_parent(input, report)
            raise
        await self._tell_parent(input, report)
        return report

    @workflow.query(name="report")
    def report(self) -> BatchReport | None:
        return self._report

    async def _create_all(self, input: ProvisionBatchInput, report: BatchReport) -> None:
        total = len(input.slots)

        async def create(index: int, slot: int) -> None:
            try:
                result = await workflow.execute_activity_method(
                    DeviceActivities.create_device,
                    CreateDeviceInput(
                        account=input.account,
                        pool=input.pool,
                        platform=input.platform,
                        region=input.region,
                        os_version=input.os_version,
                        name=f"{input.pool}-{slot}",
                        idempotency_key=create_idempotency_key(input.pool, input.generation, slot),
                        proxy_pool=input.proxy_pool,
                        sticky_ttl=input.sticky_ttl,
                        extra_labels={LABEL_SLOT: str(slot)},
                    ),
                    task_queue=account_task_queue(input.account),
                    start_to_close_timeout=timedelta(seconds=30),
                    # The whole budget for one create, 429 waits included.
                    schedule_to_close_timeout=timedelta(seconds=input.startup_timeout_seconds),
                    retry_policy=CREATE_RETRY,
                    summary=f"create device {index + 1}/{total} (slot {slot})",
                )
            except ActivityError as err:
                report.failed_slots[slot] = _reason(err)
                return
            report.created[slot] = result.device.id

        await asyncio.gather(*(create(i, slot) for i, slot in enumerate(input.slots)))

    async def _wait_until_booted(self, input: ProvisionBatchInput, report: BatchReport) -> None:
        pending = set(report.created.values())
        deadline = workflow.now() + timedelta(seconds=input.startup_timeout_seconds)
        while pending:
            remaining = (deadline - workflow.now()).total_seconds()
            if remaining <= 0:
                break
            await workflow.sleep(
                min(input.poll_seconds, remaining), summary=f"wait for {len(pending)} to boot"
            )
            ids = sorted(pending)
            for start in range(0, len(ids), 100):
                statuses = await workflow.execute_activity_method(
                    DeviceActivities.get_statuses,
                    GetStatusesInput(account=input.account, ids=ids[start : start + 100]),
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=STATUS_RETRY,
                    summary=f"status of {len(ids[start : start + 100])} booting devices",
                )
                for item in statuses.items:
                    if item.status in (READY, BUSY):
                        pending.discard(item.id)
                        report.ready.append(item.id)
                    elif item.status in (FAILED, TERMINATING, TERMINATED):
                        pending.discard(item.id)
                        report.failed_devices[item.id] = item.reason or item.status
                for missing in statuses.not_found:
                    pending.discard(missing)
                    report.failed_devices[missing] = "not found at the provider"
        for device_id in sorted(pending):
            report.failed_devices[device_id] = (
                f"not ready after the startup timeout ({input.startup_timeout_seconds:g}s)"
            )

    async def _tell_parent(self, input: ProvisionBatchInput, report: BatchReport) -> None:
        try:
            await workflow.get_external_workflow_handle(input.parent_workflow_id).signal(
                SIGNAL_BATCH_DONE, report
            )
        except FailureError as err:
            # The pool is gone (deleted and finished): nobody to tell.
            workflow.logger.info("pool %s did not take the report: %s", input.pool, err)


def _reason(err: ActivityError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}" if cause.type else cause.message
    return str(cause or err)
