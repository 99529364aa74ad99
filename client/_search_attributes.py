"""The client's side of a pool's search attributes: set at start, read when no worker answers.

The keys are `workflows.search_attributes` (defined once, for the workflow that
upserts them too). A pool starts with them so that the Web UI's workflow list
shows it before its first workflow task; `get` falls back to them, marked
stale, when no worker answers its queries.
"""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributePair, TypedSearchAttributes

from devicepool.api.v1beta1 import DevicePoolSpec, Phase
from devicepool.client._results import PoolSummary
from devicepool.workflows.reconciler.search_attributes import (
    KEY_ACCOUNT,
    KEY_DESIRED,
    KEY_PHASE,
    KEY_PLATFORM,
    KEY_READY,
    KEY_REGION,
)


def initial_search_attributes(spec: DevicePoolSpec) -> TypedSearchAttributes:
    """What a pool workflow starts with: its spec's attributes, nothing ready, phase Pending."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(KEY_PLATFORM, spec.platform.value),
            SearchAttributePair(KEY_REGION, spec.region),
            SearchAttributePair(KEY_DESIRED, spec.replicas),
            SearchAttributePair(KEY_READY, 0),
            SearchAttributePair(KEY_PHASE, Phase.PENDING.value),
            SearchAttributePair(KEY_ACCOUNT, spec.account),
        ]
    )


def stale_summary(name: str, execution: Any) -> PoolSummary:
    """A `PoolSummary` from a listed or described execution's attributes (`stale=True`)."""
    attrs: TypedSearchAttributes = execution.typed_search_attributes
    spec: dict[str, Any] = {
        "platform": attrs.get(KEY_PLATFORM),
        "region": attrs.get(KEY_REGION),
        "replicas": attrs.get(KEY_DESIRED),
    }
    if attrs.get(KEY_ACCOUNT) is not None:
        spec["provider"] = {"account": attrs.get(KEY_ACCOUNT)}
    status = {
        "phase": attrs.get(KEY_PHASE),
        "desiredReplicas": attrs.get(KEY_DESIRED),
        "readyDevices": attrs.get(KEY_READY),
    }
    return PoolSummary(
        name=name,
        spec={k: v for k, v in spec.items() if v is not None},
        status={k: v for k, v in status.items() if v is not None},
        created=execution.start_time,
        stale=True,
    )
