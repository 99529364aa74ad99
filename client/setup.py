"""`devicepool setup`: register the pool search attributes on a self-hosted Temporal cluster.

Idempotent, through the operator service (the dev stack registers its own; Temporal Cloud's:
`tcld`, docs/operations.md, 'Temporal')."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.client.errors import DevicePoolError, TemporalUnreachable
from devicepool.workflows.reconciler.search_attributes import search_attribute_keys

__all__ = ["register_search_attributes", "search_attribute_keys"]

_TYPES: dict[str, IndexedValueType.ValueType] = {
    "Text": IndexedValueType.INDEXED_VALUE_TYPE_TEXT,
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "Double": IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "Datetime": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
    "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


async def register_search_attributes(client: Client) -> tuple[list[str], list[str]]:
    """(added, already present); a name registered with another type is an error."""
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        known = dict(existing.custom_attributes)
        missing: dict[str, IndexedValueType.ValueType] = {}
        present: list[str] = []
        for name, type_name in SEARCH_ATTRIBUTES.items():
            wanted = _TYPES[type_name]
            if name not in known:
                missing[name] = wanted
            elif known[name] != wanted:
                have = _type_name(known[name])
                raise DevicePoolError(
                    f"search attribute {name} exists with type {have}, devicepool needs {type_name}"
                )
            else:
                present.append(name)
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
            )
    except RPCError as err:
        if err.status.name == "UNAVAILABLE":
            raise TemporalUnreachable(str(client.service_client.config.target_host)) from err
        raise DevicePoolError(f"Temporal: {err.message.splitlines()[0]}") from err
    return sorted(missing), present


def _type_name(value: IndexedValueType.ValueType) -> str:
    """The type as `SEARCH_ATTRIBUTES` and the README spell it ("Int", not "INT")."""
    for type_name, known in _TYPES.items():
        if known == value:
            return type_name
    return IndexedValueType.Name(value).removeprefix("INDEXED_VALUE_TYPE_")
