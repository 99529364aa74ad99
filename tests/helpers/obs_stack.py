"""What the observability tests share besides fixtures (those are in conftest.py).

A uniquely named module: `from conftest import ...` would pick whichever
`conftest` was imported first when several test folders run together.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from tests.support.emulator import ControlPlane
from tests.support.settings import FAST

API_KEY = "obs-test-key"
# The workflow tests' intervals (a copy: what changes here changes the observability tests only).
OBS_SETTINGS = FAST.model_copy()


@dataclass
class ObsStack:
    client: Client
    ui_port: int
    metrics_url: str
    emulator_url: str

    async def scrape_text(self) -> str:
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"{self.metrics_url}/metrics")
        answer.raise_for_status()
        return answer.text

    async def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of a scrape, keyed by (name, labels)."""
        text = await self.scrape_text()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def value(self, name: str, **labels: str) -> float | None:
        return (await self.samples()).get((name, frozenset(labels.items())))

    async def faults(self, **rates: float) -> None:
        async with httpx.AsyncClient(base_url=self.emulator_url, timeout=5) as http:
            await ControlPlane(http).faults(**rates)
