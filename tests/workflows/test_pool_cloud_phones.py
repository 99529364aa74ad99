"""A DevicePool on an `api: bitbrowser` account: cloud phones over the Local API, end to end.

A namespace of its own on the session's dev server (the session's workers do not
know this account), a worker whose one account speaks to an in-process BitBrowser
emulator, the real pool, batch and health workflows. The emulator runs 10 times faster than real
time (a boot from off: 20 virtual seconds, 2 real ones) and the adapter paces
its calls 1.1 virtual seconds apart. Its stats are the ground truth: phones
running, profiles made, power-ons, and the 1-request-a-second budget.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.providers.bitbrowser.phone_marks import Remark, parse_device_id
from devicepool.activities.providers.bitbrowser.phone_provider import ANDROID_ONLY
from devicepool.api import parse_pool
from devicepool.api.names import UPDATE_SCALE, pool_workflow_id
from devicepool.api.v1beta1 import ObjectMeta, ReserveSpec
from devicepool.client.pool_client import PoolClient
from devicepool.testing import eventually, pool_manifest
from devicepool.workflows.pool.messages import Accepted, PoolInput, ScaleRequest
from tests.helpers.phones import ACCOUNT, SPEED, Phones, phone_stack
from tests.helpers.settings import PHONES
from tests.helpers.workflow_stack import start_pool

pytestmark = pytest.mark.devserver

KEY = "bb-local-key-e2e"
URL = "http://phones.local"
PROXY_PASSWORD = "phones-proxy-pass-7c1"
# As the worker config tells the pools (`phone_accounts`): their events say `ShutDown`.
SETTINGS = PHONES.model_copy(update={"phone_accounts": [ACCOUNT]})


class PhoneStack(Phones):
    def __init__(self, client: Client, app: Any) -> None:
        super().__init__(client, app)
        self.control = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL)

    async def phones(self) -> dict[str, Any]:
        answer = await self.control.get("/_emulator/stats")
        answer.raise_for_status()
        return dict(answer.json()["phones"])

    async def until(self, what: str, timeout: float = 30, **wanted: int) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            phones = await self.phones()
            return phones if all(phones[k] == v for k, v in wanted.items()) else None

        return dict(await eventually(check, what=what, timeout=timeout))


@pytest.fixture(scope="module")
async def stack(env: WorkflowEnvironment) -> AsyncIterator[PhoneStack]:
    async with phone_stack(
        env,
        name="phones-e2e",
        key=KEY,
        url=URL,
        seed=30,
        proxy_password=PROXY_PASSWORD,
        settings=SETTINGS,
        cancel_pools=False,
    ) as stack:
        phones = PhoneStack(stack.client, stack.app)
        try:
            yield phones
        finally:
            await phones.control.aclose()


async def scale(handle: WorkflowHandle[Any, Any], replicas: int) -> None:
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=replicas), result_type=Accepted)


async def test_a_pool_of_cloud_phones_scales_on_its_warm_reserve_and_never_rents_twice(
    stack: PhoneStack,
) -> None:
    # The module's tests share one emulator, in whatever order the run hands them
    # out (the xdist schedule may put the others first): counts are this test's own.
    before = await stack.phones()
    running, created, profiles = before["running"], before["created"], before["profiles"]
    started = time.monotonic()
    handle = await start_pool(
        stack.client, "phones-a", 2, settings=SETTINGS, account=ACCOUNT, task_queue="devicepool"
    )
    await stack.until("2 phones running", running=running + 2, created=created + 2)

    # Scale-down shuts 1 down: billing stops, its profile stays.
    await scale(handle, 1)
    after_down = await stack.until(
        "1 phone running",
        running=running + 1,
        shutdowns=before["shutdowns"] + 1,
        profiles=profiles + 2,
    )
    assert after_down["created"] == created + 2
    said: dict[str, str] = {}

    async def shut_down_said() -> bool:
        # the provider counts the shutdown before the pool has the activity's answer
        said.update({e["reason"]: e["message"] for e in await _events(handle)})
        return "ShutDown" in said

    await eventually(shut_down_said, timeout=10, what="the ShutDown event")
    assert said["PoweredOn"].startswith("powered on 2 phone(s): "), said
    assert said["ShutDown"].startswith("shut down 1 phone(s): "), said
    assert "ScaledDown" not in said and "terminated" not in str(said), said

    # Scale-up powers the reserve on: no new profile.
    await scale(handle, 2)
    again = await stack.until(
        "2 phones running again", running=running + 2, powerOns=before["powerOns"] + 3
    )
    assert again["created"] == created + 2

    # A phone taken offline is shut down, fresh-started and serves again as the replacement.
    offline = await _a_ready_phone(handle)
    (await stack.control.post(f"/_emulator/phones/{offline}/offline")).raise_for_status()
    replaced = await stack.until(
        "the offline phone replaced",
        recovers=before["recovers"] + 1,
        running=running + 2,
        offline=before["offline"],
    )
    assert replaced["created"] == created + 2

    # Delete: every phone shut down, no profile deleted (the API has none), and said so.
    deleted = await PoolClient(stack.client).delete("phones-a", wait=True, timeout=30)
    assert deleted.closed and deleted.devices_left == 0
    assert deleted.profiles_retired == 2
    retired = [e for e in await _events(handle) if e["reason"] == "ProfilesRetired"]
    assert len(retired) == 1 and "2 cloud-phone profiles" in retired[0]["message"], retired
    assert "no delete" in retired[0]["message"]
    final = await stack.until("0 phones running", running=running)
    elapsed = time.monotonic() - started
    assert final["profiles"] == profiles + 2 and final["created"] == created + 2
    assert final["maxRequestsPerSecond"] <= 1 and final["rateLimited"] == 0
    # Billed phone-hours (virtual) at most 2 phones the whole run, plus boot slack.
    billed = final["hoursBilled"] - before["hoursBilled"]
    assert billed <= 2 * elapsed * SPEED / 3600 + 2 * 20 / 3600
    assert sorted(_states(stack, pool="phones-a")) == ["retired"] * 2


async def test_an_ios_pool_on_a_local_api_account_is_refused_with_a_clear_reason(
    stack: PhoneStack,
) -> None:
    before = await stack.phones()
    handle = await start_pool(
        stack.client,
        "phones-ios",
        1,
        settings=SETTINGS,
        account=ACCOUNT,
        task_queue="devicepool",
        spec_fields={"platform": "ios", "osVersion": "17"},
    )

    async def refused() -> dict[str, Any] | None:
        conditions = (await handle.query("status"))["conditions"]
        ready = next((c for c in conditions if c["type"] == "Ready"), None)
        return ready if ready and ready["reason"] == "UnsupportedPlatform" else None

    ready = await eventually(refused, what="Ready=False UnsupportedPlatform", timeout=20)
    assert ready["status"] == "False" and ANDROID_ONLY in ready["message"], ready
    reasons = [e["reason"] for e in (await handle.query("events"))["events"]]
    assert "CreateFailed" not in reasons, reasons  # refused before any create was tried
    await handle.cancel()
    assert (await stack.phones())["created"] == before["created"]


async def test_a_replacement_keeps_no_reserve_past_the_pools_reserve_keep(
    stack: PhoneStack,
) -> None:
    """`spec.reserve.keep` holds for the health check's removals too, not only scale-down's:
    with `keep: 0`, an offline phone's profile is retired, not fresh-started into reserve."""
    before = await stack.phones()
    manifest = pool_manifest(
        "phones-keep",
        replicas=2,
        providerCredentialRef=ACCOUNT,
        proxy={"poolRef": "proxyseller-us", "stickyTTL": 900},
    )
    spec = parse_pool(manifest).spec.model_copy(update={"reserve": ReserveSpec(keep=0)})
    handle = await stack.client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name="phones-keep"), spec=spec, settings=SETTINGS),
        id=pool_workflow_id("phones-keep"),
        task_queue="devicepool",
    )
    running = before["running"] + 2
    await stack.until("2 phones running", running=running, created=before["created"] + 2)

    async def ready() -> bool:
        return bool((await handle.query("status"))["readyDevices"] == 2)

    await eventually(ready, what="the pool sees 2 ready", timeout=20)
    offline = await _a_ready_phone(handle)
    (await stack.control.post(f"/_emulator/phones/{offline}/offline")).raise_for_status()
    # A new profile replaces it (keep 0: no reserve to power on).
    after = await stack.until(
        "the offline phone replaced", running=running, created=before["created"] + 3
    )
    assert after["recovers"] == before["recovers"], "a profile past keep was fresh-started"
    assert sorted(_states(stack, pool="phones-keep")) == ["active", "active", "retired"]
    await handle.cancel()
    await stack.until("its phones shut down", running=before["running"])


async def _events(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The pool's events, read from its closed run (a worker replays it to answer)."""
    return list((await handle.query("events"))["events"])


async def _a_ready_phone(handle: WorkflowHandle[Any, Any]) -> str:
    devices = (await handle.query("devices"))["devices"]
    ready = [d["id"] for d in devices if d["status"] == "ready"]
    assert ready, devices
    phone = parse_device_id(ready[0])
    assert phone is not None
    return phone[0]


def _states(stack: PhoneStack, *, pool: str | None = None) -> list[str]:
    """The phones' states as their remarks say, read off the emulator itself: a `/phone/list`
    would count against the account's 1-request-a-second budget, which the module's tests
    hold the worker to (a read made while a pool runs could take the worker's slot)."""
    with stack.emulator.transaction(write=False):
        phones = list(stack.emulator.phones.phones.values())
    remarks = [r for p in phones if (r := Remark.parse(p.fields["remark"])) is not None]
    return [r.state for r in remarks if pool is None or r.pool == pool]
