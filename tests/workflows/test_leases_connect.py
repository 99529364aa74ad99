"""Connect info through encrypted history, on the dev server: a worker with a payload codec
(the session server's `encrypted` namespace, the session's REST emulator) answers the
`lease_connect` update with the device's ADB login, and what history stores of it, the update's
answer and the activity's result, is encrypted: the password is nowhere in clear. A pool whose
worker writes in clear refuses the update at once, naming the alternative; a released lease is
refused as gone; a run whose flag is stale asks its worker before the provider. Two pools of one
device; the refusal at once needs none."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings
from devicepool.api import names
from devicepool.codec import ENCODING, EncryptionCodec, KeyRing
from devicepool.connect import connect
from devicepool.testing import eventually
from devicepool.workflows.reconciler.connecting import ConnectAnswer
from devicepool.workflows.reconciler.lease_messages import Granted, LeaseRef
from tests.helpers import leases
from tests.helpers.settings import FAST
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    EMULATOR_URL,
    POLL,
    serving,
    start_pool,
)

pytestmark = pytest.mark.devserver

NAMESPACE = "encrypted"
ACCOUNT = "default"


class Sealed:
    """The `encrypted` namespace: a client with the codec (its workers' and the holder's)."""

    def __init__(self, client: Client, plain: Client) -> None:
        self.client = client
        self.plain = plain  # no key: what anyone reading the stored history sees


@pytest.fixture(scope="module")
async def sealed(
    env: WorkflowEnvironment, emulator: Any, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Sealed]:
    keys = tmp_path_factory.mktemp("keys") / "connect.key"
    keys.write_text(base64.b64encode(os.urandom(32)).decode())
    target = env.client.service_client.config.target_host
    codec = EncryptionCodec(KeyRing.from_files([Path(keys)]))
    client = await connect(address=target, namespace=NAMESPACE, codec=codec)
    plain = await connect(address=target, namespace=NAMESPACE, env={})
    activities = DeviceActivities(
        accounts={
            ACCOUNT: AccountSettings(
                name=ACCOUNT,
                base_url=EMULATOR_URL,
                api_key=SecretStr(ACCOUNTS[ACCOUNT]),
                timeout_seconds=2,
            )
        },
        proxy_pools={},
        # What `encryption.keyFiles` makes a worker say (worker/config.py).
        settings=FAST.model_copy(update={"history_encrypted": True}),
        transport=httpx.ASGITransport(app=emulator),
    )
    async with serving(client, activities, [ACCOUNT]):
        yield Sealed(client, plain)


async def every_event(client: Client, workflow_id: str, first_run: str) -> list[Any]:
    """Every run's events, from the first along its continue-as-new chain (the pool hands
    over every few dozen events here)."""
    events: list[Any] = []
    run: str | None = first_run
    while run:
        history = await client.get_workflow_handle(workflow_id, run_id=run).fetch_history()
        events.extend(history.events)
        last = history.events[-1]
        run = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return events


async def refused(handle: Any, lease: str) -> ApplicationError:
    """The refusal of a `lease_connect` of `lease`."""
    return await leases.refused(
        handle.execute_update(
            names.UPDATE_LEASE_CONNECT, LeaseRef(lease=lease), result_type=ConnectAnswer
        )
    )


async def leased(client: Client, pool_name: str) -> tuple[Any, Granted]:
    """A pool of 1 whose run says its history is encrypted, and its device leased once ready."""
    settings = FAST.model_copy(update={"history_encrypted": True})
    handle = await start_pool(client, pool_name, 1, settings=settings, proxy_ref=None)

    async def ready() -> bool:
        status = await handle.query(names.QUERY_STATUS)
        return bool(status.get("readyDevices") == 1)

    await eventually(ready, timeout=60, every=POLL, what="a ready device")
    return handle, await leases.granted(handle, holder="ci")


async def test_the_adb_login_reaches_its_holder_and_history_only_encrypted(
    sealed: Sealed, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle, lease = await leased(sealed.client, pool_name)
    answer = await handle.execute_update(
        names.UPDATE_LEASE_CONNECT, LeaseRef(lease=lease.lease), result_type=ConnectAnswer
    )
    detail = await control.get(
        f"/api/v1/devices/{lease.device}",
        headers={"Authorization": f"Bearer {ACCOUNTS[ACCOUNT]}"},
    )
    code = detail.json()["connect"]["adb"]["code"]
    adb = answer.connect.adb
    assert answer.device == lease.device and adb is not None and adb.code == code

    # Stored: the update's answer and the activity's result, encrypted; the code nowhere.
    events = await every_event(sealed.plain, handle.id, str(handle.first_execution_run_id))
    stored = b"".join(e.SerializeToString() for e in events)
    assert code.encode() not in stored and adb.ip.encode() not in stored
    completed = [
        e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]  # fmt: skip
    said = [
        e.workflow_execution_update_completed_event_attributes.outcome.success.payloads[0]
        for e in completed
    ]
    assert said and all(p.metadata["encoding"] == ENCODING for p in said)
    results = [
        e.activity_task_completed_event_attributes.result.payloads
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    assert all(p.metadata["encoding"] == ENCODING for one in results for p in one)

    # Released: the lease is gone, and its connect info with it.
    await leases.release(handle, lease.lease)
    gone = await refused(handle, lease.lease)
    assert gone.type == "LeaseGone" and "Released" in gone.message
    await handle.cancel()


async def test_a_pool_whose_worker_writes_in_clear_refuses_at_once(
    sealed: Sealed, pool_name: str
) -> None:
    handle = await start_pool(sealed.client, pool_name, 0, settings=FAST, proxy_ref=None)
    cause = await refused(handle, "no-such-lease")
    assert cause.type == "LeaseRefused"
    assert "devicepool connect POOL LEASE --config WORKER_CONFIG" in cause.message
    await handle.cancel()


async def test_a_run_whose_flag_is_stale_asks_its_worker_before_answering(
    env: WorkflowEnvironment, workers: Any, pool_name: str
) -> None:
    """The session's workers write in clear; a pool told otherwise (its settings carried from
    a run under a worker with keys) still refuses, its workers asked at the update."""
    handle, lease = await leased(env.client, pool_name)
    cause = await refused(handle, lease.lease)
    assert cause.type == "LeaseRefused" and "devicepool connect" in cause.message
    # Refused before the provider was asked: no `lease_connect` activity at all.
    events = await every_event(env.client, handle.id, str(handle.first_execution_run_id))
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert "pool_settings" in scheduled and "lease_connect" not in scheduled
    await handle.cancel()
