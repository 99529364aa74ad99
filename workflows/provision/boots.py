"""A batch's wait for its devices to boot: `get_statuses` every `poll_seconds` until each
created device is ready, failed, removed or offline, or the startup timeout ran out.
Workflow code (it runs activities), called by `ProvisionBatchWorkflow`."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.models import (
        BUSY,
        FAILED,
        HEARTBEAT_TIMEOUT,
        OFFLINE,
        READY,
        TERMINATED,
        TERMINATING,
        GetStatusesInput,
    )
    from devicepool.workflows.shared.errors import PROVIDER_RETRY, raise_if_cancelled
    from devicepool.workflows.shared.placement import Route
    from devicepool.workflows.shared.protocol import BatchReport, ProvisionBatchInput


async def wait_until_booted(input: ProvisionBatchInput, report: BatchReport) -> None:
    """Poll the batch's created devices until each is ready, failed, gone or offline, or the
    startup timeout ran out (then failed): what the report says of each."""
    pending = set(report.created.values())
    deadline = workflow.now() + timedelta(seconds=input.startup_timeout_seconds)
    while pending:
        raise_if_cancelled()
        remaining = (deadline - workflow.now()).total_seconds()
        if remaining <= 0:
            break
        await workflow.sleep(
            min(input.poll_seconds, remaining), summary=f"wait for {len(pending)} to boot"
        )
        ids = sorted(pending)
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            try:
                statuses = await workflow.execute_activity_method(
                    DeviceActivityDefinitions.get_statuses,
                    GetStatusesInput(account=input.account, ids=chunk, pool=input.pool),
                    start_to_close_timeout=timedelta(seconds=30),
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=PROVIDER_RETRY,
                    summary=f"status of {len(chunk)} booting devices",
                    **Route(input.account, input.node).provider(),
                )
            except ActivityError as err:
                # Only a node worker that took no call fails a read (the others
                # retry for ever): read again at the next poll, until the deadline.
                raise_if_cancelled()
                if not input.node or workflow.cancellation_reason() is not None:
                    raise
                workflow.logger.warning("pool %s: boot check failed: %s", input.pool, err)
                break
            for item in statuses.items:
                if item.status in (READY, BUSY):
                    pending.discard(item.id)
                    report.ready.append(item.id)
                elif item.status == FAILED:
                    pending.discard(item.id)
                    report.failed_devices[item.id] = item.reason or item.status
                elif item.status in (TERMINATING, TERMINATED):
                    # Removed, not broken: no verdict on the region.
                    pending.discard(item.id)
                    report.vanished_devices[item.id] = item.reason or item.status
                elif item.status == OFFLINE:
                    # Unreachable, not a failed boot: the health check judges
                    # it (offline clock; a pause when a whole region is out).
                    pending.discard(item.id)
                    report.offline_devices[item.id] = item.reason or item.status
            for missing in statuses.not_found:
                pending.discard(missing)
                report.vanished_devices[missing] = "not found at the provider"
    for device_id in sorted(pending):
        report.failed_devices[device_id] = (
            f"not ready after the startup timeout ({input.startup_timeout_seconds:g}s)"
        )
