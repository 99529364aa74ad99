"""The GeeLark Open API emulator in process, for its own tests (tests/emulator).

`Team` is one emulated team behind `httpx.ASGITransport`; `call` signs a request the way the
vendor's docs say (key mode by default, `mode="token"` for a Bearer token) and returns the
raw response; `ok` and `refused` unwrap the envelope and check it. The emulator is written
apart from any client: nothing here speaks for one.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from devicepool.emulator.geelark import GeeLarkConfig, GeeLarkEmulator, create_app, sign

BASE = "http://openapi.geelark.local"


def phone_row(name: str = "pool-g/0", **overrides: Any) -> dict[str, Any]:
    """One `phone/addNew` item, its proxy carrying a password as a real one does."""
    row: dict[str, Any] = {
        "profileName": name,
        "proxyInformation": "socks5://gl-user:gl-proxy-secret@100.200.200.100:30000",
        "profileGroup": "devicepool",
        "profileTags": ["pool=pool-g"],
        "profileNote": "devicepool pool=pool-g slot=0",
    }
    row.update(overrides)
    return row


def signed_headers(
    config: GeeLarkConfig, mode: str = "key", trace_id: str | None = None
) -> dict[str, str]:
    """A call's auth headers as the docs describe them: a key-mode signature, or a token."""
    trace_id = trace_id or str(uuid.uuid4())
    if mode == "token":
        assert config.token is not None
        return {"traceId": trace_id, "Authorization": f"Bearer {config.token}"}
    assert config.app_id is not None and config.api_key is not None
    ts, nonce = "1716972892166", trace_id[:6]
    return {
        "appId": config.app_id,
        "traceId": trace_id,
        "ts": ts,
        "nonce": nonce,
        "sign": sign(config.app_id, trace_id, ts, nonce, config.api_key),
    }


class Team:
    """One emulated team and a client for it."""

    def __init__(self, config: GeeLarkConfig) -> None:
        self.config = config
        self.app = create_app(config)
        self.emulator: GeeLarkEmulator = self.app.state.emulator
        self.transport = httpx.ASGITransport(app=self.app)
        self.http = httpx.AsyncClient(transport=self.transport, base_url=BASE)

    def headers(self, mode: str = "key", trace_id: str | None = None) -> dict[str, str]:
        return signed_headers(self.config, mode, trace_id)

    async def call(
        self,
        path: str,
        body: Any = None,
        *,
        mode: str = "key",
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        given = self.headers(mode) if headers is None else headers
        url = path if path.startswith("/open/") else f"/open/v1/{path}"
        return await self.http.post(url, json={} if body is None else body, headers=given)

    async def ok(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        """The `data` of a successful call (code 0)."""
        response = await self.call(path, body, **kwargs)
        assert response.status_code == 200, response.text
        envelope = response.json()
        assert set(envelope) == {"traceId", "code", "msg", "data"}, envelope
        assert envelope["code"] == 0, envelope
        return envelope["data"]

    async def refused(self, path: str, body: Any = None, **kwargs: Any) -> int:
        """The envelope code of a refused call (HTTP 200, `data` null)."""
        response = await self.call(path, body, **kwargs)
        assert response.status_code == 200, response.text
        envelope = response.json()
        assert envelope["code"] != 0 and envelope["data"] is None, envelope
        return int(envelope["code"])

    async def create(self, *names: str, mode: str = "key", **body: Any) -> list[str]:
        """Create phones by name (shut down): their ids."""
        rows = [phone_row(name) for name in names or ("pool-g/0",)]
        body = {"mobileType": "Android 12", "data": rows, **body}
        data = await self.ok("phone/addNew", body, mode=mode)
        assert data["failAmount"] == 0, data
        return [d["id"] for d in data["details"]]

    async def status(self, *ids: str, mode: str = "key") -> dict[str, int]:
        data = await self.ok("phone/status", {"ids": list(ids)}, mode=mode)
        return {d["id"]: d["status"] for d in data["successDetails"]}

    async def stats(self) -> dict[str, Any]:
        response = await self.http.get("/_emulator/stats")
        assert response.status_code == 200
        return response.json()

    async def advance(self, seconds: float) -> None:
        response = await self.http.post("/_emulator/clock", json={"advanceSeconds": seconds})
        assert response.status_code == 200, response.text

    async def to_next_utc_day(self) -> None:
        """On to just past the next UTC midnight of the emulator's clock (a new day's quotas)."""
        now = self.emulator.now()
        await self.advance(self.emulator.days.next_midnight(now) - now + 0.001)

    async def faults(self, **faults: Any) -> None:
        response = await self.http.post("/_emulator/faults", json=faults)
        assert response.status_code == 200, response.text

    async def aclose(self) -> None:
        await self.http.aclose()
        self.emulator.close()  # with a state file: written, and let go


@asynccontextmanager
async def team(**config: Any) -> AsyncIterator[Team]:
    """A fresh team, seeded, its clock all but stopped: the tests move it (`advance`)."""
    config.setdefault("seed", 7)
    config.setdefault("speed", 1e-6)
    made = Team(GeeLarkConfig(**config))
    try:
        yield made
    finally:
        await made.aclose()
