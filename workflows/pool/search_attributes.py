"""A DevicePool's search attributes, by name; the keys every kind shares, and the upsert of
what changed, are the shell's (`workflows/reconciler/search_attributes.py`)."""

from __future__ import annotations

from devicepool.api.names import SA_ACCOUNT, SA_DESIRED, SA_PHASE, SA_PLATFORM, SA_READY, SA_REGION
from devicepool.api.v1beta1 import DevicePoolSpec, DevicePoolStatus


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
