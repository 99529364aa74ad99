"""One dev server, one sped-up emulator and two in-process "worker processes" for the rate tests.

The emulator runs 20x faster (its 60-s window lasts 3 s of real time) with a
small cap per account; the workers' ledgers are configured with the same
scaled window. The two workers are two sets of `Worker` objects on two
separate Temporal clients in this process (real processes would cost seconds
each to start): as far as Temporal is concerned they are two pollers of every
queue, so a create may run on either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings
from devicepool.api.v1beta1 import SpendCapSpec
from devicepool.connect import connect
from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.worker.accounts import register_accounts
from devicepool.worker.build import account_workers, pool_queue_workers
from tests.helpers.ratelimit_stack import (
    ACCOUNT_MAX_DEVICES,
    ACCOUNTS,
    CAP,
    CAPPED_ACCOUNT,
    SPEED,
    URL,
    WINDOW,
)
from tests.helpers.servers import dev_server
from tests.helpers.settings import FAST
from tests.helpers.transports import CountingTransport
from tests.helpers.workflow_stack import cancel_running_pools


@pytest.fixture(autouse=True)
async def _no_pool_left_running(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """A test that failed before its own cleanup leaves no pool running into the next one."""
    yield
    if "rl_env" not in request.fixturenames:
        return
    await cancel_running_pools(request.getfixturevalue("rl_env").client)


@pytest.fixture(autouse=True)
def _transport_switches_reset() -> Iterator[None]:
    """Each test starts with the transports' switches off, whatever the previous one left."""
    CountingTransport.reset()
    yield
    CountingTransport.reset()


@pytest.fixture(scope="session")
async def rl_env() -> AsyncIterator[WorkflowEnvironment]:
    async with await dev_server() as env:
        yield env


@pytest.fixture(scope="session")
def rl_emulator() -> Any:
    return create_app(
        EmulatorConfig(
            accounts={name: [key] for name, key in ACCOUNTS.items()},
            provision_seconds=10,  # 0.5 s real
            creates_per_minute=CAP,
            terminate_seconds=1,
            speed=SPEED,
            seed=11,
        )
    )


@pytest.fixture(scope="session")
async def rl_control(rl_emulator: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=rl_emulator), base_url=URL
    ) as http:
        yield http


def account_settings() -> dict[str, AccountSettings]:
    return {
        name: AccountSettings(
            name=name,
            base_url=URL,
            api_key=SecretStr(key),
            creates_per_minute=CAP,
            timeout_seconds=2,
            window_seconds=WINDOW,
            window_margin_seconds=0.3,
            spend_cap=SpendCapSpec(max_devices=ACCOUNT_MAX_DEVICES)
            if name == CAPPED_ACCOUNT
            else None,
        )
        for name, key in ACCOUNTS.items()
    }


@pytest.fixture(scope="session")
async def rl_workers(
    rl_env: WorkflowEnvironment, rl_emulator: Any
) -> AsyncIterator[list[CountingTransport]]:
    """Two independent workers (own client, own activities), both registering the ledgers."""
    transports: list[CountingTransport] = []
    workers: list[Worker] = []
    all_activities: list[DeviceActivities] = []
    target = rl_env.client.service_client.config.target_host
    for _ in range(2):
        client = await connect(address=target)
        transport = CountingTransport(rl_emulator)
        activities = DeviceActivities(
            accounts=account_settings(), proxy_pools={}, settings=FAST, transport=transport
        )
        await register_accounts(client, account_settings())
        workers += pool_queue_workers(client, activities)
        workers += account_workers(client, activities, list(ACCOUNTS))
        transports.append(transport)
        all_activities.append(activities)
    for w in workers:
        await w.__aenter__()
    try:
        yield transports
    finally:
        for w in workers:
            await w.__aexit__(None, None, None)
        for a in all_activities:
            await a.aclose()
