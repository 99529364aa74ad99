"""Fixtures for the activities layer: a fresh in-process emulator per test, the
phone tests' paced client on their module's BitBrowser `account`'s node-1, and
`lost_answer`, a recorder hook under which a create goes out and its answer is lost;
`bitbrowser_account(...)` makes a module's `account` fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.providers.bitbrowser import PhonePacer
from devicepool.emulator.bitbrowser import BitBrowserConfig
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.bitbrowser_client import PHONE_PACE, Node, node
from tests.helpers.emulator import Emulator, running_emulator


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with running_emulator() as emu:
        yield emu


@pytest.fixture
async def client(emulator: Emulator) -> AsyncIterator[BitCloudPhoneClient]:
    async with emulator.client() as bcp:
        yield bcp


@pytest.fixture
async def n1(account: Account) -> AsyncIterator[Node]:
    """A client on node-1 of the module's `account` fixture, its phone calls `PHONE_PACE`
    apart (a module whose node-1 client differs defines its own `n1`)."""
    client = node(account, pacer=PhonePacer(interval=PHONE_PACE))
    yield client
    await client.aclose()


Before = Callable[[str, Any], Awaitable[None]]
LostAnswer = Callable[[str, str], tuple[Before, list[Any]]]


@pytest.fixture
def lost_answer(account: Account) -> LostAnswer:
    """`before, sent = lost_answer(path, field)`: a `Recorder.before` hook under which every
    request to `path` goes out (its body's `field` noted in `sent`) and its answer is lost
    (the module's `account` times calls out until the next request clears its faults)."""

    def hook(path: str, field: str) -> tuple[Before, list[Any]]:
        sent: list[Any] = []

        async def before(called: str, body: Any) -> None:
            if called == path:
                sent.append(body[field])
                await account.faults(timeoutRate=1.0, timeoutSeconds=30)
            elif sent:
                await account.faults()

        return before, sent

    return hook


def bitbrowser_account(**config: Any) -> Any:
    """A module's `account` fixture: an emulated BitBrowser account (`BitBrowserConfig` of
    `config`, the dev `KEY` unless told), fresh for each test."""

    @pytest.fixture
    async def account() -> AsyncIterator[Account]:
        made = Account(BitBrowserConfig(**{"api_key": KEY, **config}))
        yield made
        await made.aclose()

    return account
