"""The Local API client's reading of answers the emulator does not give: texts, shapes, secrets.

The vendor's refusals are free text; `classify` is checked on the texts the
vendor documents, on the short words such texts are made of, and on English.
Odd answers (no envelope, a 429, a dropped connection, a refusal quoting a
secret) come from `httpx.MockTransport`. The pacer is checked on a fake clock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import types
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from devicepool.activities.errors import (
    ProviderError,
    RateLimitedError,
    ServerError,
    TransportError,
    TransportTimeoutError,
    to_application_error,
)
from devicepool.activities.metrics import Metrics
from devicepool.activities.providers import bitbrowser
from devicepool.activities.providers.bitbrowser import (
    BrowserProfiles,
    CloudPhones,
    LocalApi,
    LocalApiAuthError,
    LocalApiBusyError,
    LocalApiError,
    LocalApiRateLimitedError,
    LocalApiRefusedError,
    Phone,
    PhonePacer,
    PhoneProxy,
    ProfileProxy,
    Refusal,
    classify,
)
from devicepool.activities.secrets import REDACTED, Scrubber
from devicepool.api.errors import ErrorType

KEY = "node-key-Rf71xQ"


@pytest.mark.parametrize(
    ("msg", "kind"),
    [
        # The vendor's own (DESIGN.md) and its English docs' example.
        ("请选择代理方式", Refusal.INVALID),
        ("窗口正在打开中，请稍后再试", Refusal.BUSY),
        ("关闭中", Refusal.BUSY),
        ("Id is required", Refusal.INVALID),
        # Texts in the vendor's style.
        ("窗口不存在或已被删除", Refusal.NOT_FOUND),
        ("云手机环境不存在", Refusal.NOT_FOUND),
        ("API 鉴权失败：x-api-key 不正确", Refusal.AUTH),
        ("请求过于频繁，云手机接口每秒最多请求 1 次", Refusal.RATE_LIMITED),
        ("Too many requests", Refusal.RATE_LIMITED),
        ("当前有其他窗口正在打开，请稍后再试，或以队列方式（queue: true）打开", Refusal.BUSY),
        ("该窗口已在其他设备上打开", Refusal.BUSY),
        ("窗口正在使用中，请先关闭窗口，等待进程退出后再删除", Refusal.BUSY),
        ("云手机未开机", Refusal.STATE),
        ("本月一键新机次数已用完，下月重置", Refusal.QUOTA),
        ("系统繁忙，请稍后再试", Refusal.UNAVAILABLE),
        ("浏览器启动失败，请重试", Refusal.UNAVAILABLE),
        ("算力类型（regionId）不可修改", Refusal.INVALID),
        ("修改窗口需要传入完整的窗口数据，缺少字段：name", Refusal.INVALID),
        ("page 参数必传，从 0 开始", Refusal.INVALID),
        ("出现了一个问题", Refusal.UNKNOWN),
        ("", Refusal.UNKNOWN),
    ],
)
def test_classify_reads_the_text_by_substring(msg: str, kind: Refusal) -> None:
    assert classify(msg) is kind


@pytest.mark.parametrize(
    ("kind", "error_type", "retryable"),
    [
        (Refusal.NOT_FOUND, ErrorType.NOT_FOUND, False),
        (Refusal.BUSY, ErrorType.INVALID_STATE, False),
        (Refusal.STATE, ErrorType.INVALID_STATE, False),
        (Refusal.AUTH, ErrorType.UNAUTHENTICATED, False),
        (Refusal.RATE_LIMITED, ErrorType.RATE_LIMITED, True),
        (Refusal.INVALID, ErrorType.INVALID_ARGUMENT, False),
        (Refusal.QUOTA, ErrorType.QUOTA_EXCEEDED, False),
        (Refusal.UNAVAILABLE, ErrorType.SERVER_ERROR, True),
        (Refusal.UNKNOWN, ErrorType.SERVER_ERROR, True),
    ],
)
def test_each_kind_is_one_error_of_the_shared_tree(
    kind: Refusal, error_type: ErrorType, retryable: bool
) -> None:
    error = bitbrowser.errors.refusal_error("POST /x", "某个错误", kind=kind)
    assert isinstance(error, LocalApiError) and isinstance(error, ProviderError)
    assert error.error_type is error_type and error.retryable is retryable
    assert error.refusal is kind and error.raw_msg == "某个错误"
    failure = to_application_error(error)
    assert failure.type == error_type.value and failure.non_retryable is not retryable


def _api(handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> LocalApi:
    return LocalApi(
        base_url="http://desk.local", api_key=KEY, transport=httpx.MockTransport(handler), **kwargs
    )


def _envelope(payload: dict[str, Any], status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=payload, headers=headers)


async def test_every_call_is_a_post_of_json_with_the_key_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _envelope({"success": True, "data": {"id": "abc"}})

    async with _api(handler) as api:
        assert await api.call("/browser/detail", {"id": "abc"}) == {"id": "abc"}
        assert await api.call("/health") == {"id": "abc"}
    assert [(r.method, r.url.path) for r in seen] == [
        ("POST", "/browser/detail"),
        ("POST", "/health"),
    ]
    assert json.loads(seen[0].content) == {"id": "abc"} and json.loads(seen[1].content) == {}
    assert all(r.headers["x-api-key"] == KEY for r in seen)
    assert "authorization" not in seen[0].headers


async def test_without_a_key_no_key_header_is_sent() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _envelope({"success": True})

    async with LocalApi(api_key="", transport=httpx.MockTransport(handler)) as api:
        assert await api.call("/health") is None
    assert "x-api-key" not in seen[0].headers
    assert seen[0].url.host == "127.0.0.1" and seen[0].url.port == 54345


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(200, text="<html>hello</html>"), ServerError),
        (httpx.Response(200, json={"data": 1}), ServerError),
        (httpx.Response(200, json=[1, 2]), ServerError),
        (httpx.Response(502, text="Bad gateway"), ServerError),
        (httpx.Response(401, text=""), LocalApiAuthError),
        (httpx.Response(403, json={"success": False, "msg": "forbidden"}), LocalApiAuthError),
        (httpx.Response(429, json={"success": False, "msg": "请求过于频繁"}), RateLimitedError),
    ],
)
async def test_answers_that_are_not_the_envelope(
    response: httpx.Response, error: type[ProviderError]
) -> None:
    async with _api(lambda request: response) as api:
        with pytest.raises(error) as caught:
            await api.call("/browser/list", {"page": 0})
    assert caught.value.retryable is error.default_error_type.retryable


async def test_a_429_takes_its_retry_after() -> None:
    response = _envelope({"success": False, "msg": "too many"}, 429, **{"Retry-After": "3"})
    async with _api(lambda request: response) as api:
        with pytest.raises(LocalApiRateLimitedError) as caught:
            await api.call("/phone/list", {"page": 0})
    assert caught.value.retry_after == 3.0


async def test_no_answer_is_a_retryable_transport_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url} with key {KEY}")

    async with _api(refuse) as api:
        with pytest.raises(TransportError) as caught:
            await api.health()
    assert caught.value.retryable and KEY not in str(caught.value)


async def test_a_slow_answer_times_out_within_the_call_deadline() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return _envelope({"success": True})

    async with _api(slow, timeout=0.1) as api:  # type: ignore[arg-type]
        with pytest.raises(TransportTimeoutError) as caught:
            await api.health()
    assert caught.value.retryable


async def test_a_refusal_quoting_a_secret_shows_none_of_it() -> None:
    worker_secret = "worker-proxy-pool-pass-Vb3"
    proxy_password = "profile-proxy-pass-Mm5"

    def echo(request: httpx.Request) -> httpx.Response:
        sent = request.content.decode()
        return _envelope({"success": False, "msg": f"参数错误: {sent} key={KEY} {worker_secret}"})

    api = _api(echo, scrubber=Scrubber([worker_secret]))
    profiles = BrowserProfiles(api, settle_seconds=0)
    proxy = ProfileProxy(type="http", host="h", port=1, username="u", password=proxy_password)
    async with api:
        with pytest.raises(LocalApiError) as caught:
            await profiles.create(mark="pool/0", proxy=proxy)
    error = caught.value
    for text in (str(error), repr(error), error.raw_msg, error.detail):
        for secret in (KEY, worker_secret, proxy_password):
            assert secret not in text
    assert REDACTED in error.raw_msg


async def test_a_phone_answer_holding_secrets_validates_without_them() -> None:
    adb = json.dumps({"code": "adb-pass-Tt8", "port": 21136, "ip": "124.236.71.153"})
    item = {
        "id": "p1",
        "seq": "7",
        "name": "pp/1",
        "remark": "",
        "proxyPassword": "phone-proxy-pass-Kk2",
        "proxyUserName": "phone-user",
        "port": "45001",
        "adb": adb,
        "status": 2,
        "somethingNew": {"token": "new-field-secret-Jj4"},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return _envelope({"success": True, "data": {"list": [item], "total": 1}})

    async with _api(handler) as api:
        phones = CloudPhones(api, pacer=PhonePacer(interval=0.001))
        (phone,) = (await phones.list_page(0)).items
    assert isinstance(phone, Phone)
    assert (phone.seq, phone.port, phone.adb and phone.adb.port) == (7, 45001, 21136)
    shown = " ".join((phone.model_dump_json(), repr(phone), str(phone.__dict__)))
    for secret in ("adb-pass-Tt8", "phone-proxy-pass-Kk2", "new-field-secret-Jj4", "phone-user"):
        assert secret not in shown


async def test_the_phone_proxy_password_is_secret_in_the_model() -> None:
    proxy = PhoneProxy(host="h", port=1, username="u", password="pp-Qx1")
    assert "pp-Qx1" not in repr(proxy) and "pp-Qx1" not in proxy.model_dump_json()


async def test_an_unknown_refusal_is_retryable_and_keeps_its_text() -> None:
    response = _envelope({"success": False, "msg": "出现了一个问题"})
    async with _api(lambda request: response) as api:
        with pytest.raises(LocalApiRefusedError) as caught:
            await api.call("/browser/open", {"id": "x"})
    assert caught.value.retryable and caught.value.raw_msg == "出现了一个问题"


async def test_a_busy_refusal_is_not_a_not_found() -> None:
    response = _envelope({"success": False, "msg": "当前有其他窗口正在打开，请稍后再试"})
    async with _api(lambda request: response) as api:
        with pytest.raises(LocalApiBusyError):
            await api.call("/browser/open", {"id": "x"})


# ------------------------------------------------------------ the pacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def test_the_pacer_lets_one_call_through_at_a_time_interval_after_its_answer() -> None:
    fake = FakeTime()
    pacer = PhonePacer(interval=1.0, clock=fake.clock, sleep=fake.sleep)
    spans: list[tuple[int, float, float]] = []

    async def caller(i: int) -> None:
        async with pacer.turn():
            start = fake.now
            await fake.sleep(0.5)  # the call's own latency
            spans.append((i, start, fake.now))

    await asyncio.gather(*(caller(i) for i in range(5)))
    assert [i for i, _, _ in spans] == [0, 1, 2, 3, 4]  # in the order they asked
    for (_, _, ended), (_, started, _) in itertools.pairwise(spans):
        assert started - ended == pytest.approx(1.0)  # never overlapping, 1 s after the answer
    assert pacer.calls == 5


async def test_a_failed_call_still_spaces_the_next_one() -> None:
    fake = FakeTime()
    pacer = PhonePacer(interval=1.0, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(RuntimeError):
        async with pacer.turn():
            raise RuntimeError("refused")
    async with pacer.turn():
        assert fake.now == pytest.approx(101.0)


async def test_the_pacer_is_held_by_a_refusal_and_a_cancelled_wait_takes_no_turn() -> None:
    fake = FakeTime()
    pacer = PhonePacer(interval=1.0, clock=fake.clock, sleep=fake.sleep)
    async with pacer.turn():
        pacer.hold(5.0)  # "too many requests, come back in 5 s"
    async with pacer.turn():
        assert fake.now == pytest.approx(105.0)

    blocked = PhonePacer(interval=60.0)
    async with blocked.turn():
        pass
    waiter = asyncio.create_task(_take_a_turn(blocked))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert blocked.calls == 1
    with pytest.raises(ValueError):
        PhonePacer(interval=0)


async def _take_a_turn(pacer: PhonePacer) -> None:
    async with pacer.turn():
        pass


def test_the_public_surface_is_deliberate() -> None:
    # Its submodules show in dir() once anything imported them: not names of the surface.
    assert set(bitbrowser.__all__) == {
        name
        for name in dir(bitbrowser)
        if not name.startswith("_")
        and name.isidentifier()
        and not isinstance(getattr(bitbrowser, name), types.ModuleType)
    }


async def test_pids_alive_reads_each_id_and_tolerates_an_odd_pid() -> None:
    asked: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        ids = json.loads(request.content)["ids"]
        asked.append(ids)
        return _envelope({"success": True, "data": {ids[0]: "4242", ids[1]: None}})

    async with _api(handler) as api:
        alive = await BrowserProfiles(api).alive([f"id-{i}" for i in range(150)])
    assert [len(ids) for ids in asked] == [100, 50]
    assert alive == {"id-0": 4242, "id-1": 0, "id-100": 4242, "id-101": 0}


async def test_a_bare_answer_is_an_error_that_does_not_quote_it() -> None:
    # `/browser/pids/all` is documented without the envelope; a bare answer may be data.
    bare = httpx.Response(200, json={"id-1": {"cookie": "bare-cookie-Uu6"}})
    async with _api(lambda request: bare) as api:
        with pytest.raises(ServerError, match="not the envelope") as caught:
            await api.call("/browser/detail", {"id": "id-1"})
    assert "bare-cookie-Uu6" not in str(caught.value) and caught.value.retryable


async def test_calls_and_errors_are_counted_and_the_logs_hold_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    refusal = _envelope({"success": False, "msg": f"参数错误 {KEY}"})
    caplog.set_level(logging.DEBUG)
    async with _api(lambda request: refusal, metrics=metrics) as api:
        with pytest.raises(LocalApiError):
            await api.call("/browser/update/partial", {"ids": ["a"], "password": "pw-Ee5"})
    registry = metrics.registry
    calls = registry.get_sample_value(
        "devicepool_api_requests_total", {"operation": "POST /browser/update/partial"}
    )
    errors = registry.get_sample_value("devicepool_api_errors_total", {"type": "invalid_argument"})
    assert (calls, errors) == (1.0, 1.0)
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "/browser/update/partial" in logged
    assert KEY not in logged and "pw-Ee5" not in logged
