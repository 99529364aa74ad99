"""Fixtures for the activities layer: a fresh in-process emulator per test, and the
phone tests' paced client on their module's BitBrowser `account`'s node-1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.providers.bitbrowser import PhonePacer
from tests.helpers.bitbrowser import Account
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
