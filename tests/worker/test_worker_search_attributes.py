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
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsResponse
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import PoolSettings
from devicepool.api.names import SA_ROW_AT, SEARCH_ATTRIBUTES
from devicepool.worker import main as worker_main
from devicepool.worker import registered
from devicepool.worker.config import WorkerConfig
from devicepool.worker.registered import (
    SearchAttributesMissing,
    SearchAttributesUnchecked,
    _indexed,
    check_search_attributes,
)

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


class _Operator:
    """ListSearchAttributes answering `answers` in turn (the last one from then on)."""

    def __init__(self, *answers: ListSearchAttributesResponse | RPCError) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def list_search_attributes(self, request: Any) -> ListSearchAttributesResponse:
        self.asked.append(request.namespace)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, RPCError):
            raise answer
        return answer


class _Visibility:
    """ListWorkflowExecutions as a namespace with `known` registered answers it (None: the
    call is not allowed either)."""

    def __init__(self, known: set[str] | None) -> None:
        self.known = known
        self.queries: list[str] = []

    async def list_workflow_executions(self, request: Any) -> ListWorkflowExecutionsResponse:
        self.queries.append(request.query)
        assert request.page_size == 1
        if self.known is None:
            raise RPCError("not allowed", RPCStatusCode.PERMISSION_DENIED, b"")
        for name in SEARCH_ATTRIBUTES:
            if name in request.query and name not in self.known:
                raise RPCError(
                    f"invalid query: unable to convert left side of '{name} IS NULL': "
                    f"invalid search attribute: {name}",
                    RPCStatusCode.INVALID_ARGUMENT,
                    b"",
                )
        return ListWorkflowExecutionsResponse()


class _Client:
    namespace = "prod"

    def __init__(self, operator: _Operator, visibility: _Visibility | None = None) -> None:
        self.operator_service = operator
        self.workflow_service = visibility or _Visibility(None)


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registered, "RETRY_DELAYS", (0.0, 0.0, 0.0))


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


DENIED = RPCError("no operator service for API keys", RPCStatusCode.PERMISSION_DENIED, b"")
UNAVAILABLE = RPCError("frontend restarting", RPCStatusCode.UNAVAILABLE, b"")


async def test_a_list_not_allowed_is_probed_by_a_query_and_refused() -> None:
    """Temporal Cloud with an API key: the operator service refused, a one-row List call
    whose query names the attribute tells the namespace lacks it."""
    before = {name for name in SEARCH_ATTRIBUTES if name != SA_ROW_AT}
    for refused_how in (DENIED, RPCError("", RPCStatusCode.UNIMPLEMENTED, b"")):
        visibility = _Visibility(before)
        client = _Client(_Operator(refused_how), visibility)
        with pytest.raises(SearchAttributesMissing) as refused:
            await check_search_attributes(client)  # type: ignore[arg-type]
        said = str(refused.value)
        assert "\n" not in said
        assert said.startswith(f"search attribute {SA_ROW_AT} not registered on namespace prod")
        assert f"--search-attribute {SA_ROW_AT}=Datetime" in said
        assert f"{SA_ROW_AT} IS NULL" in visibility.queries


async def test_a_list_not_allowed_and_a_probe_that_finds_all_starts_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    visibility = _Visibility(set(SEARCH_ATTRIBUTES))
    with caplog.at_level(logging.WARNING, logger="devicepool.worker"):
        await check_search_attributes(_Client(_Operator(DENIED), visibility))  # type: ignore[arg-type]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(visibility.queries) == len(SEARCH_ATTRIBUTES)


async def test_neither_allowed_warns_and_starts(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="devicepool.worker"):
        await check_search_attributes(_Client(_Operator(DENIED), _Visibility(None)))  # type: ignore[arg-type]
    (warned,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "search attributes" in warned.getMessage()


async def test_a_frontend_that_is_restarting_is_asked_again_and_refuses() -> None:
    before = [name for name in SEARCH_ATTRIBUTES if name != SA_ROW_AT]
    operator = _Operator(UNAVAILABLE, UNAVAILABLE, _typed(*before))
    with pytest.raises(SearchAttributesMissing, match=SA_ROW_AT):
        await check_search_attributes(_Client(operator))  # type: ignore[arg-type]
    assert operator.asked == ["prod"] * 3


async def test_a_frontend_that_never_answers_stops_the_worker() -> None:
    """Not a warning: the worker exits and its supervisor starts it again."""
    operator = _Operator(RPCError("slow", RPCStatusCode.DEADLINE_EXCEEDED, b""))
    with pytest.raises(SearchAttributesUnchecked) as unchecked:
        await check_search_attributes(_Client(operator, _Visibility(None)))  # type: ignore[arg-type]
    assert len(operator.asked) == len(registered.RETRY_DELAYS) + 1
    assert str(unchecked.value) == (
        "cannot tell whether namespace prod has devicepool's search attributes: "
        "Temporal answered DEADLINE_EXCEEDED 4 times; the worker starts once it can tell"
    )


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
