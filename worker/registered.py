"""Before a worker polls: every pool search attribute is registered on its namespace.

A pool that upserts an attribute the namespace lacks fails its workflow task on every retry
(the pool is stuck), so a worker refuses to start without one. A frontend that does not
answer is asked again a few times, then the worker exits; where the namespace's list may not
be read (a Temporal Cloud API key without the operator service), a one-row List call whose
query names each attribute tells instead; only where that is not allowed either, it says so
and starts. Why: docs/operations.md, 'Upgrading safely'."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    ListSearchAttributesRequest,
    ListSearchAttributesResponse,
)
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.errors import DevicePoolError
from devicepool.worker.config_values import ConfigError

__all__ = ["SearchAttributesMissing", "SearchAttributesUnchecked", "check_search_attributes"]

log = logging.getLogger("devicepool.worker")

R = TypeVar("R")
T = TypeVar("T")


class SearchAttributesMissing(ConfigError):
    """The namespace lacks a pool search attribute; `str()` is the one line that says how to
    add it."""


class SearchAttributesUnchecked(DevicePoolError):
    """The frontend did not answer whether the namespace has the pool search attributes,
    asked `len(RETRY_DELAYS) + 1` times; the worker exits (its supervisor starts it again)."""

    def __init__(self, namespace: str, err: RPCError) -> None:
        super().__init__(
            f"cannot tell whether namespace {namespace} has devicepool's search attributes: "
            f"Temporal answered {err.status.name} {len(RETRY_DELAYS) + 1} times; "
            "the worker starts once it can tell"
        )


# A frontend restarting or a slow one: asked again after each of these waits (seconds).
RETRY_DELAYS = (0.5, 1.0, 2.0)
_TRANSIENT = {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED}


async def check_search_attributes(client: Client) -> None:
    """Raise `SearchAttributesMissing` naming every pool search attribute the namespace has
    not registered; log a warning and return when neither its list nor a List call may
    tell; raise `SearchAttributesUnchecked` when the frontend does not answer."""
    namespace = client.namespace
    try:
        answer: ListSearchAttributesResponse = await _answered(
            client.operator_service.list_search_attributes,
            ListSearchAttributesRequest(namespace=namespace),
        )
    except RPCError as err:
        if err.status in _TRANSIENT:
            raise SearchAttributesUnchecked(namespace, err) from err
        await _probe(client, refused=err)
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
    _refuse_missing(namespace, [name for name in SEARCH_ATTRIBUTES if name not in known])


async def _probe(client: Client, *, refused: RPCError) -> None:
    """Without the operator service: one one-row List call a search attribute, its query
    naming it; a namespace without the attribute refuses the query (INVALID_ARGUMENT naming
    it). Only where List calls are refused too: a warning, and the worker starts."""
    namespace = client.namespace
    missing: list[str] = []
    for name in SEARCH_ATTRIBUTES:
        try:
            await _answered(
                client.workflow_service.list_workflow_executions,
                ListWorkflowExecutionsRequest(
                    namespace=namespace, page_size=1, query=f"{name} IS NULL"
                ),
            )
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT and name in (err.message or ""):
                missing.append(name)
                continue
            if err.status in _TRANSIENT:
                raise SearchAttributesUnchecked(namespace, err) from err
            log.warning(
                "cannot list the namespace's search attributes; starting without checking them",
                extra={
                    "namespace": namespace,
                    "error": refused.status.name,
                    "probe": err.status.name,
                    "needed": ", ".join(SEARCH_ATTRIBUTES),
                },
            )
            return
    _refuse_missing(namespace, missing)


def _refuse_missing(namespace: str, missing: list[str]) -> None:
    if missing:
        pairs = " ".join(f"--search-attribute {n}={SEARCH_ATTRIBUTES[n]}" for n in missing)
        raise SearchAttributesMissing(
            f"search attribute{'s' if len(missing) > 1 else ''} {', '.join(missing)} not "
            f"registered on namespace {namespace}: "
            f"pools would be stuck; run `devicepool setup` (Temporal Cloud: "
            f"`tcld namespace search-attributes add --namespace {namespace} {pairs}`)"
        )


async def _answered(call: Callable[[R], Awaitable[T]], request: R) -> T:
    """`call(request)`'s answer, asked again after each of `RETRY_DELAYS` while the
    frontend does not answer (UNAVAILABLE, DEADLINE_EXCEEDED); then its error."""
    for delay in RETRY_DELAYS:
        try:
            return await call(request)
        except RPCError as err:
            if err.status not in _TRANSIENT:
                raise
        await asyncio.sleep(delay)
    return await call(request)


def _indexed(type_name: str) -> IndexedValueType.ValueType:
    """ "Datetime" (as `SEARCH_ATTRIBUTES` spells it) as the API's INDEXED_VALUE_TYPE_DATETIME."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", type_name).upper()
    return IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{snake}")
