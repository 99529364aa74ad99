"""The pool's search attributes as typed SDK keys, defined once.

The names and Temporal types are in `api.names.SEARCH_ATTRIBUTES` (the deploy
files register exactly those); here they become `SearchAttributeKey`s for the
workflow that upserts them, the client that lists pools by them and the test
environments that register them.
"""

from __future__ import annotations

from typing import Any

from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

from devicepool.api.names import (
    SA_ACCOUNT,
    SA_DESIRED,
    SA_PHASE,
    SA_PLATFORM,
    SA_READY,
    SA_REGION,
)
from devicepool.api.v1beta1 import DevicePoolSpec, DevicePoolStatus

KEY_PLATFORM = SearchAttributeKey.for_keyword(SA_PLATFORM)
KEY_REGION = SearchAttributeKey.for_keyword(SA_REGION)
KEY_ACCOUNT = SearchAttributeKey.for_keyword(SA_ACCOUNT)
KEY_PHASE = SearchAttributeKey.for_keyword(SA_PHASE)
KEY_DESIRED = SearchAttributeKey.for_int(SA_DESIRED)
KEY_READY = SearchAttributeKey.for_int(SA_READY)

ALL_KEYS: tuple[SearchAttributeKey[Any], ...] = (
    KEY_PLATFORM,
    KEY_REGION,
    KEY_DESIRED,
    KEY_READY,
    KEY_PHASE,
    KEY_ACCOUNT,
)


def search_attribute_keys() -> list[SearchAttributeKey[Any]]:
    """Every pool search attribute as an SDK key (e.g. for `WorkflowEnvironment.start_local`)."""
    return list(ALL_KEYS)


def search_attribute_updates(
    spec: DevicePoolSpec, status: DevicePoolStatus, current: TypedSearchAttributes
) -> list[SearchAttributeUpdate[Any]]:
    """Only what differs from the workflow's current search attributes."""
    wanted: list[SearchAttributePair[Any]] = [
        SearchAttributePair(KEY_PLATFORM, spec.platform.value),
        SearchAttributePair(KEY_REGION, spec.region),
        SearchAttributePair(KEY_ACCOUNT, spec.account),
        SearchAttributePair(KEY_PHASE, status.phase.value),
        SearchAttributePair(KEY_DESIRED, spec.replicas),
        SearchAttributePair(KEY_READY, status.ready_devices + status.busy_devices),
    ]
    return [
        pair.key.value_set(pair.value) for pair in wanted if current.get(pair.key) != pair.value
    ]
