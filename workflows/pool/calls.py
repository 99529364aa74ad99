"""The activities a pool schedules, with their timeouts and retries, as plain calls.
Provider calls heartbeat, so an attempt lost with a killed worker is retried within seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from devicepool.activities import connect_models as cm
from devicepool.activities import models as am
from devicepool.activities.definitions import DeviceActivityDefinitions as Activities
from devicepool.api.names import pool_name_from_workflow_id
from devicepool.workflows.shared.errors import PROVIDER_RETRY, error_message
from devicepool.workflows.shared.heartbeats import settled, watch_heartbeat_timeout_of_run
from devicepool.workflows.shared.placement import Route

__all__ = [
    "Terminations",
    "check_refs",
    "lease_connect",
    "list_devices",
    "read_settings",
    "region_status",
    "reset_devices",
    "running_workflows",
    "terminate_devices",
    "watch_devices",
]


async def read_settings() -> am.PoolSettings:
    return await workflow.execute_activity_method(
        Activities.pool_settings,
        start_to_close_timeout=timedelta(seconds=10),
        retry_policy=PROVIDER_RETRY,
        summary="read the worker's intervals",
    )


async def check_refs(
    route: Route, proxy_pool: str | None, region: str, platform: str | None = None
) -> list[str]:
    """Problems with the pool's account, proxy pool, region and platform (the worker's
    config and what the account's provider offers)."""
    result = await workflow.execute_activity_method(
        Activities.check_pool_refs,
        am.CheckRefsInput(
            account=route.account, proxy_pool=proxy_pool, region=region, platform=platform
        ),
        start_to_close_timeout=timedelta(seconds=10),
        retry_policy=PROVIDER_RETRY,
        summary="check account, proxy pool and region",
        **route.provider(),
    )
    return result.problems


async def list_devices(route: Route, pool: str) -> list[am.DeviceInfo]:
    result = await workflow.execute_activity_method(
        Activities.list_devices,
        am.ListDevicesInput(
            account=route.account, pool=pool, compact=True, fold_template_hash=True
        ),
        start_to_close_timeout=timedelta(seconds=60),
        heartbeat_timeout=am.HEARTBEAT_TIMEOUT,
        schedule_to_close_timeout=timedelta(minutes=5),
        retry_policy=PROVIDER_RETRY,
        summary="observe devices",
        **route.provider(),
    )
    return result.listing(pool)


async def region_status(route: Route, region: str) -> str:
    result = await workflow.execute_activity_method(
        Activities.region_status,
        am.RegionStatusInput(account=route.account, region=region),
        start_to_close_timeout=timedelta(seconds=30),
        schedule_to_close_timeout=timedelta(minutes=2),
        retry_policy=PROVIDER_RETRY,
        summary=f"probe region {region}",
        **route.provider(),
    )
    return result.status


async def running_workflows(workflow_ids: list[str]) -> list[str]:
    """Which of these workflows (the pool's batches) still run, says Temporal."""
    result = await workflow.execute_activity_method(
        Activities.running_workflows,
        am.RunningWorkflowsInput(workflow_ids=workflow_ids),
        start_to_close_timeout=timedelta(seconds=30),
        schedule_to_close_timeout=timedelta(minutes=2),
        retry_policy=PROVIDER_RETRY,
        summary=f"are {len(workflow_ids)} batch(es) still running?",
    )
    return result.running


# A `lease_connect` update waits for this (a handler is one of 10 in flight per workflow):
# two turns of a cloud phone's 1-a-second budget, shared with the account's other pools.
CONNECT_CALL = timedelta(seconds=20)
CONNECT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)


async def lease_connect(route: Route, pool: str, device: str) -> cm.ConnectInfo:
    """A leased device's connect info (its ADB login), read from the provider now."""
    return await workflow.execute_activity_method(
        Activities.lease_connect,
        cm.LeaseConnectInput(account=route.account, pool=pool, device=device),
        start_to_close_timeout=CONNECT_CALL,
        schedule_to_close_timeout=2 * CONNECT_CALL,
        retry_policy=CONNECT_RETRY,
        summary=f"connect info of {device}",
        **route.provider(),
    )


async def reset_devices(
    route: Route, pool: str, device_ids: list[str]
) -> dict[str, am.ResetDeviceResult | str]:
    """Reset these used devices in parallel (`onRelease: reset`): device -> the answer, or
    the error its reset failed with (tried again on a later pass)."""

    async def one(device_id: str) -> am.ResetDeviceResult:
        return await workflow.execute_activity_method(
            Activities.reset_device,
            am.ResetDeviceInput(account=route.account, pool=pool, device_id=device_id),
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=am.HEARTBEAT_TIMEOUT,
            schedule_to_close_timeout=timedelta(minutes=2),
            retry_policy=PROVIDER_RETRY,
            summary=f"reset {device_id}",
            **route.provider(),
        )

    results = await asyncio.gather(*(one(d) for d in device_ids), return_exceptions=True)
    done: dict[str, am.ResetDeviceResult | str] = {}
    for device_id, result in zip(device_ids, results, strict=True):
        if isinstance(result, ActivityError):
            done[device_id] = error_message(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            done[device_id] = result
    return done


@dataclass
class Terminations:
    # device id -> the error its termination failed with (the pool tries again)
    failed: dict[str, ActivityError] = field(default_factory=dict)
    # device id -> why it was kept (a scale-down found it busy at the provider)
    skipped: dict[str, str] = field(default_factory=dict)


async def terminate_devices(
    route: Route,
    device_ids: list[str],
    *,
    only_if_idle: set[str] | frozenset[str] = frozenset(),
    idle_since: Mapping[str, datetime] | None = None,
    reserve_keep: int | None = None,
    used: set[str] | frozenset[str] = frozenset(),
    retiring: set[str] | frozenset[str] = frozenset(),
) -> Terminations:
    """Terminate these devices in parallel; those in `only_if_idle` only if still idle
    (and not used since `idle_since`, what the plan's listing showed); those in `used`
    served a lease and go unreset (`TerminateDeviceInput.used`); those in `retiring` are
    retired, not scaled down (`TerminateDeviceInput.retiring`)."""

    async def one(device_id: str) -> am.TerminateDeviceResult:
        return await workflow.execute_activity_method(
            Activities.terminate_device,
            am.TerminateDeviceInput(
                account=route.account,
                device_id=device_id,
                # Whose it is: an account's shared request budget takes turns by pool.
                pool=pool_name_from_workflow_id(workflow.info().workflow_id),
                only_if_idle=device_id in only_if_idle,
                idle_since=(idle_since or {}).get(device_id) if device_id in only_if_idle else None,
                reserve_keep=reserve_keep,
                used=device_id in used,
                # An activity's input only: a replay compares its type and id, not this.
                retiring=device_id in retiring,
            ),
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=am.HEARTBEAT_TIMEOUT,
            schedule_to_close_timeout=timedelta(minutes=5),
            retry_policy=PROVIDER_RETRY,
            summary=f"terminate {device_id}",
            **route.provider(),
        )

    results = await asyncio.gather(*(one(d) for d in device_ids), return_exceptions=True)
    done = Terminations()
    for device_id, result in zip(device_ids, results, strict=True):
        if isinstance(result, ActivityError):
            done.failed[device_id] = result
        elif isinstance(result, BaseException):
            raise result
        elif result.skipped:
            done.skipped[device_id] = result.skipped
    return done


async def watch_devices(
    route: Route,
    pool: str,
    devices: list[am.DeviceInfo],
    settings: am.PoolSettings,
    *,
    health_workflow_id: str | None = None,
) -> am.WatchDevicesResult:
    """Returns when the pool's devices differ from `devices` (the answer's `devices` filled
    in), after `watch_max_seconds`, or when `health_workflow_id` no longer runs. On a watch
    queue: docs/scaling.md, 'What one worker carries'; none of `devices` in motion: a long
    heartbeat timeout, 'Heartbeats'."""
    result = await workflow.execute_activity_method(
        Activities.watch_devices,
        am.WatchDevicesInput(
            account=route.account,
            pool=pool,
            fingerprint=am.device_fingerprint(devices),
            poll_seconds=settings.resync_seconds,
            max_seconds=settings.watch_max_seconds,
            compact=True,
            fold_template_hash=True,
            health_workflow_id=health_workflow_id,
            health_every_seconds=settings.health_liveness_seconds,
        ),
        start_to_close_timeout=timedelta(seconds=settings.watch_max_seconds + 120),
        heartbeat_timeout=watch_heartbeat_timeout_of_run(
            settings.resync_seconds, quiet=settled(devices)
        ),
        retry_policy=PROVIDER_RETRY,
        summary="watch for changes",
        **route.watch(workflow.info().task_queue),
    )
    if result.rows:
        result = result.model_copy(update={"devices": result.listing(pool), "rows": []})
    return result
