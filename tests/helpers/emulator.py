"""The emulator app in process, reached through `httpx.ASGITransport`, for two kinds of test.

- The activities' contract tests (tests/activities): `running_emulator()` yields an
  `Emulator`, whose `client()` is the production `BitCloudPhoneClient` on the
  app's transport. The emulator is written independently of the client: these
  tests are the contract between the two.
- The emulator's own tests (tests/emulator): `Provider`, a thin driver whose
  public-API calls return the raw response, and `assert_problem` for its errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.emulator import state
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import ControlPlane

BASE_URL = "http://bitcloudphone.test"
DEV_KEY = "devicepool-dev-key"
OTHER_KEY = "other-account-key"
AUTH = {"Authorization": f"Bearer {DEV_KEY}"}


# ---------------------------------------------------------------- the client's contract tests


class Emulator(ControlPlane):
    """One emulator app, its transport, and its control plane (`/_emulator/`, through `control`)."""

    def __init__(self, transport: httpx.ASGITransport, control: httpx.AsyncClient) -> None:
        super().__init__(control)
        self.transport = transport
        self.control = control

    def client(self, api_key: str = DEV_KEY) -> BitCloudPhoneClient:
        return BitCloudPhoneClient(base_url=BASE_URL, api_key=api_key, transport=self.transport)


def config(**overrides: Any) -> EmulatorConfig:
    values: dict[str, Any] = {
        "accounts": {"default": [DEV_KEY], "other": [OTHER_KEY]},
        "provision_seconds": 30,
        "terminate_seconds": 5,
        "creates_per_minute": 20,
        "seed": 7,
    }
    values.update(overrides)
    return EmulatorConfig(**values)


@asynccontextmanager
async def running_emulator(**overrides: Any) -> AsyncIterator[Emulator]:
    transport = httpx.ASGITransport(app=create_app(config(**overrides)))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as control:
        yield Emulator(transport=transport, control=control)


# ---------------------------------------------------------------- the emulator's own tests


def device_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "region": "us-west",
        "osVersion": "14",
        "name": "phone",
        "labels": {"pool": "tiktok-us-pool"},
    }
    body.update(overrides)
    return body


class Provider(ControlPlane):
    """A thin test driver over one emulator app: its public API's calls return the raw
    response (`control` too); the control plane's helpers (ControlPlane) raise on an error."""

    def __init__(self, client: httpx.AsyncClient, emulator: state.Emulator) -> None:
        super().__init__(client)
        self.emulator = emulator
        self._keys = 0

    def next_key(self) -> str:
        self._keys += 1
        return f"idem-{self._keys}"

    async def create(
        self,
        *,
        platform: str = "android",
        api_key: str = DEV_KEY,
        idempotency_key: str | None = None,
        **overrides: Any,
    ) -> httpx.Response:
        return await self.http.post(
            f"/api/v1/{platform}/devices",
            json=device_body(**overrides),
            headers={
                "Authorization": f"Bearer {api_key}",
                "Idempotency-Key": idempotency_key or self.next_key(),
            },
        )

    async def create_ok(self, **kwargs: Any) -> dict[str, Any]:
        response = await self.create(**kwargs)
        assert response.status_code == 202, response.text
        return response.json()

    async def get(self, path: str, *, api_key: str = DEV_KEY, **params: Any) -> httpx.Response:
        return await self.http.get(
            path, params=params, headers={"Authorization": f"Bearer {api_key}"}
        )

    async def status(self, device_id: str) -> str:
        response = await self.get(f"/api/v1/devices/{device_id}/status")
        assert response.status_code == 200, response.text
        return response.json()["status"]

    async def control(self, path: str, body: Any = None) -> httpx.Response:
        return await self.http.post(f"/_emulator/{path}", json=body)


async def provider_devices(control: httpx.AsyncClient, key: str, pool: str) -> list[dict[str, Any]]:
    """The devices of `pool` the provider (at `control`) holds for the account of `key`, by its
    own listing; terminated ones left out."""
    response = await control.get(
        "/api/v1/devices",
        params={"label": f"pool={pool}", "page_size": 100},
        headers={"Authorization": f"Bearer {key}"},
    )
    response.raise_for_status()
    return [d for d in response.json()["items"] if d["status"] != "terminated"]


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code"}
    assert body["status"] == status
    assert body["code"] == code
    assert body["detail"]
    return body
