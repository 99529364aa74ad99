"""Issue 27 #5: an account's spendCap (worker config) over every pool of the account.

The account `zeta` of this stack's worker config has `spendCap: {maxDevices: 6}`.
A pool of 2 runs; another is scaled 0 → 50: it stops at the cap (4 more), says
`SpendCapReached` with the numbers, and raising the cap in the ledger's
configuration (what a worker restarted with a new config sends) resumes growth.
Ground truth is the emulator: the account never bills more devices than the cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.activities.models import LedgerConfig
from devicepool.api.names import SIGNAL_LEDGER_CONFIGURE, ledger_workflow_id
from devicepool.client.pool_client import PoolClient
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows.ledger.workflow import AccountLedgerWorkflow
from tests.helpers.emulator import provider_devices
from tests.helpers.histories import run_histories, task_failures
from tests.helpers.ratelimit_stack import (
    ACCOUNT_MAX_DEVICES,
    ACCOUNTS,
    CAP,
    CAPPED_ACCOUNT,
    SETTINGS,
    WINDOW,
    name,
)
from tests.helpers.transports import CountingTransport
from tests.helpers.workflow_stack import start_pool
from tests.ratelimit.test_rl_ledger import all_ready

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(90)]

KEY = ACCOUNTS[CAPPED_ACCOUNT]


def ledger_config(max_devices: int | None) -> LedgerConfig:
    """What a worker with `spendCap: {maxDevices: N}` (or none) configures the ledger with."""
    return LedgerConfig(
        capacity=CAP,
        window_seconds=WINDOW,
        margin_seconds=0.3,
        max_devices=max_devices,
        cap_text=f"maxDevices {max_devices}" if max_devices is not None else "",
    )


async def spend_cap(handle: WorkflowHandle[Any, Any]) -> dict[str, Any] | None:
    conditions = (await handle.query("status"))["conditions"]
    return next((c for c in conditions if c["type"] == "SpendCapReached"), None)


async def test_an_account_cap_stops_a_0_to_50_scale_and_raising_it_resumes(
    rl_env: WorkflowEnvironment, rl_workers: list[CountingTransport], rl_control: httpx.AsyncClient
) -> None:
    client = rl_env.client
    ledger = client.get_workflow_handle(ledger_workflow_id(CAPPED_ACCOUNT))
    small, big = name(), name()
    most = 0

    async def billing() -> int:
        return sum([len(await provider_devices(rl_control, KEY, pool)) for pool in (small, big)])

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, await billing())
            await asyncio.sleep(0.1)

    sampler = asyncio.ensure_future(sample())
    handles: list[WorkflowHandle[Any, Any]] = []
    try:
        handles.append(
            await start_pool(
                client, small, 2, settings=SETTINGS, account=CAPPED_ACCOUNT, proxy_ref=None
            )
        )
        await eventually(all_ready(rl_control, KEY, small, 2), timeout=30, what="2 ready")
        handles.append(
            await start_pool(
                client, big, 0, settings=SETTINGS, account=CAPPED_ACCOUNT, proxy_ref=None
            )
        )
        await PoolClient(client).scale(big, 50)

        async def held(allows: int) -> dict[str, Any] | None:
            found = await spend_cap(handles[1])
            if found and found["status"] == "True" and f"allows {allows} " in found["message"]:
                return found
            return None

        condition = await eventually(lambda: held(6), timeout=30, what="SpendCapReached")
        assert condition["reason"] == "AccountCapReached", condition
        assert f"account '{CAPPED_ACCOUNT}' spendCap (maxDevices 6)" in condition["message"]
        assert f"accounts.{CAPPED_ACCOUNT}.spendCap" in condition["message"]
        await eventually(all_ready(rl_control, KEY, big, 4), timeout=30, what="4 ready in big")
        await asyncio.sleep(2 * WINDOW)  # two more windows: nothing more is made
        assert await billing() == 6
        status = await handles[1].query("status")
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "SpendCapReached", ready
        # The pool under its own size is untouched: the cap never terminates.
        assert len(await provider_devices(rl_control, KEY, small)) == 2

        await ledger.signal(SIGNAL_LEDGER_CONFIGURE, ledger_config(10))
        await eventually(lambda: held(10), timeout=30, what="the new cap told")
        await eventually(all_ready(rl_control, KEY, big, 8), timeout=30, what="8 ready in big")
        # A window more at the cap: the sampler sees anything billed past it meanwhile.
        await asyncio.sleep(WINDOW)
        sampler.cancel()
        assert most <= 10, f"{most} devices billed at once under a cap of 10"

        await ledger.signal(SIGNAL_LEDGER_CONFIGURE, ledger_config(None))

        async def released() -> bool:
            found = await spend_cap(handles[1])
            return bool(found and found["status"] == "False")

        await eventually(released, timeout=30, what="SpendCapReached=False once the cap is gone")
        events = [e["reason"] for e in (await handles[1].query("events"))["events"]]
        assert "SpendCapReached" in events and "SpendCapReleased" in events, events
        # The ledger's listing is a new command: its history replays, and no task failed.
        ids = [ledger.id, *(h.id for h in handles)]
        assert [f for i in ids for f in await task_failures(client, i)] == []
        replayer = Replayer(workflows=[AccountLedgerWorkflow], data_converter=DATA_CONVERTER)
        for history in await run_histories(client, ledger.id):
            await replayer.replay_workflow(history)
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        await ledger.signal(SIGNAL_LEDGER_CONFIGURE, ledger_config(ACCOUNT_MAX_DEVICES))
        for handle in handles:
            await handle.cancel()
    assert most <= 10, most
