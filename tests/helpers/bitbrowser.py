"""The BitBrowser Local API emulator in process, for its own tests (tests/emulator).

`Account` is one emulated account and its nodes, each reached through
`httpx.ASGITransport`; `call` returns the raw response, `ok` and `refused`
unwrap the envelope and check its shape. The emulator is written apart from
any client: nothing here speaks for one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from devicepool.emulator.bitbrowser import BitBrowserConfig, BitBrowserEmulator, create_apps

KEY = "bitbrowser-dev-key"
CJK = re.compile(r"[\u4e00-\u9fff]")


def profile_body(**overrides: Any) -> dict[str, Any]:
    """A create body with what the vendor requires (proxy method and type, a fingerprint)."""
    body: dict[str, Any] = {
        "name": "pool-a/0",
        "remark": "devicepool pool=pool-a slot=0",
        "proxyMethod": 2,
        "proxyType": "socks5",
        "host": "gw.proxy.example",
        "port": 1080,
        "proxyUserName": "user-session-0",
        "proxyPassword": "proxy-secret-0",
        "browserFingerPrint": {},
    }
    body.update(overrides)
    return body


def phone_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "regionId": "d69bcf13db844d1cb81e779f64161223",
        "computeType": 1,
        "name": "pool-p/0",
        "remark": "devicepool pool=pool-p slot=0",
        "host": "1.2.3.4",
        "port": 45001,
        "proxyUserName": "phone-user",
        "proxyPassword": "phone-proxy-secret",
        "ipCheckService": "ip123in",
        "udp": 1,
        "cloudPhonesFingerPrint": {},
    }
    body.update(overrides)
    return body


class Account:
    """One emulated account and its nodes' apps, each behind an httpx client."""

    def __init__(self, config: BitBrowserConfig) -> None:
        apps = create_apps(config)
        self.emulator: BitBrowserEmulator = next(iter(apps.values())).state.emulator
        self.nodes = list(apps)
        # A client under test takes a node's transport (its base URL is its own).
        self.transports = {name: httpx.ASGITransport(app=app) for name, app in apps.items()}
        self.http = {
            name: httpx.AsyncClient(transport=transport, base_url=f"http://{name}.local")
            for name, transport in self.transports.items()
        }
        self.key = config.api_key

    async def aclose(self) -> None:
        for client in self.http.values():
            await client.aclose()

    async def call(
        self, path: str, body: Any = None, *, node: str = "node-1", key: str | None = "default"
    ) -> httpx.Response:
        headers = {}
        api_key = self.key if key == "default" else key
        if api_key is not None:
            headers["x-api-key"] = api_key
        return await self.http[node].post(path, json=body, headers=headers)

    async def ok(self, path: str, body: Any = None, *, node: str = "node-1") -> Any:
        response = await self.call(path, body, node=node)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["success"] is True, answer
        assert set(answer) <= {"success", "data"}
        return answer.get("data")

    async def refused(
        self, path: str, body: Any = None, *, node: str = "node-1", status: int = 200
    ) -> str:
        response = await self.call(path, body, node=node)
        return refusal_of(response, status)

    async def create(self, node: str = "node-1", **overrides: Any) -> dict[str, Any]:
        data = await self.ok("/browser/update", profile_body(**overrides), node=node)
        assert isinstance(data, dict)
        return data

    async def control(self, path: str, body: Any = None, *, node: str = "node-1") -> Any:
        response = await self.http[node].post(f"/_emulator/{path}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    async def advance(self, seconds: float) -> None:
        await self.control("clock", {"advanceSeconds": seconds})

    async def faults(self, **faults: Any) -> None:
        await self.control("faults", faults)

    async def stats(self, node: str = "node-1") -> dict[str, Any]:
        response = await self.http[node].get("/_emulator/stats")
        assert response.status_code == 200, response.text
        return response.json()


def refusal_of(response: httpx.Response, status: int = 200) -> str:
    """The `msg` of an envelope refusal: Chinese free text, no code beside it."""
    assert response.status_code == status, response.text
    answer = response.json()
    assert set(answer) == {"success", "msg"}, answer
    assert answer["success"] is False
    assert CJK.search(answer["msg"]), answer["msg"]
    return str(answer["msg"])


@asynccontextmanager
async def accounts_started(**defaults: Any) -> AsyncIterator[Callable[..., Account]]:
    """A factory of `Account`s: `make(**config)` starts one on `defaults` updated by
    `config`; each is closed (its emulator and its clients) on leaving."""
    started: list[Account] = []

    def make(**config: Any) -> Account:
        account = Account(BitBrowserConfig(**{**defaults, **config}))
        started.append(account)
        return account

    try:
        yield make
    finally:
        for account in started:
            account.emulator.close()
            await account.aclose()
