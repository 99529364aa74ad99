"""Before a worker polls: every pool search attribute is registered on its namespace.

A pool that upserts an attribute the namespace lacks fails its workflow task on every retry
(the pool is stuck), so a worker refuses to start without one; where the namespace's list
cannot be read (a Temporal Cloud API key without the operator service), it says so and
starts. Why: docs/operations.md, 'Upgrading safely'."""

from __future__ import annotations

import logging
import re

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.worker.config_values import ConfigError

__all__ = ["SearchAttributesMissing", "check_search_attributes"]

log = logging.getLogger("devicepool.worker")


class SearchAttributesMissing(ConfigError):
    """The namespace lacks a pool search attribute; `str()` is the one line that says how to
    add it."""


async def check_search_attributes(client: Client) -> None:
    """Raise `SearchAttributesMissing` naming every pool search attribute the namespace has
    not registered; log a warning and return when the list cannot be read."""
    namespace = client.namespace
    try:
        answer = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
    except RPCError as err:
        log.warning(
            "cannot list the namespace's search attributes; starting without checking them",
            extra={
                "namespace": namespace,
                "error": err.status.name,
                "needed": ", ".join(SEARCH_ATTRIBUTES),
            },
        )
        return
    known = {**answer.system_attributes, **answer.custom_attributes}
    for name, wanted in SEARCH_ATTRIBUTES.items():
        have = known.get(name)
        if have is not None and have != _indexed(wanted):
            said = IndexedValueType.Name(have).removeprefix("INDEXED_VALUE_TYPE_")
            raise SearchAttributesMissing(
                f"search attribute {name} is registered on namespace {namespace} as {said}, "
                f"devicepool needs {wanted}: pools would be stuck"
            )
    missing = [name for name in SEARCH_ATTRIBUTES if name not in known]
    if missing:
        pairs = " ".join(f"--search-attribute {n}={SEARCH_ATTRIBUTES[n]}" for n in missing)
        raise SearchAttributesMissing(
            f"search attribute{'s' if len(missing) > 1 else ''} {', '.join(missing)} not "
            f"registered on namespace {namespace}: "
            f"pools would be stuck; run `devicepool setup` (Temporal Cloud: "
            f"`tcld namespace search-attributes add --namespace {namespace} {pairs}`)"
        )


def _indexed(type_name: str) -> IndexedValueType.ValueType:
    """ "Datetime" (as `SEARCH_ATTRIBUTES` spells it) as the API's INDEXED_VALUE_TYPE_DATETIME."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", type_name).upper()
    return IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{snake}")
