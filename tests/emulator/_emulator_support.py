"""Helpers shared by the emulator tests (imported by conftest and test modules)."""

from __future__ import annotations

from typing import Any

import httpx

from devicepool.emulator.state import Emulator
from tests.support.emulator import ControlPlane

DEV_KEY = "devicepool-dev-key"
AUTH = {"Authorization": f"Bearer {DEV_KEY}"}


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

    def __init__(self, client: httpx.AsyncClient, emulator: Emulator) -> None:
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


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code"}
    assert body["status"] == status
    assert body["code"] == code
    assert body["detail"]
    return body
