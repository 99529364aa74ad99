"""What the client puts on the wire, checked with `httpx.MockTransport`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr

from devicepool.activities import bitcloudphone
from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.errors import ProviderError
from devicepool.api.errors import ErrorType
from devicepool.api.v1beta1 import Platform


async def _listing_refused(handler) -> ProviderError:
    """The error a listing through `handler` ends in (it must end in one)."""
    async with _client(handler) as client:
        with pytest.raises(ProviderError) as info:
            await client.list_devices(labels={"pool": "p"})
    return info.value


def _client(handler) -> BitCloudPhoneClient:
    return BitCloudPhoneClient(
        base_url="http://provider.test/",
        api_key=SecretStr("k"),
        timeout=3.0,
        transport=httpx.MockTransport(handler),
    )


async def test_create_sends_the_contract_body_and_idempotency_key() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(202, json={"id": "d-1", "status": "provisioning"})

    async with _client(handler) as client:
        device = await client.create_device(
            Platform.IOS,
            region="us-west",
            os_version="17",
            name="n-1",
            labels={"pool": "p"},
            proxy={"type": "socks5", "host": "h", "port": 1, "username": "u", "password": "pw"},
            idempotency_key="key-1",
        )
    assert device == {"id": "d-1", "status": "provisioning"}
    (request,) = requests
    assert request.method == "POST"
    assert request.url.path == "/api/v1/ios/devices"
    assert request.headers["idempotency-key"] == "key-1"
    assert request.headers["authorization"] == "Bearer k"
    assert json.loads(request.content) == {
        "region": "us-west",
        "osVersion": "17",
        "name": "n-1",
        "labels": {"pool": "p"},
        "proxy": {"type": "socks5", "host": "h", "port": 1, "username": "u", "password": "pw"},
    }


async def test_create_without_proxy_omits_it() -> None:
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202, json={"id": "d-1"})

    async with _client(handler) as client:
        await client.create_device(
            "android",
            region="r",
            os_version="14",
            name="n",
            labels={},
            proxy=None,
            idempotency_key="k1",
        )
    assert "proxy" not in bodies[0]


async def test_list_follows_every_page_and_sends_filters() -> None:
    pages = {None: (["a", "b"], "t1"), "t1": (["c", "d"], "t2"), "t2": (["e"], None)}
    seen: list[httpx.QueryParams] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        ids, token = pages[request.url.params.get("page_token")]
        return httpx.Response(
            200,
            json={"items": [{"id": i, "status": "ready"} for i in ids], "nextPageToken": token},
        )

    async with _client(handler) as client:
        devices = await client.list_devices(
            labels={"pool": "p"}, statuses=["ready", "busy"], page_size=2
        )
    assert [d["id"] for d in devices] == ["a", "b", "c", "d", "e"]
    assert len(seen) == 3
    assert seen[0].get_list("label") == ["pool=p"]
    assert seen[0].get_list("status") == ["ready", "busy"]
    assert seen[0]["page_size"] == "2"


async def test_a_repeated_page_token_stops_the_listing() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": [], "nextPageToken": "same"})

    async with _client(handler) as client:
        with pytest.raises(ProviderError):
            await client.list_devices(labels={"pool": "p"})


async def test_batch_status_limits_and_shape() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/devices/status:batch"
        ids = json.loads(request.content)["ids"]
        return httpx.Response(
            200, json={"items": [{"id": ids[0], "status": "ready"}], "notFound": ids[1:]}
        )

    async with _client(handler) as client:
        with pytest.raises(ValueError, match="at most 100"):
            await client.batch_status([f"d-{i}" for i in range(101)])
        assert await client.batch_status([]) == ([], [])
        items, not_found = await client.batch_status(["a", "b"])
    assert items == [{"id": "a", "status": "ready"}]
    assert not_found == ["b"]


async def test_device_ids_stay_one_path_segment() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return httpx.Response(202)

    async with _client(handler) as client:
        assert await client.delete_device("../regions") == {}
    assert paths == ["/api/v1/devices/..%2Fregions"]


async def test_timeouts_are_explicit() -> None:
    client = _client(lambda r: httpx.Response(200, json=[]))
    timeout = client._http.timeout
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (3.0, 3.0, 3.0, 3.0)
    assert await client.regions() == []
    await client.aclose()


# ------------------------------------------------------------------ bounded listings


async def test_a_listing_that_never_ends_stops_at_the_page_cap_quickly() -> None:
    pages = 0

    def fresh_token_forever(request: httpx.Request) -> httpx.Response:
        nonlocal pages
        pages += 1
        items = [{"id": f"d-{pages}-{i}", "status": "ready"} for i in range(100)]
        return httpx.Response(200, json={"items": items, "nextPageToken": f"t{pages}"})

    started = time.monotonic()
    error = await _listing_refused(fresh_token_forever)
    assert time.monotonic() - started < 10
    assert error.error_type is ErrorType.SERVER_ERROR
    assert error.retryable
    assert "MAX_LIST_PAGES" in str(error)
    assert pages == bitcloudphone.MAX_LIST_PAGES


async def test_a_listing_stops_at_the_item_cap() -> None:
    def huge_pages(request: httpx.Request) -> httpx.Response:
        token = int(request.url.params.get("page_token") or 0)
        items = [{"id": f"d-{token}-{i}", "status": "ready"} for i in range(5000)]
        return httpx.Response(200, json={"items": items, "nextPageToken": str(token + 1)})

    error = await _listing_refused(huge_pages)
    assert error.error_type is ErrorType.SERVER_ERROR
    assert "MAX_LIST_ITEMS" in str(error)


async def test_a_listing_stops_at_the_time_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bitcloudphone, "MAX_LIST_SECONDS", 0.3)

    async def slow_pages(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.05)
        token = int(request.url.params.get("page_token") or 0)
        return httpx.Response(200, json={"items": [], "nextPageToken": str(token + 1)})

    started = time.monotonic()
    error = await _listing_refused(slow_pages)
    assert time.monotonic() - started < 2
    assert error.error_type is ErrorType.SERVER_ERROR
    assert "MAX_LIST_SECONDS" in str(error)


async def test_a_listing_stops_at_its_total_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bitcloudphone, "MAX_LIST_BYTES", 200_000)

    def fat_pages(request: httpx.Request) -> httpx.Response:
        token = int(request.url.params.get("page_token") or 0)
        items = [{"id": f"d-{token}-{i}", "reason": "x" * 1000} for i in range(50)]
        return httpx.Response(200, json={"items": items, "nextPageToken": str(token + 1)})

    error = await _listing_refused(fat_pages)
    assert "MAX_LIST_BYTES" in str(error)


async def test_an_oversized_answer_is_refused_by_its_content_length_unread() -> None:
    read: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(64):
            read.append(1)
            yield b" " * 1024 * 1024

    def huge(request: httpx.Request) -> httpx.Response:
        headers = {"content-length": str(64 * 1024 * 1024), "content-type": "application/json"}
        return httpx.Response(200, headers=headers, content=body())

    async with _client(huge) as client:
        with pytest.raises(ProviderError) as info:
            await client.list_devices(labels={"pool": "p"})
    assert info.value.error_type is ErrorType.SERVER_ERROR
    assert "MAX_BODY_BYTES" in str(info.value)
    assert read == []  # refused on its Content-Length, before a byte was read


async def test_an_oversized_answer_without_a_length_is_cut_off_while_read() -> None:
    read: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        while True:  # a body that never ends: never held whole
            read.append(1)
            yield b"[" * 1024 * 1024

    async with _client(lambda request: httpx.Response(200, content=endless())) as client:
        with pytest.raises(ProviderError) as info:
            await client.get_device("d-1")
    assert info.value.error_type is ErrorType.SERVER_ERROR
    assert "MAX_BODY_BYTES" in str(info.value)
    assert len(read) <= bitcloudphone.MAX_BODY_BYTES // (1024 * 1024) + 1


async def test_an_oversized_error_answer_keeps_its_status_and_is_read_only_in_part() -> None:
    read: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        while True:
            read.append(1)
            yield b"no " * 100_000

    async with _client(lambda request: httpx.Response(400, content=endless())) as client:
        with pytest.raises(ProviderError) as info:
            await client.get_device("d-1")
    assert info.value.error_type is ErrorType.INVALID_ARGUMENT  # not retried for its size
    assert not info.value.retryable
    assert info.value.detail.startswith("no no no")
    assert len(read) == 1
