"""The pools' search attributes as typed SDK keys (names and types: `api.names`), and what
to upsert."""

from __future__ import annotations

from collections.abc import Mapping
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
    SA_ROW_AT,
)

KEY_PLATFORM = SearchAttributeKey.for_keyword(SA_PLATFORM)
KEY_REGION = SearchAttributeKey.for_keyword(SA_REGION)
KEY_ACCOUNT = SearchAttributeKey.for_keyword(SA_ACCOUNT)
KEY_PHASE = SearchAttributeKey.for_keyword(SA_PHASE)
KEY_DESIRED = SearchAttributeKey.for_int(SA_DESIRED)
KEY_READY = SearchAttributeKey.for_int(SA_READY)
# Written with the memo row, not by `updates` (its value is the time of the write).
KEY_ROW_AT = SearchAttributeKey.for_datetime(SA_ROW_AT)

ALL_KEYS: tuple[SearchAttributeKey[Any], ...] = (
    KEY_PLATFORM,
    KEY_REGION,
    KEY_DESIRED,
    KEY_READY,
    KEY_PHASE,
    KEY_ACCOUNT,
    KEY_ROW_AT,
)


def search_attribute_keys() -> list[SearchAttributeKey[Any]]:
    """Every pool search attribute as an SDK key (e.g. for `WorkflowEnvironment.start_local`)."""
    return list(ALL_KEYS)


KEYS: dict[str, SearchAttributeKey[Any]] = {key.name: key for key in ALL_KEYS}


def updates(
    wanted: Mapping[str, str | int], current: TypedSearchAttributes
) -> list[SearchAttributeUpdate[Any]]:
    """Of `wanted` (search attribute name → value), only what differs from `current`."""
    pairs = [SearchAttributePair(KEYS[name], value) for name, value in wanted.items()]
    return [pair.key.value_set(pair.value) for pair in pairs if current.get(pair.key) != pair.value]
