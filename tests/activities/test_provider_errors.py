"""The error tree and its translation into Temporal failures, through the real client.

`httpx.MockTransport` answers each status the contract names; the contract tests
(test_provider_contract.py) do the same against the emulator.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from devicepool.activities import errors
from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.api.errors import ErrorType

KEY = "sk-live-very-secret-0123456789"


def _problem(status: int, code: str | None, detail: str = "nope", **headers: str) -> httpx.Response:
    body: dict[str, object] = {
        "type": "about:blank",
        "title": "t",
        "status": status,
        "detail": detail,
    }
    if code is not None:
        body["code"] = code
    return httpx.Response(
        status,
        content=json.dumps(body).encode(),
        headers={"content-type": "application/problem+json", **headers},
    )


def _client(handler) -> BitCloudPhoneClient:
    return BitCloudPhoneClient(
        base_url="http://provider.test", api_key=KEY, transport=httpx.MockTransport(handler)
    )


CASES = [
    (400, "invalid_argument", errors.InvalidArgumentError, ErrorType.INVALID_ARGUMENT),
    (401, "unauthenticated", errors.UnauthenticatedError, ErrorType.UNAUTHENTICATED),
    (402, "quota_exceeded", errors.QuotaExceededError, ErrorType.QUOTA_EXCEEDED),
    (404, "not_found", errors.NotFoundError, ErrorType.NOT_FOUND),
    (409, "invalid_state", errors.InvalidStateError, ErrorType.INVALID_STATE),
    (
        422,
        "idempotency_key_reused",
        errors.IdempotencyKeyReusedError,
        ErrorType.IDEMPOTENCY_KEY_REUSED,
    ),
    (429, "rate_limited", errors.RateLimitedError, ErrorType.RATE_LIMITED),
    (503, "region_unavailable", errors.RegionUnavailableError, ErrorType.REGION_UNAVAILABLE),
    (500, "server_error", errors.ServerError, ErrorType.SERVER_ERROR),
]


@pytest.mark.parametrize(("status", "code", "cls", "error_type"), CASES)
async def test_problem_code_picks_the_subclass(status, code, cls, error_type) -> None:
    async with _client(lambda request: _problem(status, code, "it went wrong")) as client:
        with pytest.raises(cls) as info:
            await client.get_device("d-1")
    assert info.value.error_type is error_type
    assert info.value.status == status
    assert info.value.detail == "it went wrong"


@pytest.mark.parametrize(
    ("status", "cls", "error_type"),
    [
        (400, errors.InvalidArgumentError, ErrorType.INVALID_ARGUMENT),
        (401, errors.UnauthenticatedError, ErrorType.UNAUTHENTICATED),
        (403, errors.UnauthenticatedError, ErrorType.UNAUTHENTICATED),
        (404, errors.NotFoundError, ErrorType.NOT_FOUND),
        (418, errors.InvalidArgumentError, ErrorType.INVALID_ARGUMENT),
        (429, errors.RateLimitedError, ErrorType.RATE_LIMITED),
        (502, errors.ServerError, ErrorType.SERVER_ERROR),
        (503, errors.ServerError, ErrorType.SERVER_ERROR),
    ],
)
async def test_without_a_code_the_status_decides(status, cls, error_type) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text="<html>gateway says no</html>")

    async with _client(handler) as client:
        with pytest.raises(cls) as info:
            await client.regions()
    assert type(info.value) is cls
    assert info.value.error_type is error_type


async def test_a_code_contradicting_the_status_class_is_not_trusted() -> None:
    # A 500 that claims `not_found` is still a server error: retryability follows the status.
    async with _client(lambda request: _problem(500, "not_found")) as client:
        with pytest.raises(errors.ServerError) as info:
            await client.get_device("d-1")
    assert info.value.retryable


async def test_an_unknown_code_falls_back_on_the_status() -> None:
    async with _client(lambda request: _problem(409, "something_new")) as client:
        with pytest.raises(errors.InvalidStateError):
            await client.get_device("d-1")


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "17"}, 17.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"RateLimit-Reset": "9"}, 9.0),
        ({}, None),
    ],
)
async def test_rate_limited_carries_retry_after(headers, expected) -> None:
    async with _client(lambda request: _problem(429, "rate_limited", **headers)) as client:
        with pytest.raises(errors.RateLimitedError) as info:
            await client.list_devices(labels={"pool": "p"})
    assert info.value.retry_after == expected


async def test_retry_after_as_http_date() -> None:
    headers = {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}  # long past
    async with _client(lambda request: _problem(429, "rate_limited", **headers)) as client:
        with pytest.raises(errors.RateLimitedError) as info:
            await client.list_devices(labels={"pool": "p"})
    assert info.value.retry_after == 0.0


async def test_timeouts_and_connection_errors_are_transport_errors() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with _client(timeout) as client:
        with pytest.raises(errors.TransportTimeoutError) as info:
            await client.get_status("d-1")
    assert info.value.error_type is ErrorType.TIMEOUT
    assert info.value.status is None
    assert isinstance(info.value, errors.TransportError)

    async with _client(refused) as client:
        with pytest.raises(errors.TransportError) as info2:
            await client.get_status("d-1")
    assert type(info2.value) is errors.TransportError
    assert info2.value.error_type is ErrorType.TRANSPORT


# ------------------------------------------------------------------ to_application_error


@pytest.mark.parametrize(("status", "code", "cls", "error_type"), CASES)
def test_application_error_type_and_retryability(status, code, cls, error_type) -> None:
    exc = cls(error_type, status, "detail", None)
    failure = errors.to_application_error(exc)
    assert isinstance(failure, ApplicationError)
    assert failure.type == error_type.value
    assert failure.non_retryable is (400 <= status < 500 and status != 429)


def test_rate_limited_becomes_benign_with_next_retry_delay() -> None:
    exc = errors.RateLimitedError(ErrorType.RATE_LIMITED, 429, "slow down", 12.0)
    failure = errors.to_application_error(exc)
    assert failure.type == ErrorType.RATE_LIMITED.value
    assert not failure.non_retryable
    assert failure.next_retry_delay == timedelta(seconds=12)
    assert failure.category is ApplicationErrorCategory.BENIGN


def test_rate_limited_without_retry_after_leaves_the_delay_to_the_policy() -> None:
    exc = errors.RateLimitedError(ErrorType.RATE_LIMITED, 429, "slow down", None)
    assert errors.to_application_error(exc).next_retry_delay is None


@pytest.mark.parametrize(
    ("cls", "error_type"),
    [
        (errors.TransportError, ErrorType.TRANSPORT),
        (errors.TransportTimeoutError, ErrorType.TIMEOUT),
        (errors.ServerError, ErrorType.SERVER_ERROR),
        (errors.RegionUnavailableError, ErrorType.REGION_UNAVAILABLE),
    ],
)
def test_server_and_transport_errors_are_retryable(cls, error_type) -> None:
    failure = errors.to_application_error(cls(error_type, None, "x", None))
    assert failure.type == error_type.value
    assert not failure.non_retryable
    assert failure.category is ApplicationErrorCategory.UNSPECIFIED


def test_configuration_errors_are_never_retried() -> None:
    failure = errors.configuration_error(ErrorType.UNKNOWN_ACCOUNT, "unknown account 'x'")
    assert failure.type == ErrorType.UNKNOWN_ACCOUNT.value
    assert failure.non_retryable


# ------------------------------------------------------------------ redaction


async def test_the_key_is_sent_as_bearer_and_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def echo_key(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        # A careless provider that echoes the credential back in its error detail.
        return _problem(401, "unauthenticated", f"bad key {request.headers['authorization']}")

    caplog.set_level("DEBUG")
    client = _client(echo_key)
    assert KEY not in repr(client)
    assert KEY not in str(client)
    with pytest.raises(errors.UnauthenticatedError) as info:
        await client.get_device("d-1")
    await client.aclose()
    assert seen == [f"Bearer {KEY}"]
    for text in (str(info.value), repr(info.value), info.value.detail):
        assert KEY not in text
    assert KEY not in str(errors.to_application_error(info.value))
    assert KEY not in caplog.text
    assert "bad key Bearer **********" in info.value.detail


async def test_the_key_is_not_in_transport_errors() -> None:
    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect, auth was {request.headers['authorization']}")

    async with _client(boom) as client:
        with pytest.raises(errors.TransportError) as info:
            await client.regions()
    assert KEY not in str(info.value)
    assert info.value.__cause__ is None  # the httpx exception (and its request) is not chained


# ------------------------------------------------------------------ Retry-After, defensively

CAP = errors.MAX_RETRY_AFTER_SECONDS


async def _retry_after(headers: dict[str, str]) -> float | None:
    async with _client(lambda request: _problem(429, "rate_limited", **headers)) as client:
        with pytest.raises(errors.RateLimitedError) as info:
            await client.list_devices(labels={"pool": "p"})
    return info.value.retry_after


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit-Reset": "1767225600"},  # an epoch timestamp, as several real APIs send
        {"Retry-After": "86400"},  # a day
        {"Retry-After": "1e12"},
        {"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"},
        {"RateLimit-Reset": str(int(time.time()) + 10 * 86400)},  # ten days from now
    ],
)
async def test_a_retry_after_is_never_longer_than_the_cap(headers) -> None:
    retry_after = await _retry_after(headers)
    assert retry_after is not None
    assert 0.0 <= retry_after <= CAP


async def test_an_epoch_timestamp_is_a_point_in_time_not_a_delta() -> None:
    retry_after = await _retry_after({"RateLimit-Reset": str(int(time.time()) + 120)})
    assert retry_after is not None
    assert 110 <= retry_after <= 121


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-5", "soon", ""])
async def test_a_nonsense_retry_after_counts_as_absent(value) -> None:
    assert await _retry_after({"Retry-After": value}) is None
    # ... and the next header still counts.
    assert await _retry_after({"Retry-After": value, "RateLimit-Reset": "7"}) == 7.0


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 1e12, 86400.0, -3.0])
def test_the_next_retry_delay_is_clamped_whatever_the_error_carries(seconds) -> None:
    exc = errors.RateLimitedError(ErrorType.RATE_LIMITED, 429, "slow down", seconds)
    delay = errors.to_application_error(exc).next_retry_delay
    assert delay is None or timedelta(0) <= delay <= timedelta(seconds=CAP)
