"""The emulator's ground truth, read alike in process (`httpx.ASGITransport`) and over HTTP.

Every reader takes an `httpx.AsyncClient` whose base URL is the emulator,
whatever its transport; `stats_sync` is the one for synchronous tests of a
real emulator process.
"""

from __future__ import annotations

from typing import Any

import httpx

STATS = "/_emulator/stats"


def _json(response: httpx.Response) -> Any:
    response.raise_for_status()
    return response.json()


async def stats(http: httpx.AsyncClient) -> dict[str, Any]:
    """`GET /_emulator/stats`: every account's counters (session-wide, not one pool's)."""
    return dict(_json(await http.get(STATS)))


def stats_sync(base_url: str, *, timeout: float = 5) -> dict[str, Any]:
    """`stats` of the emulator at `base_url` (`http://127.0.0.1:PORT`), blocking."""
    return dict(_json(httpx.get(f"{base_url}{STATS}", timeout=timeout)))


async def labelled_devices(
    http: httpx.AsyncClient, pool: str, *, api_key: str
) -> list[dict[str, Any]]:
    """Every device of one account labelled `pool=POOL`, terminated ones included (all pages)."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"label": f"pool={pool}", "page_size": 100}
        if token:
            params["page_token"] = token
        body = _json(
            await http.get(
                "/api/v1/devices", params=params, headers={"Authorization": f"Bearer {api_key}"}
            )
        )
        items += body["items"]
        token = body.get("nextPageToken")
        if not token:
            return items


async def create_device(
    http: httpx.AsyncClient,
    *,
    api_key: str,
    name: str,
    labels: dict[str, str],
    idempotency_key: str,
    platform: str = "android",
) -> httpx.Response:
    """A create straight at the provider (Android 14 in us-west), as another tool or a
    batch that lost its answer would make it; the raw response."""
    return await http.post(
        f"/api/v1/{platform}/devices",
        json={"region": "us-west", "osVersion": "14", "name": name, "labels": labels},
        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": idempotency_key},
    )


async def pool_counts(http: httpx.AsyncClient, pool: str, *, api_key: str) -> dict[str, int]:
    """One pool's own counters, from its labelled devices: `created` (accepted creates) and
    `terminated` (deleted: terminating or terminated). Unlike `stats`, nothing another
    test left running moves them."""
    devices = await labelled_devices(http, pool, api_key=api_key)
    gone = {"terminating", "terminated"}
    return {"created": len(devices), "terminated": sum(1 for d in devices if d["status"] in gone)}


class ControlPlane:
    """The emulator's `/_emulator/` endpoints through `http` (in process or over HTTP); every
    call raises `httpx.HTTPStatusError` on an error status."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def post(self, path: str, body: Any = None) -> Any:
        """`POST /_emulator/PATH` with `body` as JSON; its JSON answer."""
        return _json(await self.http.post(f"/_emulator/{path}", json=body))

    async def advance(self, seconds: float) -> None:
        await self.post("clock", {"advanceSeconds": seconds})

    async def faults(self, **faults: Any) -> None:
        await self.post("faults", faults)

    async def region(self, name: str, status: str) -> None:
        await self.post(f"regions/{name}", {"status": status})

    async def session(self, device_id: str, *, active: bool) -> None:
        await self.post(f"devices/{device_id}/session", {"active": active})

    async def stats(self) -> dict[str, Any]:
        return await stats(self.http)
