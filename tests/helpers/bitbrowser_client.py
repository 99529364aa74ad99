"""The Local API client under test against the BitBrowser emulator, in process.

`Node` wires a `LocalApi` (and its two families) to one emulated node's ASGI
transport, through `Recorder`, which keeps every call's path and body (what
the client sent: page sizes, chunk sizes) and can run a hook before a call
reaches the emulator (to clear a fault once the answer it was meant to lose is
lost). Nothing here speaks for the client: the tests read its public surface.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from devicepool.activities.providers.bitbrowser import (
    BrowserProfiles,
    CloudPhones,
    LocalApi,
    PhonePacer,
)
from tests.helpers.bitbrowser import Account


class Recorder(httpx.AsyncBaseTransport):
    """Passes calls to `inner`, recording `(path, body)`; `before` runs ahead of each call."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.calls: list[tuple[str, Any]] = []
        self.before: Callable[[str, Any], Awaitable[None]] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.url.path, body))
        if self.before is not None:
            await self.before(request.url.path, body)
        return await self.inner.handle_async_request(request)

    def bodies(self, path: str) -> list[Any]:
        return [body for p, body in self.calls if p == path]

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Node:
    """One emulated node as the client sees it."""

    account: Account
    name: str
    api: LocalApi
    recorder: Recorder
    profiles: BrowserProfiles
    phones: CloudPhones
    extra: list[LocalApi] = field(default_factory=list)

    async def aclose(self) -> None:
        for api in (self.api, *self.extra):
            await api.aclose()


# Real seconds from a phone call's answer to the next call (1.25 virtual seconds at
# speed 20): the pace the phone tests' node-1 client keeps.
PHONE_PACE = 0.0625


def node(
    account: Account,
    name: str = "node-1",
    *,
    key: str | None = "default",
    timeout: float = 5.0,
    pacer: PhonePacer | None = None,
) -> Node:
    """A client on `name` with the account's key (`key=None`: none; any other: that one)."""
    recorder = Recorder(account.transports[name])
    api = LocalApi(
        base_url=f"http://{name}.local",
        api_key=account.key if key == "default" else key,
        timeout=timeout,
        transport=recorder,
    )
    return Node(
        account=account,
        name=name,
        api=api,
        recorder=recorder,
        profiles=BrowserProfiles(api, settle_seconds=0.0),
        phones=CloudPhones(api, pacer=pacer or PhonePacer(interval=0.3)),
    )
