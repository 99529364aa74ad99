"""The alert rules on a real Prometheus scraping a running stack, not only `promtool test rules`.

A dev server, the emulator over real HTTP and the production `run_worker` (as
tests/observability/conftest.py builds them, with a second account whose key
the test can revoke at the provider), and Debian's `prometheus` scraping the
worker's `/metrics` every second. Prometheus loads a COPY of
deploy/prometheus/devicepool-rules.yaml rewritten for the test: every `for:`
is 2 s and every range window (`[5m]`, `[10m]`) 8 s; the expressions are
otherwise the shipped ones. Each scenario reads `/api/v1/alerts` (the provider
failing alone, after the three others run side by side):

- a region down at the provider: `DevicePoolBelowDesired` fires, and clears
  when the region is back;
- every provider call answering 500: `DevicePoolProviderErrorRate` fires, and a
  pool deleted meanwhile fires `DevicePoolTeardownBlocked` (cleared once it is gone);
- an account's key revoked: its pool cannot list its devices and
  `DevicePoolBlind` fires, then clears when the key works again;
- a pool of 2 capped at 1 device (`spec.spendCap`): `DevicePoolSpendCapReached`
  fires, and clears once the cap is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from pydantic import SecretStr

from devicepool.activities.models import AccountSettings
from devicepool.api import parse_pool
from devicepool.client import PoolClient
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.testing import ControlPlane, eventually, free_port, free_ports, pool_manifest
from devicepool.worker.config import WorkerConfig
from tests.helpers.manifests import beta_pool
from tests.helpers.obs_stack import OBS_SETTINGS, worker_running
from tests.helpers.programs import program
from tests.helpers.servers import InProcessServer, dev_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "devicepool-rules.yaml"
KEY, BLIND_KEY = "alerts-test-key", "alerts-blind-key"
# Alerts that fire within seconds once the condition holds (`for:` shortened).
FOR = "2s"
# Eight scrapes a second apart: enough for rate(), and an error rate clears 8 s after
# its errors stop (the test waits it out).
WINDOW = "8s"
# The pools pass once a second, not every 0.3 s: the alerts wait on Prometheus (a
# scrape a second, `for:` 2 s), and four pools passing three times a second were
# most of the test's CPU.
SETTINGS = OBS_SETTINGS.model_copy(update={"resync_seconds": 1.0})
STEP_TIMEOUT = 30
# The worker re-reads the pool gauges and statuses as often as Prometheus scrapes them.
GAUGES_EVERY = 1.0


def prometheus() -> str:
    return program("prometheus", "Debian package `prometheus`; `make system-deps` installs it")


def rewrite_rules(source: Path, target: Path) -> None:
    """The shipped rules with `for:` and range windows shortened (see the module docstring)."""
    rules = yaml.safe_load(source.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = FOR
            rule["expr"] = re.sub(r"\[\d+m\]", f"[{WINDOW}]", rule["expr"])
    target.write_text(yaml.safe_dump(rules, sort_keys=False))


class Revocable:
    """ASGI wrapper: what a provider answers once a key was revoked (401 problem+json)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.revoked: set[str] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            if auth.removeprefix("Bearer ").strip() in self.revoked:
                body = {
                    "type": "about:blank",
                    "title": "Unauthorized",
                    "status": 401,
                    "detail": "API key revoked",
                    "code": "unauthenticated",
                }
                headers = [(b"content-type", b"application/problem+json")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": json.dumps(body).encode()})
                return
        await self.app(scope, receive, send)


@dataclass
class AlertStack:
    pools: PoolClient
    control: ControlPlane
    provider: Revocable
    prometheus: httpx.AsyncClient  # one client for every poll: each new one loads the CA bundle

    async def alerts(self, name: str) -> dict[str, str]:
        """Pool (or "" for an alert without one) → state, for alert `name` as Prometheus has it."""
        answer = await self.prometheus.get("/api/v1/alerts")
        answer.raise_for_status()
        return {
            a["labels"].get("pool", ""): a["state"]
            for a in answer.json()["data"]["alerts"]
            if a["labels"]["alertname"] == name
        }

    async def fires(self, name: str, pool: str = "") -> None:
        async def firing() -> bool:
            return (await self.alerts(name)).get(pool) == "firing"

        await eventually(
            firing, timeout=STEP_TIMEOUT, what=f"{name} firing for {pool!r}", every=0.5
        )

    async def clears(self, name: str, pool: str = "") -> None:
        async def gone() -> bool:
            return pool not in await self.alerts(name)

        await eventually(gone, timeout=STEP_TIMEOUT, what=f"{name} cleared for {pool!r}", every=0.5)


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    return prometheus()


@contextlib.contextmanager
def prometheus_process(binary: str, folder: Path, metrics_port: int) -> Iterator[str]:
    """Prometheus on a free port scraping the worker every second with the rewritten rules."""
    rewrite_rules(RULES, folder / "rules.yaml")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(folder / "rules.yaml")],
        "scrape_configs": [
            {
                "job_name": "devicepool-worker",
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            }
        ],
    }
    (folder / "prometheus.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={folder / 'prometheus.yaml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


@pytest.fixture(scope="module")
async def stack(
    prometheus_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AlertStack]:
    emulator_port, metrics_port = free_ports(2)  # distinct: two calls may return one port
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    provider = Revocable(
        create_app(
            EmulatorConfig(
                accounts={"default": [KEY], "blind": [BLIND_KEY]},
                provision_seconds=1,
                creates_per_minute=1000,
                terminate_seconds=0.2,
                seed=29,
            )
        )
    )
    server = InProcessServer(
        uvicorn.Config(
            provider,
            host="127.0.0.1",
            port=emulator_port,
            log_level="warning",
            lifespan="off",
        )
    )
    serving = asyncio.create_task(server.serve())
    accounts = {
        name: AccountSettings(
            name=name,
            base_url=emulator_url,
            api_key=SecretStr(key),
            creates_per_minute=1000,
            timeout_seconds=3,
        )
        for name, key in (("default", KEY), ("blind", BLIND_KEY))
    }
    config = WorkerConfig(
        accounts=accounts,
        proxy_pools={},
        settings=SETTINGS,
        metrics_port=metrics_port,
        graceful_shutdown_seconds=1,
    )
    folder = tmp_path_factory.mktemp("prometheus")
    try:
        async with (
            await dev_server() as env,
            httpx.AsyncClient(base_url=emulator_url, timeout=5) as http,
        ):
            async with worker_running(config, env.client, accounts, every=GAUGES_EVERY):
                with prometheus_process(prometheus_binary, folder, metrics_port) as url:
                    async with httpx.AsyncClient(base_url=url, timeout=5) as prometheus:
                        pools, control = PoolClient(env.client), ControlPlane(http)
                        yield AlertStack(pools, control, provider, prometheus)
    finally:
        server.should_exit = True
        await serving


async def apply(stack: AlertStack, name: str, **spec: Any) -> None:
    await stack.pools.apply(parse_pool(pool_manifest(name, proxy=None, **spec)))


async def ready(stack: AlertStack, name: str, replicas: int) -> None:
    async def serving() -> bool:
        return (await stack.pools.summary(name)).status.get("readyDevices") == replicas

    await eventually(serving, timeout=STEP_TIMEOUT, what=f"{name}: {replicas} ready")


async def test_alerts_fire_and_clear_on_a_real_prometheus(stack: AlertStack) -> None:
    async def scraped() -> bool:
        try:
            answer = await stack.prometheus.get("/api/v1/targets")
        except httpx.TransportError:  # Prometheus is still starting to listen
            return False
        targets = answer.json()["data"]["activeTargets"] if answer.status_code == 200 else []
        return bool(targets) and all(t["health"] == "up" for t in targets)

    await eventually(scraped, timeout=STEP_TIMEOUT, what="Prometheus scraping the worker")
    await apply(stack, "alerts-region", region="us-west", replicas=2)
    await apply(stack, "alerts-teardown", region="us-east", replicas=1)
    await apply(stack, "alerts-blind", region="eu-west", replicas=1, providerCredentialRef="blind")
    for name, replicas in (("alerts-region", 2), ("alerts-teardown", 1), ("alerts-blind", 1)):
        await ready(stack, name, replicas)
    # Below desired while they converged, for a moment: not any more.
    for name in ("alerts-region", "alerts-teardown", "alerts-blind"):
        await stack.clears("DevicePoolBelowDesired", name)

    # Three scenarios side by side (a region, a key, a cap: none touches another's pool),
    # then the one that fails every provider call, alone.
    async with asyncio.TaskGroup() as scenarios:
        scenarios.create_task(region_down(stack))
        scenarios.create_task(key_revoked(stack))
        scenarios.create_task(cap_reached(stack))
    await provider_failing(stack)
    await asyncio.gather(
        *(
            stack.pools.delete(name, wait=True, timeout=30)
            for name in ("alerts-region", "alerts-blind", "alerts-cap")
        )
    )


async def region_down(stack: AlertStack) -> None:
    """A region down at the provider: its devices go offline."""
    await stack.control.region("us-west", "down")
    await stack.fires("DevicePoolBelowDesired", "alerts-region")
    assert "alerts-teardown" not in await stack.alerts("DevicePoolBelowDesired")
    await stack.control.region("us-west", "up")
    await stack.clears("DevicePoolBelowDesired", "alerts-region")


async def key_revoked(stack: AlertStack) -> None:
    """The blind account's key revoked at the provider: its pool cannot list its devices."""
    assert "alerts-blind" not in await stack.alerts("DevicePoolBlind")
    stack.provider.revoked.add(BLIND_KEY)
    try:
        await stack.fires("DevicePoolBlind", "alerts-blind")
        assert "alerts-region" not in await stack.alerts("DevicePoolBlind")
    finally:
        stack.provider.revoked.clear()
    await stack.clears("DevicePoolBlind", "alerts-blind")


async def cap_reached(stack: AlertStack) -> None:
    """A pool of 2 that may rent 1 device."""
    assert await stack.alerts("DevicePoolSpendCapReached") == {}
    await stack.pools.apply(capped("alerts-cap", max_devices=1))
    await stack.fires("DevicePoolSpendCapReached", "alerts-cap")
    await stack.pools.apply(capped("alerts-cap", max_devices=2))
    await stack.clears("DevicePoolSpendCapReached", "alerts-cap")


async def provider_failing(stack: AlertStack) -> None:
    """Every provider call answers 500; a pool deleted meanwhile cannot finish. (The
    scenarios before it fail calls too, a revoked key and a region refusing creates:
    the rate clears first.)"""
    await stack.clears("DevicePoolProviderErrorRate")
    await stack.control.faults(serverErrorRate=1.0)
    try:
        await stack.pools.delete("alerts-teardown")
        await stack.fires("DevicePoolProviderErrorRate")
        await stack.fires("DevicePoolTeardownBlocked", "alerts-teardown")
    finally:
        await stack.control.faults()
    await stack.clears("DevicePoolTeardownBlocked", "alerts-teardown")


def capped(name: str, *, max_devices: int) -> Any:
    """A v1beta1 pool of 2 devices whose spend cap allows `max_devices`."""
    return beta_pool(name, 2, region="ap-southeast", spendCap={"maxDevices": max_devices})
