"""The public /api/v1 contract: auth, create, read, list, batch, reboot, delete, regions, errors."""

from __future__ import annotations

import re

import httpx
import pytest

from devicepool.emulator.app import EmulatorConfig, create_app
from tests.emulator.conftest import creates
from tests.helpers.emulator import AUTH, Provider, assert_problem, device_body

DEVICE_FIELDS = {
    "id",
    "platform",
    "region",
    "osVersion",
    "name",
    "labels",
    "status",
    "reason",
    "sessionActive",
    "lastActivityAt",
    "createdAt",
    "updatedAt",
    "proxy",
}
STATUS_FIELDS = {"id", "status", "reason", "sessionActive", "lastActivityAt", "updatedAt"}
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
PROXY = {
    "type": "socks5",
    "host": "gw.proxy.test",
    "port": 1080,
    "username": "u",
    "password": "s3cret",
}


def test_create_app_defaults_and_state() -> None:
    app = create_app()
    assert app.state.emulator.config == EmulatorConfig()
    assert EmulatorConfig().accounts == {"default": ["devicepool-dev-key"]}


@pytest.mark.parametrize("platform", ["android", "ios"])
async def test_create_returns_provisioning_device(provider: Provider, platform: str) -> None:
    response = await provider.create(platform=platform, labels={"pool": "p", "team": "growth"})
    assert response.status_code == 202
    device = response.json()
    assert set(device) == DEVICE_FIELDS
    assert re.fullmatch(r"dev-[0-9a-f]{16}", device["id"])
    assert device["platform"] == platform
    assert device["status"] == "provisioning"
    assert device["labels"] == {"pool": "p", "team": "growth"}
    assert device["osVersion"] == "14"
    assert device["sessionActive"] is False
    assert device["proxy"] is None
    assert ISO_UTC.match(device["createdAt"]) and ISO_UTC.match(device["updatedAt"])
    assert response.headers["RateLimit-Limit"] == "20"
    assert response.headers["RateLimit-Remaining"] == "19"


async def test_proxy_password_is_never_echoed(provider: Provider) -> None:
    created = await provider.create_ok(proxy=PROXY)
    expected = {k: v for k, v in PROXY.items() if k != "password"}
    assert created["proxy"] == expected
    fetched = await provider.get(f"/api/v1/devices/{created['id']}")
    listed = await provider.get("/api/v1/devices")
    for text in (fetched.text, listed.text, (await provider.stats()).__repr__()):
        assert "s3cret" not in text
    assert fetched.json()["proxy"] == expected


async def test_ids_follow_the_seed(make_provider) -> None:
    ids = []
    for seed in (1, 1, 2):
        provider = await make_provider(seed=seed)
        ids.append([(await provider.create_ok())["id"] for _ in range(3)])
    assert ids[0] == ids[1]
    assert ids[0] != ids[2]


async def test_get_device_and_status(provider: Provider) -> None:
    created = await provider.create_ok()
    device = (await provider.get(f"/api/v1/devices/{created['id']}")).json()
    assert device == created
    status = await provider.get(f"/api/v1/devices/{created['id']}/status")
    assert status.status_code == 200
    assert set(status.json()) == STATUS_FIELDS
    assert status.json()["status"] == "provisioning"


@pytest.mark.parametrize(
    "path",
    ["/api/v1/devices/dev-0000000000000000", "/api/v1/devices/dev-0000000000000000/status"],
)
async def test_unknown_device_is_404(provider: Provider, path: str) -> None:
    assert_problem(await provider.get(path), 404, "not_found")


async def test_unknown_route_and_method_are_problems(provider: Provider) -> None:
    assert_problem(await provider.get("/api/v1/nothing-here"), 404, "not_found")
    assert_problem(await provider.get("/api/v1/android/devices"), 405, "method_not_allowed")


async def test_auth_is_required_everywhere(provider: Provider) -> None:
    created = await provider.create_ok()
    device_id = created["id"]
    calls = [
        provider.http.get("/api/v1/devices"),
        provider.http.get(f"/api/v1/devices/{device_id}"),
        provider.http.get(f"/api/v1/devices/{device_id}/status"),
        provider.http.post("/api/v1/devices/status:batch", json={"ids": [device_id]}),
        provider.http.post(f"/api/v1/devices/{device_id}/reboot"),
        provider.http.delete(f"/api/v1/devices/{device_id}"),
        provider.http.get("/api/v1/regions"),
        provider.http.post(
            "/api/v1/android/devices", json=device_body(), headers={"Idempotency-Key": "x"}
        ),
    ]
    for call in calls:
        response = await call
        assert_problem(response, 401, "unauthenticated")
        assert response.headers["WWW-Authenticate"] == "Bearer"
    bad_key = await provider.create(api_key="wrong")
    assert_problem(bad_key, 401, "unauthenticated")
    basic = await provider.http.get("/api/v1/devices", headers={"Authorization": "Basic abc"})
    assert_problem(basic, 401, "unauthenticated")
    assert (await provider.stats())["creates"]["rejected"] == 2


async def test_accounts_see_only_their_devices(make_provider) -> None:
    provider = await make_provider(accounts={"a": ["key-a"], "b": ["key-b"]})
    mine = await provider.create_ok(api_key="key-a")
    theirs = await provider.create_ok(api_key="key-b")
    listed = (await provider.get("/api/v1/devices", api_key="key-a")).json()
    assert [d["id"] for d in listed["items"]] == [mine["id"]]
    assert_problem(
        await provider.get(f"/api/v1/devices/{theirs['id']}", api_key="key-a"), 404, "not_found"
    )
    deleted = await provider.http.delete(
        f"/api/v1/devices/{theirs['id']}", headers={"Authorization": "Bearer key-a"}
    )
    assert_problem(deleted, 404, "not_found")
    batch = await provider.http.post(
        "/api/v1/devices/status:batch",
        json={"ids": [mine["id"], theirs["id"]]},
        headers={"Authorization": "Bearer key-a"},
    )
    assert [i["id"] for i in batch.json()["items"]] == [mine["id"]]
    assert batch.json()["notFound"] == [theirs["id"]]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"osVersion": "14", "name": "n", "labels": {"pool": "p"}}, "region"),
        (device_body(region=""), "region"),
        (device_body(osVersion=14), "osVersion"),
        (device_body(name=None), "name"),
        (device_body(labels=None), "labels"),
        (device_body(labels={"team": "x"}), "labels.pool"),
        (device_body(labels={"pool": 3}), "labels"),
        (device_body(labels={"pool": "p", "a=b": "c"}), "label key"),
        (device_body(proxy={"type": "ftp", "host": "h", "port": 1}), "proxy.type"),
        (device_body(proxy={"type": "http", "host": "", "port": 1}), "proxy.host"),
        (device_body(proxy={"type": "http", "host": "h", "port": 70000}), "proxy.port"),
        (device_body(proxy={"type": "http", "host": "h", "port": 1, "password": 5}), "password"),
        (device_body(proxy="http://h:1"), "proxy"),
        ([1, 2], "JSON object"),
    ],
)
async def test_create_validates_the_body(provider: Provider, body: object, fragment: str) -> None:
    response = await provider.http.post(
        "/api/v1/android/devices", json=body, headers={**AUTH, "Idempotency-Key": "k"}
    )
    problem = assert_problem(response, 400, "invalid_argument")
    assert fragment in problem["detail"]


async def test_create_rejects_broken_json_and_missing_body(provider: Provider) -> None:
    for content in (b"{not json", b""):
        response = await provider.http.post(
            "/api/v1/android/devices", content=content, headers={**AUTH, "Idempotency-Key": "k"}
        )
        assert_problem(response, 400, "invalid_argument")


async def test_create_requires_idempotency_key(provider: Provider) -> None:
    response = await provider.http.post("/api/v1/ios/devices", json=device_body(), headers=AUTH)
    assert "Idempotency-Key" in assert_problem(response, 400, "invalid_argument")["detail"]
    too_long = await provider.create(idempotency_key="k" * 256)
    assert_problem(too_long, 400, "invalid_argument")
    assert (await provider.stats())["creates"] == creates(rejected=2)


async def test_unknown_platform_is_404(provider: Provider) -> None:
    assert_problem(await provider.create(platform="windows"), 404, "not_found")


async def test_quota_exceeded(make_provider) -> None:
    provider = await make_provider(max_devices_per_account=2, terminate_seconds=0)
    first = await provider.create_ok()
    await provider.create_ok()
    assert_problem(await provider.create(), 402, "quota_exceeded")
    # Terminated devices no longer count against the quota.
    await provider.http.delete(f"/api/v1/devices/{first['id']}", headers=AUTH)
    await provider.create_ok()


async def test_list_filters_by_label_and_status(provider: Provider) -> None:
    a1 = await provider.create_ok(labels={"pool": "a", "tier": "gold"})
    a2 = await provider.create_ok(labels={"pool": "a"})
    b1 = await provider.create_ok(labels={"pool": "b"})
    await provider.http.delete(f"/api/v1/devices/{a2['id']}", headers=AUTH)

    def ids(response) -> list[str]:
        assert response.status_code == 200, response.text
        return [d["id"] for d in response.json()["items"]]

    assert ids(await provider.get("/api/v1/devices")) == [a1["id"], a2["id"], b1["id"]]
    assert ids(await provider.get("/api/v1/devices", label="pool=a")) == [a1["id"], a2["id"]]
    both = await provider.http.get(
        "/api/v1/devices", params=[("label", "pool=a"), ("label", "tier=gold")], headers=AUTH
    )
    assert ids(both) == [a1["id"]]
    assert ids(await provider.get("/api/v1/devices", status="terminating")) == [a2["id"]]
    assert ids(await provider.get("/api/v1/devices", status="provisioning,terminating")) == [
        a1["id"],
        a2["id"],
        b1["id"],
    ]
    assert ids(await provider.get("/api/v1/devices", label="pool=none")) == []
    await provider.advance(60)
    terminated = await provider.get("/api/v1/devices", label="pool=a", status="terminated")
    assert ids(terminated) == [a2["id"]]
    assert_problem(await provider.get("/api/v1/devices", label="pool"), 400, "invalid_argument")
    assert_problem(await provider.get("/api/v1/devices", status="sleepy"), 400, "invalid_argument")


async def test_list_paginates_in_creation_order(provider: Provider) -> None:
    created = []
    for _ in range(7):
        created.append((await provider.create_ok())["id"])
        await provider.advance(1)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        params = {"page_size": 3, **({"page_token": token} if token else {})}
        page = (await provider.get("/api/v1/devices", **params)).json()
        seen += [d["id"] for d in page["items"]]
        pages += 1
        token = page["nextPageToken"]
        if token is None:
            break
    assert seen == created
    assert pages == 3
    full = (await provider.get("/api/v1/devices")).json()
    assert full["nextPageToken"] is None
    assert len(full["items"]) == 7


async def test_list_page_size_bounds_and_token(provider: Provider) -> None:
    for size in (0, 101):
        assert_problem(
            await provider.get("/api/v1/devices", page_size=size), 400, "invalid_argument"
        )
    # FastAPI's own validation errors are answered as problems too.
    assert_problem(await provider.get("/api/v1/devices", page_size="ten"), 400, "invalid_argument")
    bad = await provider.get("/api/v1/devices", page_token="%%%not-a-token")
    assert_problem(bad, 400, "invalid_argument")
    assert (await provider.get("/api/v1/devices", page_size=100)).status_code == 200


async def test_list_default_page_size_is_50(provider: Provider) -> None:
    for _ in range(55):
        provider.emulator.clock.advance(60)  # keep clear of the rate limit
        await provider.create_ok()
    page = (await provider.get("/api/v1/devices")).json()
    assert len(page["items"]) == 50
    rest = (await provider.get("/api/v1/devices", page_token=page["nextPageToken"])).json()
    assert len(rest["items"]) == 5
    assert rest["nextPageToken"] is None


async def test_batch_status(provider: Provider) -> None:
    a = await provider.create_ok()
    b = await provider.create_ok()
    response = await provider.http.post(
        "/api/v1/devices/status:batch",
        json={"ids": [a["id"], "dev-missing", b["id"], a["id"]]},
        headers=AUTH,
    )
    assert response.status_code == 200
    body = response.json()
    assert [i["id"] for i in body["items"]] == [a["id"], b["id"]]
    assert all(set(i) == STATUS_FIELDS for i in body["items"])
    assert body["notFound"] == ["dev-missing"]
    empty = await provider.http.post("/api/v1/devices/status:batch", json={"ids": []}, headers=AUTH)
    assert empty.json() == {"items": [], "notFound": []}


@pytest.mark.parametrize(
    "body", [{"ids": [f"dev-{i}" for i in range(101)]}, {"ids": "dev-1"}, {"ids": [1]}, {}]
)
async def test_batch_status_rejects_bad_bodies(provider: Provider, body: object) -> None:
    response = await provider.http.post("/api/v1/devices/status:batch", json=body, headers=AUTH)
    assert_problem(response, 400, "invalid_argument")


async def test_batch_status_accepts_exactly_100(provider: Provider) -> None:
    ids = [f"dev-{i}" for i in range(100)]
    response = await provider.http.post(
        "/api/v1/devices/status:batch", json={"ids": ids}, headers=AUTH
    )
    assert response.status_code == 200
    assert response.json()["notFound"] == ids


async def test_delete_is_idempotent_and_counts_once(provider: Provider) -> None:
    device = await provider.create_ok()
    path = f"/api/v1/devices/{device['id']}"
    first = await provider.http.delete(path, headers=AUTH)
    assert first.status_code == 202
    assert first.json()["status"] == "terminating"
    again = await provider.http.delete(path, headers=AUTH)
    assert again.status_code == 202
    await provider.advance(5)
    assert await provider.status(device["id"]) == "terminated"
    after = await provider.http.delete(path, headers=AUTH)
    assert after.status_code == 202
    assert after.json()["status"] == "terminated"
    assert (await provider.stats())["terminations"] == 1
    missing = await provider.http.delete("/api/v1/devices/dev-unknown", headers=AUTH)
    assert_problem(missing, 404, "not_found")


async def test_reboot(provider: Provider) -> None:
    device = await provider.create_ok()
    path = f"/api/v1/devices/{device['id']}/reboot"
    assert_problem(await provider.http.post(path, headers=AUTH), 409, "invalid_state")
    await provider.advance(45)
    response = await provider.http.post(path, headers=AUTH)
    assert response.status_code == 202
    assert response.json()["status"] == "rebooting"
    await provider.advance(14)
    assert await provider.status(device["id"]) == "rebooting"
    await provider.advance(1)  # provision_seconds / 3
    assert await provider.status(device["id"]) == "ready"
    await provider.http.delete(f"/api/v1/devices/{device['id']}", headers=AUTH)
    await provider.advance(5)
    assert_problem(await provider.http.post(path, headers=AUTH), 409, "invalid_state")
    missing = await provider.http.post("/api/v1/devices/dev-x/reboot", headers=AUTH)
    assert_problem(missing, 404, "not_found")
    assert (await provider.stats())["extra"]["reboots"] == 1


async def test_regions_default_and_learned(provider: Provider) -> None:
    regions = (await provider.get("/api/v1/regions")).json()
    assert {"name": "us-west", "status": "up"} in regions
    assert {r["name"] for r in regions} >= {"us-east", "eu-west", "eu-central", "ap-southeast"}
    await provider.create_ok(region="mars-north-1")
    regions = (await provider.get("/api/v1/regions")).json()
    assert {"name": "mars-north-1", "status": "up"} in regions


async def test_unexpected_errors_are_500_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(EmulatorConfig(seed=1))

    def explode() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(app.state.emulator, "list_regions", explode)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as client:
        response = await client.get("/api/v1/regions", headers=AUTH)
    assert_problem(response, 500, "server_error")
