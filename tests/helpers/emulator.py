"""Helpers: the real emulator app in-process, reached through `httpx.ASGITransport`.

The emulator is written independently of the client (DESIGN.md): these tests are
the contract between the two.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.emulator.app import EmulatorConfig, create_app
from tests.support.emulator import ControlPlane

BASE_URL = "http://bitcloudphone.test"
DEV_KEY = "devicepool-dev-key"
OTHER_KEY = "other-account-key"


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
