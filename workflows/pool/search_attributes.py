"""A DevicePool's search attributes, by name; the keys every kind shares, and the upsert of
what changed, are the shell's (`workflows/reconciler/search_attributes.py`)."""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeUpdate, TypedSearchAttributes

from devicepool.api.names import SA_ACCOUNT, SA_DESIRED, SA_PHASE, SA_PLATFORM, SA_READY, SA_REGION
from devicepool.api.v1beta1 import DevicePoolSpec, DevicePoolStatus
from devicepool.workflows.reconciler.search_attributes import (
    ALL_KEYS,
    KEY_ACCOUNT,
    KEY_DESIRED,
    KEY_PHASE,
    KEY_PLATFORM,
    KEY_READY,
    KEY_REGION,
    search_attribute_keys,
    updates,
)

__all__ = [
    "ALL_KEYS",
    "KEY_ACCOUNT",
    "KEY_DESIRED",
    "KEY_PHASE",
    "KEY_PLATFORM",
    "KEY_READY",
    "KEY_REGION",
    "search_attribute_keys",
    "search_attribute_updates",
    "wanted",
]


def wanted(spec: DevicePoolSpec, status: DevicePoolStatus) -> dict[str, str | int]:
    """A DevicePool's search attributes, by name."""
    return {
        SA_PLATFORM: spec.platform.value,
        SA_REGION: spec.region,
        SA_ACCOUNT: spec.account,
        SA_PHASE: status.phase.value,
        SA_DESIRED: spec.replicas,
        SA_READY: status.ready_devices + status.busy_devices,
    }


def search_attribute_updates(
    spec: DevicePoolSpec, status: DevicePoolStatus, current: TypedSearchAttributes
) -> list[SearchAttributeUpdate[Any]]:
    """Only what differs from the workflow's current search attributes."""
    return updates(wanted(spec, status), current)
