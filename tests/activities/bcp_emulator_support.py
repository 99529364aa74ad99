"""Helpers: the real emulator app in-process, reached through `httpx.ASGITransport`.

The emulator is written independently of the client (DESIGN.md): these tests are
the contract between the two.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.emulator.app import EmulatorConfig, create_app
from tests.support.emulator import stats as emulator_stats

BASE_URL = "http://bitcloudphone.test"
DEV_KEY = "devicepool-dev-key"
OTHER_KEY = "other-account-key"


@dataclass
class Emulator:
    """One emulator app, its transport, and a control-plane client for `/_emulator/`."""

    transport: httpx.ASGITransport
    control: httpx.AsyncClient

    def client(self, api_key: str = DEV_KEY) -> BitCloudPhoneClient:
        return BitCloudPhoneClient(base_url=BASE_URL, api_key=api_key, transport=self.transport)

    async def _post(self, path: str, body: Any) -> Any:
        response = await self.control.post(path, json=body)
        response.raise_for_status()
        return response.json()

    async def advance(self, seconds: float) -> None:
        await self._post("/_emulator/clock", {"advanceSeconds": seconds})

    async def faults(self, **faults: Any) -> None:
        await self._post("/_emulator/faults", faults)

    async def region(self, name: str, status: str) -> None:
        await self._post(f"/_emulator/regions/{name}", {"status": status})

    async def session(self, device_id: str, *, active: bool) -> None:
        await self._post(f"/_emulator/devices/{device_id}/session", {"active": active})

    async def stats(self) -> dict[str, Any]:
        return await emulator_stats(self.control)


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
