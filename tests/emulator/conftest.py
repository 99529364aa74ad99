"""Fixtures for the emulator's own tests: a fresh app per test, driven with plain httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.emulator.bitbrowser import BitBrowserConfig
from tests.helpers.bitbrowser import Account
from tests.helpers.emulator import Provider

MakeProvider = Callable[..., Awaitable[Provider]]


@pytest.fixture
async def make_provider() -> AsyncIterator[MakeProvider]:
    clients: list[httpx.AsyncClient] = []

    async def make(**config: Any) -> Provider:
        config.setdefault("seed", 7)
        app = create_app(EmulatorConfig(**config))
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://emulator"
        )
        clients.append(client)
        return Provider(client, app.state.emulator)

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
async def provider(make_provider: MakeProvider) -> Provider:
    return await make_provider()


# ---------------------------------------------------------------- the BitBrowser emulator

MakeAccount = Callable[..., Awaitable[Account]]


@pytest.fixture
async def make_account() -> AsyncIterator[MakeAccount]:
    """Build an emulated BitBrowser account: two nodes, instant opens, seeded, unless told."""
    accounts: list[Account] = []

    async def make(**config: Any) -> Account:
        config.setdefault("nodes", ["node-1", "node-2"])
        config.setdefault("open_seconds", 0)
        config.setdefault("seed", 7)
        account = Account(BitBrowserConfig(**config))
        accounts.append(account)
        return account

    yield make
    for account in accounts:
        await account.aclose()


@pytest.fixture
async def account(make_account: MakeAccount) -> Account:
    return await make_account()
