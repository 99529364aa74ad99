"""Constants and helpers shared by the rate-limit tests (fixtures are in conftest.py)."""

from __future__ import annotations

from typing import Any

import httpx

URL = "http://emulator.rl"
SPEED = 20.0
WINDOW = 60.0 / SPEED
CAP = 5
# one account per test, so windows do not mix
ACCOUNTS = {"alpha": "rl-alpha", "beta": "rl-beta", "gamma": "rl-gamma"}


class CountingTransport(httpx.ASGITransport):
    """Counts the create calls that went through this worker."""

    def __init__(self, app: Any) -> None:
        super().__init__(app=app)
        self.creates = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/devices"):
            self.creates += 1
        return await super().handle_async_request(request)
