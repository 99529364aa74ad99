"""What a workflow may know of the activities: names, inputs and results, no I/O.

Workflows schedule activities through these definitions, so what passes through
the sandbox never imports httpx or prometheus_client. `devices.DeviceActivities`
implements each under the same name; the worker registers it, never this class.
"""

from __future__ import annotations

import abc
from datetime import timedelta

from temporalio import activity

from devicepool.activities import connect_models as cm
from devicepool.activities import models as am
from devicepool.activities import orphan_models as om

__all__ = [
    "CREATE_START_TO_CLOSE_TIMEOUT",
    "LEDGER_HOLD",
    "DeviceActivityDefinitions",
    "OrphanActivityDefinitions",
]

# The ledger's sub-second pause (a local activity, `activities.ledger_calls.ledger_hold`).
LEDGER_HOLD = "ledger_hold"

# How long one `create_device` attempt may run (workflows/provision/workflow.py). An
# account's HTTP timeout (`timeoutSeconds`) must be below it, or every attempt
# times out before its call can answer; the worker's config refuses one that is not.
CREATE_START_TO_CLOSE_TIMEOUT = timedelta(seconds=20)


class DeviceActivityDefinitions(abc.ABC):
    """The device activities as workflows call them (implemented by `DeviceActivities`)."""

    @activity.defn
    @abc.abstractmethod
    async def pool_settings(self) -> am.PoolSettings: ...

    @activity.defn
    @abc.abstractmethod
    async def check_pool_refs(self, input: am.CheckRefsInput) -> am.CheckRefsResult: ...

    @activity.defn
    @abc.abstractmethod
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult: ...

    @activity.defn
    @abc.abstractmethod
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult: ...

    @activity.defn
    @abc.abstractmethod
    async def watch_health(self, input: am.WatchHealthInput) -> am.WatchHealthResult:
        """The health check's long poll: returns when its suspects change, at `until`, or when the pool is gone."""

    @activity.defn
    @abc.abstractmethod
    async def create_device(self, input: am.CreateDeviceInput) -> am.CreateDeviceResult: ...

    @activity.defn
    @abc.abstractmethod
    async def get_statuses(self, input: am.GetStatusesInput) -> am.GetStatusesResult: ...

    @activity.defn
    @abc.abstractmethod
    async def terminate_device(
        self, input: am.TerminateDeviceInput
    ) -> am.TerminateDeviceResult: ...

    @activity.defn
    @abc.abstractmethod
    async def region_status(self, input: am.RegionStatusInput) -> am.RegionStatusResult: ...

    @activity.defn
    @abc.abstractmethod
    async def lease_connect(self, input: cm.LeaseConnectInput) -> cm.ConnectInfo:
        """A leased device's connect info (ADB), read now; secret-bearing."""

    @activity.defn
    @abc.abstractmethod
    async def reset_device(self, input: am.ResetDeviceInput) -> am.ResetDeviceResult:
        """A used device cleared for its next holder (`onRelease: reset`), or why not."""

    @activity.defn
    @abc.abstractmethod
    async def terminate_pool(self, input: am.TerminatePoolInput) -> am.TerminatePoolResult: ...

    @activity.defn
    @abc.abstractmethod
    async def running_workflows(
        self, input: am.RunningWorkflowsInput
    ) -> am.RunningWorkflowsResult: ...

    # ------------------------------------------------ asks Temporal, not the provider

    @activity.defn
    @abc.abstractmethod
    async def pool_running(self, input: am.PoolRunInput) -> am.PoolRunResult:
        """Is the pool that started a health check still running (`activities.pool_runs`)?"""


class OrphanActivityDefinitions(abc.ABC):
    """The orphan sweep's activities as workflows call them (implemented by `OrphanActivities`)."""

    @activity.defn
    @abc.abstractmethod
    async def find_orphans(self, input: om.FindOrphansInput) -> om.FindOrphansResult: ...

    @activity.defn
    @abc.abstractmethod
    async def terminate_orphans(
        self, input: om.TerminateOrphansInput
    ) -> om.TerminateOrphansResult: ...

    @activity.defn
    @abc.abstractmethod
    async def count_devices(self, input: om.CountDevicesInput) -> om.CountDevicesResult:
        """How many of the account's managed devices bill now (its ledger's `spendCap` count)."""
