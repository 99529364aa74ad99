"""A worker refuses to start on a namespace without every pool search attribute (a pool that
upserts one the namespace lacks fails its workflow task for ever); where the list cannot be
read (a Temporal Cloud API key without the operator service) it warns and starts."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesResponse
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import PoolSettings
from devicepool.api.names import SA_ROW_AT, SEARCH_ATTRIBUTES
from devicepool.worker import main as worker_main
from devicepool.worker.config import WorkerConfig
from devicepool.worker.registered import (
    SearchAttributesMissing,
    _indexed,
    check_search_attributes,
)

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


class _Operator:
    def __init__(self, answer: ListSearchAttributesResponse | RPCError) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def list_search_attributes(self, request: Any) -> ListSearchAttributesResponse:
        self.asked.append(request.namespace)
        if isinstance(self.answer, RPCError):
            raise self.answer
        return self.answer


class _Client:
    namespace = "prod"

    def __init__(self, operator: _Operator) -> None:
        self.operator_service = operator


def _registered(*names: str) -> ListSearchAttributesResponse:
    return ListSearchAttributesResponse(custom_attributes=dict.fromkeys(names, KEYWORD))


def _typed(*names: str) -> ListSearchAttributesResponse:
    """`names` registered with the types devicepool gives them."""
    return ListSearchAttributesResponse(
        custom_attributes={n: _indexed(SEARCH_ATTRIBUTES[n]) for n in names}
    )


async def test_a_namespace_without_the_row_time_is_refused_in_one_line() -> None:
    before = [name for name in SEARCH_ATTRIBUTES if name != SA_ROW_AT]  # a v0.2 namespace
    client = _Client(_Operator(_typed(*before)))
    with pytest.raises(SearchAttributesMissing) as refused:
        await check_search_attributes(client)  # type: ignore[arg-type]
    said = str(refused.value)
    assert "\n" not in said
    assert f"search attribute {SA_ROW_AT} not registered on namespace prod" in said
    assert "`devicepool setup`" in said
    assert (
        f"tcld namespace search-attributes add --namespace prod --search-attribute {SA_ROW_AT}=Datetime"
        in said
    )
    assert client.operator_service.asked == ["prod"]


async def test_every_attribute_registered_starts() -> None:
    await check_search_attributes(_Client(_Operator(_typed(*SEARCH_ATTRIBUTES))))  # type: ignore[arg-type]


async def test_a_list_not_allowed_warns_and_starts(caplog: pytest.LogCaptureFixture) -> None:
    denied = RPCError("no operator service for API keys", RPCStatusCode.PERMISSION_DENIED, b"")
    with caplog.at_level(logging.WARNING, logger="devicepool.worker"):
        await check_search_attributes(_Client(_Operator(denied)))  # type: ignore[arg-type]
    (warned,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "search attributes" in warned.getMessage()


async def test_the_worker_stops_before_anything_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the worker went on without its search attributes")

    monkeypatch.setattr(worker_main.WorkerMetrics, "create", never)
    monkeypatch.setattr(worker_main, "build_workers", never)
    client = _Client(_Operator(_registered()))
    config = WorkerConfig(accounts={}, proxy_pools={}, settings=PoolSettings())
    with pytest.raises(SearchAttributesMissing, match="DevicePoolPlatform"):
        await worker_main.run_worker(config, client, shutdown_event=asyncio.Event())  # type: ignore[arg-type]


async def test_an_attribute_of_another_type_is_refused() -> None:
    answer = _registered(*SEARCH_ATTRIBUTES)  # every one a Keyword: DevicePoolRowAt is not
    with pytest.raises(SearchAttributesMissing) as refused:
        await check_search_attributes(_Client(_Operator(answer)))  # type: ignore[arg-type]
    assert str(refused.value).startswith(
        "search attribute DevicePoolDesired is registered on namespace prod as KEYWORD, "
        "devicepool needs Int"
    )
