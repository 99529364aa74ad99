"""Fixtures for the activities layer: a fresh in-process emulator per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from tests.helpers.emulator import Emulator, running_emulator


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with running_emulator() as emu:
        yield emu


@pytest.fixture
async def client(emulator: Emulator) -> AsyncIterator[BitCloudPhoneClient]:
    async with emulator.client() as bcp:
        yield bcp
