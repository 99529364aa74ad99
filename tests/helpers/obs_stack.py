"""The session stack of tests/observability: what it is (`ObsStack`) and when its worker serves.

tests/observability/conftest.py starts it: a dev server with the Web UI, the
emulator over real HTTP and the production `run_worker`; `ObsStack` scrapes the
worker's `/metrics` and sets the emulator's faults.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from devicepool.api.names import ledger_workflow_id
from devicepool.testing import ControlPlane
from tests.helpers.settings import FAST

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


async def worker_serves(client: Client, account: str, worker: asyncio.Task[None]) -> None:
    """Wait for the worker's permit ledger of `account`: `PoolClient.apply` refuses
    a pool whose account no worker serves, and the worker starts it asynchronously."""
    handle = client.get_workflow_handle(ledger_workflow_id(account))
    for _ in range(150):
        if worker.done():
            worker.result()
            raise AssertionError("the worker stopped before it started its ledger")
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no running ledger for account {account!r} after 15 s")
