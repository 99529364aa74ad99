"""What the client puts on the wire, checked with `httpx.MockTransport`."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import SecretStr

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.api.v1alpha1 import Platform


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
    from devicepool.activities.errors import ProviderError

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
