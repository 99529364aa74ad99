"""The GeeLark client's habits on `httpx.MockTransport` (`geelark_fake`): the signature (the
vendor's worked example), token mode, the envelope's codes as the shared error tree, batch
answers read per item, the request windows, the two-hour lock's breaker, quotas with their
reset, and secrets kept out of every text that leaves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from devicepool.activities.errors import (
    InvalidStateError,
    NotFoundError,
    QuotaExceededError,
    RateLimitedError,
    ServerError,
    UnauthenticatedError,
    to_application_error,
)
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice
from devicepool.activities.providers.geelark import (
    EndpointPacer,
    GeeLarkBusyError,
    GeeLarkCapacityError,
    GeeLarkError,
    GeeLarkLockedError,
    GeeLarkQuotaError,
    GeeLarkRateLimitedError,
    KeyAuth,
    sign,
)
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY
from tests.activities.geelark_fake import API_KEY, APP_ID, Clock, Fake, ok, refused

VECTOR_TRACE = "db6094ab-3797-4186-84d5-b0b58eebad56"
VECTOR_SIGN = "6280C080AF7C3CCE168F15C913E3444A00A618CB0E16038EED9811D6E3366BDD"


def test_the_signature_is_the_vendors_worked_example() -> None:
    got = sign(
        app_id=APP_ID, trace_id=VECTOR_TRACE, ts="1716972892166", nonce="db6094", api_key=API_KEY
    )
    assert got == VECTOR_SIGN


async def test_key_mode_sends_the_signed_headers_and_never_the_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ok(None))

    auth = KeyAuth(
        APP_ID,
        SecretStr(API_KEY),
        new_trace=lambda: VECTOR_TRACE,
        now_ms=lambda: 1716972892166,
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), auth=auth) as http:
        await http.post("https://x/open/v1/phone/list", json={})
    headers = seen[0].headers
    assert headers["appId"] == APP_ID
    assert headers["traceId"] == VECTOR_TRACE
    assert headers["ts"] == "1716972892166"
    assert headers["nonce"] == "db6094"
    assert headers["sign"] == VECTOR_SIGN
    assert API_KEY not in str(seen[0].headers) and API_KEY not in seen[0].content.decode()
    assert API_KEY not in repr(auth)


async def test_token_mode_sends_a_bearer_and_a_fresh_trace_id() -> None:
    fake = Fake()
    api = fake.api(app_id="", api_key="tok-Secret-123")
    await api.call("phone/list", {"page": 1, "pageSize": 10})
    await api.call("phone/list", {"page": 1, "pageSize": 10})
    (_, first, _), (_, second, _) = fake.requests
    assert first["authorization"] == "Bearer tok-Secret-123"
    assert "sign" not in first and "appid" not in first
    assert first["traceid"] != second["traceid"]
    assert "tok-Secret-123" not in repr(api)
    await api.aclose()


async def test_every_call_is_a_post_of_json_under_open_v1() -> None:
    fake = Fake()
    fake.script["/open/v2/phone/newOne"] = [ok(None)]
    api = fake.api()
    await api.call("phone/list", {"page": 1, "pageSize": 10})
    await api.call("/open/v2/phone/newOne", {"id": "1"})
    assert all(r.method == "POST" for r in fake.raw)
    assert [p for p, _, _ in fake.requests] == ["/open/v1/phone/list", "/open/v2/phone/newOne"]
    await api.aclose()


@pytest.mark.parametrize(
    ("code", "cls", "retryable"),
    [
        (40003, UnauthenticatedError, False),
        (40016, UnauthenticatedError, False),
        (40005, NotFoundError, False),
        (42001, NotFoundError, False),
        (43005, GeeLarkBusyError, False),
        (43006, GeeLarkBusyError, False),
        (41001, QuotaExceededError, False),
        (44002, QuotaExceededError, False),
        (40007, GeeLarkRateLimitedError, True),
        (47001, GeeLarkCapacityError, True),
        (47002, GeeLarkCapacityError, True),
        (40000, ServerError, True),
        (50000, ServerError, True),
        (49999, ServerError, True),
    ],
)
async def test_envelope_codes_raise_the_shared_tree(
    code: int, cls: type[Exception], retryable: bool
) -> None:
    fake = Fake()
    fake.script["phone/list"] = [refused(code, "nope")]
    api = fake.api()
    with pytest.raises(cls) as caught:
        await api.call("phone/list", {})
    assert caught.value.retryable is retryable  # type: ignore[attr-defined]
    assert caught.value.code == code  # type: ignore[attr-defined]
    await api.aclose()


@pytest.mark.parametrize(
    ("endpoint", "retryable"),
    [("phone/start", True), ("tag/delete", False), ("phone/addNew", False)],
)
async def test_43020_is_classified_by_endpoint(endpoint: str, retryable: bool) -> None:
    # On `phone/start` 43020 is "currently unavailable, please try again later"; the tag
    # endpoints reuse it for a refused tag (the reference: classify by endpoint).
    fake = Fake()
    fake.script[endpoint] = [refused(43020, "nope")]
    api = fake.api()
    with pytest.raises(GeeLarkError) as caught:
        await api.call(endpoint, {})
    assert caught.value.retryable is retryable and caught.value.code == 43020
    await api.aclose()


async def test_a_start_item_refused_43020_fails_the_create_for_a_retry() -> None:
    fake = Fake()

    def unavailable(f: Fake, body: dict[str, Any]) -> Any:
        return ok(
            {
                "totalAmount": 1,
                "successAmount": 0,
                "failAmount": 1,
                "successDetails": [],
                "failDetails": [{"code": 43020, "id": body["ids"][0], "msg": "try again later"}],
            }
        )

    fake.script["phone/start"] = [unavailable]
    provider = fake.provider()
    labels = {LABEL_POOL: "p", LABEL_MANAGED_BY: MANAGED_BY}
    new = NewDevice(
        template=DeviceTemplate(platform="android", region="sgp", os_version="13"),
        name="d",
        labels=labels,
        idempotency_key="k",
    )
    with pytest.raises(ServerError) as caught:
        await provider.create_device(new)
    assert caught.value.retryable
    again = await provider.create_device(new)  # the activity's retry: the same phone
    assert again.status == "provisioning" and fake.paths().count("phone/addNew") == 1
    await provider.aclose()


async def test_concurrency_codes_back_off_with_a_delay() -> None:
    fake = Fake()
    fake.script["phone/start"] = [refused(47002, "too many concurrent requests")]
    api = fake.api()
    with pytest.raises(GeeLarkCapacityError) as caught:
        await api.call("phone/start", {"ids": ["1"]})
    failure = to_application_error(caught.value)
    assert failure.type == ErrorType.RATE_LIMITED and not failure.non_retryable
    assert failure.next_retry_delay == timedelta(seconds=60)
    await api.aclose()


async def test_a_partial_batch_is_read_per_item_not_by_its_envelope() -> None:
    # [field]: two running phones were recorded deleted because only `code: 0` was read.
    fake = Fake()
    fake.script["phone/delete"] = [
        ok(
            {
                "totalAmount": 3,
                "successAmount": 1,
                "failAmount": 2,
                "failDetails": [
                    {"code": 43009, "id": "a", "msg": "started"},
                    {"code": 43006, "id": "b", "msg": "under remote control"},
                ],
            }
        )
    ]
    api = fake.api()
    batch = await api.batch("phone/delete", ["a", "b", "c"])
    assert set(batch.done) == {"c"}
    assert isinstance(batch.failed["a"], InvalidStateError)
    assert isinstance(batch.failed["b"], GeeLarkBusyError)
    assert batch.unknown == []
    await api.aclose()


async def test_a_batch_whose_counts_do_not_add_up_claims_nothing_done() -> None:
    fake = Fake()
    # Envelope 0, one failure counted but not named: no id may be taken as deleted.
    fake.script["phone/delete"] = [
        ok({"totalAmount": 2, "successAmount": 1, "failAmount": 1, "failDetails": []}),
        # 40009 ("batch completely failed") is read per item too, not raised.
        refused(40009, "all failed") | {"data": {"failDetails": [{"code": 43010, "id": "a"}]}},
    ]
    api = fake.api()
    batch = await api.batch("phone/delete", ["a", "b"])
    assert batch.done == {} and batch.unknown == ["a", "b"]
    batch = await api.batch("phone/delete", ["a"])
    assert batch.done == {} and isinstance(batch.failed["a"], GeeLarkBusyError)
    await api.aclose()


async def test_a_status_batch_names_done_failed_and_unknown() -> None:
    fake = Fake()
    fake.script["phone/status"] = [
        ok(
            {
                "totalAmount": 3,
                "successAmount": 1,
                "failAmount": 1,
                "successDetails": [{"id": "a", "status": 0}],
                "failDetails": [{"code": 42001, "id": "b", "msg": "not found"}],
            }
        )
    ]
    api = fake.api()
    batch = await api.batch("phone/status", ["a", "b", "c"])
    assert list(batch.done) == ["a"]
    assert isinstance(batch.failed["b"], NotFoundError)
    assert batch.unknown == ["c"]
    await api.aclose()


async def test_40014_opens_the_breaker_for_two_hours_and_no_call_is_sent() -> None:
    clock = Clock()
    fake = Fake()
    fake.script["phone/status"] = [refused(40014, "locked for two hours")]
    api = fake.api(clock)
    with pytest.raises(GeeLarkLockedError) as caught:
        await api.call("phone/status", {"ids": ["1"]})
    assert caught.value.reopens_at == clock.at + timedelta(hours=2)
    assert "2026-12-06T01:30:00Z" in str(caught.value)
    sent = len(fake.requests)
    # Every endpoint of the key, not only the one that tripped it.
    for _ in range(3):
        with pytest.raises(GeeLarkLockedError) as again:
            await api.call("phone/list", {})
        assert isinstance(again.value, RateLimitedError)
    assert len(fake.requests) == sent
    clock.at += timedelta(hours=1, minutes=59)
    with pytest.raises(GeeLarkLockedError):
        await api.call("phone/list", {})
    assert len(fake.requests) == sent
    clock.at += timedelta(minutes=1)
    await api.call("phone/list", {})
    assert len(fake.requests) == sent + 1
    await api.aclose()


async def test_daily_quotas_say_when_they_reset_and_caps_do_not() -> None:
    clock = Clock(datetime(2026, 12, 5, 17, 4, tzinfo=UTC))
    fake = Fake()
    fake.script["phone/addNew"] = [refused(44004, "daily creation limit"), refused(44002, "cap")]
    fake.script["phone/start"] = [
        ok(
            {
                "totalAmount": 1,
                "successAmount": 0,
                "failAmount": 1,
                "successDetails": [],
                "failDetails": [{"code": 43008, "id": "p1", "msg": "daily open limit"}],
            }
        )
    ]
    api = fake.api(clock)
    midnight = datetime(2026, 12, 6, tzinfo=UTC)
    with pytest.raises(GeeLarkQuotaError) as creates:
        await api.call("phone/addNew", {"data": [{}]})
    assert creates.value.resets_at == midnight
    assert "resets at 2026-12-06T00:00:00Z" in str(creates.value)
    failure = to_application_error(creates.value)
    assert failure.type == ErrorType.QUOTA_EXCEEDED and failure.non_retryable
    opens = await api.batch("phone/start", ["p1"])
    assert isinstance(opens.failed["p1"], GeeLarkQuotaError)
    assert opens.failed["p1"].resets_at == midnight
    with pytest.raises(GeeLarkQuotaError) as cap:
        await api.call("phone/addNew", {"data": [{}]})
    assert cap.value.resets_at is None
    await api.aclose()


async def test_the_pacer_keeps_200_a_minute_per_endpoint() -> None:
    clock = Clock()
    fake = Fake()
    api = fake.api(clock)
    for _ in range(200):
        await api.call("phone/status", {"ids": ["1"]})
    await api.call("phone/list", {})  # another endpoint has its own window
    assert clock.slept == []
    # The 201st within the minute is not sent: refused with the wait, for the retry.
    with pytest.raises(GeeLarkRateLimitedError) as caught:
        await api.call("phone/status", {"ids": ["1"]})
    assert 60 <= (caught.value.retry_after or 0) <= 62
    assert len(fake.requests) == 201
    clock.at += timedelta(seconds=58)
    await api.call("phone/status", {"ids": ["1"]})  # within the wait it may hold: it waits
    assert 2 <= sum(clock.slept) <= 4
    assert len(fake.requests) == 202
    await api.aclose()


async def test_the_pacer_refuses_rather_than_holding_a_call_for_the_hour() -> None:
    clock = Clock()
    pacer = EndpointPacer(per_minute=1000, per_hour=3, clock=clock.mono, sleep=clock.sleep)
    fake = Fake()
    api = fake.api(clock, pacer=pacer)
    for _ in range(3):
        await api.call("phone/status", {"ids": ["1"]})
    with pytest.raises(GeeLarkRateLimitedError) as caught:
        await api.call("phone/status", {"ids": ["1"]})
    assert caught.value.retry_after is not None and caught.value.retry_after > 3000
    assert len(fake.requests) == 3 and clock.slept == []
    await api.aclose()


async def test_a_40007_holds_the_endpoint_until_the_next_minute() -> None:
    clock = Clock(datetime(2026, 12, 5, 23, 30, 45, tzinfo=UTC))
    fake = Fake()
    fake.script["phone/status"] = [refused(40007, "rate limited")]
    api = fake.api(clock)
    with pytest.raises(GeeLarkRateLimitedError) as caught:
        await api.call("phone/status", {"ids": ["1"]})
    assert caught.value.retry_after == 15
    with pytest.raises(GeeLarkRateLimitedError):  # held here, not sent
        await api.call("phone/status", {"ids": ["1"]})
    assert len(fake.requests) == 1
    clock.at += timedelta(seconds=15)
    await api.call("phone/status", {"ids": ["1"]})
    assert len(fake.requests) == 2
    await api.aclose()


async def test_secrets_never_leave_in_errors_or_reprs() -> None:
    fake = Fake()
    echo = f"bad sign for key {API_KEY} proxy pw hunter-Pass-9"
    fake.script["phone/addNew"] = [
        refused(40003, echo),
        ok({"details": [{"index": 0, "code": 45004, "msg": echo, "id": ""}]}),
    ]
    api = fake.api()
    with pytest.raises(UnauthenticatedError) as caught:
        await api.call("phone/addNew", {"data": [{}]}, secrets=["hunter-Pass-9"])
    for text in (str(caught.value), repr(caught.value), caught.value.raw_msg):  # type: ignore[attr-defined]
        assert API_KEY not in text and "hunter-Pass-9" not in text
    failure = to_application_error(caught.value)
    assert API_KEY not in str(failure) and API_KEY not in str(failure.details)
    data = await api.call("phone/addNew", {"data": [{}]}, secrets=["hunter-Pass-9"])
    assert API_KEY not in str(data) and "hunter-Pass-9" not in str(data)
    assert API_KEY not in repr(api)
    await api.aclose()


async def test_http_errors_and_non_envelopes_are_typed() -> None:
    fake = Fake()
    fake.script["phone/list"] = [
        httpx.Response(401, text="no"),
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(200, json={"hello": "world"}),
    ]
    api = fake.api()
    with pytest.raises(UnauthenticatedError):
        await api.call("phone/list", {})
    with pytest.raises(RateLimitedError) as limited:
        await api.call("phone/list", {})
    assert limited.value.retry_after == 7
    for _ in range(2):
        with pytest.raises(ServerError):
            await api.call("phone/list", {})
    await api.aclose()


async def test_a_call_waiting_its_turn_when_the_key_locks_is_not_sent() -> None:
    clock = Clock()
    fake = Fake()
    api = fake.api(clock)
    for _ in range(200):
        await api.call("phone/status", {"ids": ["1"]})
    clock.at += timedelta(seconds=57)  # the 201st will wait ~4 s for the window
    real_sleep = clock.sleep

    async def sleep_and_lock(seconds: float) -> None:
        await real_sleep(seconds)
        api.breaker.trip("POST /open/v1/phone/list", code=40014, msg="locked")

    api.pacer._sleep = sleep_and_lock
    with pytest.raises(GeeLarkLockedError):
        await api.call("phone/status", {"ids": ["1"]})
    assert len(fake.requests) == 200
    await api.aclose()
