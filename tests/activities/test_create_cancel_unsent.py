"""A create cancelled while it still waits inside the worker is never sent (R27, F23).

`finish_even_if_cancelled` lets a create already on its way to the provider land
through a cancel (the pool's final sweep must see it). A create still waiting in
this process (its slot's lock, a claim lock, a pacer's turn) has sent nothing: a
cancel then ends it, cancelled, and no request of it goes out afterwards. Before,
the whole call was shielded: such a create went to the provider after its pool's
cancel, and, past the activity's 20 s, after the pool's sweep (an orphan that bills).
Each adapter with an in-process wait before its create is checked, and each one's
create in flight still finishes with its device.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities
from devicepool.activities import heartbeats as hb
from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.models import CreateDeviceInput, CreateDeviceResult, DeviceTemplate
from devicepool.activities.providers.base import Provider
from devicepool.activities.providers.bitbrowser.phone_marks import slot_mark as phone_slot_mark
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from devicepool.activities.providers.geelark import EndpointPacer
from devicepool.activities.providers.geelark.marks import slot_mark as geelark_slot_mark
from devicepool.activities.providers.geelark.provider import GeeLarkProvider
from devicepool.activities.providers.rest import RestProvider
from devicepool.activities.settings import ProxyPoolSettings
from tests.activities.conftest import bitbrowser_account
from tests.activities.geelark_fake import Clock, Fake
from tests.helpers.bitbrowser import Account
from tests.helpers.bitbrowser_client import Node
from tests.helpers.emulator import BASE_URL, DEV_KEY, Emulator

PROXY = ProxyPoolSettings(
    name="gw",
    type="socks5",
    host="gw.proxy.test",
    port=1080,
    username_template="user-session-{session}",
    password=SecretStr("phone-proxy-pass-Qv7"),
)
PHONE_REGION = "d69bcf13db844d1cb81e779f64161223"

account = bitbrowser_account(speed=20.0, seed=5)


def _activities(name: str, provider: Provider) -> DeviceActivities:
    acts = DeviceActivities(accounts={}, proxy_pools={"gw": PROXY})
    acts._providers[name] = provider
    return acts


def _input(account: str, template: DeviceTemplate, pool: str = "p1") -> CreateDeviceInput:
    return CreateDeviceInput(
        account=account, pool=pool, template=template, name=f"{pool}-0", idempotency_key="k-0"
    )


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


class Gate:
    """Holds whoever awaits `passing()` until `open()`; `reached` once one waits."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self._open = asyncio.Event()

    async def passing(self) -> None:
        self.reached.set()
        await self._open.wait()

    def open(self) -> None:
        self._open.set()


async def _cancel_at(
    env: ActivityEnvironment, running: Awaitable[Any], gate: Gate
) -> asyncio.Future[Any]:
    """Cancel the activity once it waits at `gate`, then let the gate go."""
    task = asyncio.ensure_future(running)
    await asyncio.wait_for(gate.reached.wait(), timeout=10)
    env.cancel()
    await asyncio.sleep(0.05)  # the cancel handled before anything moves on
    gate.open()
    return task


# ------------------------------------------------------------ the seam itself


async def test_a_call_cancelled_before_its_point_of_no_return_ends_cancelled_unsent() -> None:
    gate, sent = Gate(), []

    async def create() -> str:
        await gate.passing()  # a lock, a pacer's turn
        hb.point_of_no_return()
        sent.append("create")
        return "device-1"

    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(hb.finish_even_if_cancelled, create()), gate)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await asyncio.sleep(0.05)
    assert sent == []


async def test_a_call_past_its_point_of_no_return_finishes_and_beats_through_a_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hb, "HEARTBEAT_EVERY", timedelta(seconds=0.02))
    gate, beats = Gate(), []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    async def create() -> str:
        hb.point_of_no_return()
        await gate.passing()  # the request in flight
        return "device-1"

    task = asyncio.ensure_future(env.run(hb.finish_even_if_cancelled, create()))
    await asyncio.wait_for(gate.reached.wait(), timeout=10)
    env.cancel()
    await asyncio.sleep(0.01)
    before = len(beats)
    # Held past the cancel, the attempt beats on: a silent one is timed out by the server
    # past HEARTBEAT_TIMEOUT, and its device lands after the batch said it was done.
    await asyncio.sleep(0.15)
    assert len(beats) > before
    gate.open()
    assert await asyncio.wait_for(task, timeout=10) == "device-1"


async def test_a_call_outside_a_create_may_mark_nothing() -> None:
    hb.point_of_no_return()  # no create under way: nothing to mark, no error


# ------------------------------------------------------------ GeeLark

GEELARK = DeviceTemplate(platform="android", region="sgp", os_version="13")


def _held_sleep(clock: Clock, gate: Gate) -> Callable[[float], Awaitable[None]]:
    async def sleep(seconds: float) -> None:
        await gate.passing()
        await clock.sleep(seconds)

    return sleep


async def test_geelark_create_waiting_for_its_pacer_turn_is_not_sent_after_a_cancel() -> None:
    fake, clock, gate = Fake(), Clock(), Gate()
    pacer = EndpointPacer(clock=clock.mono, sleep=_held_sleep(clock, gate))
    pacer.hold("/open/v1/phone/addNew", 2.0)  # the add's turn not due yet
    acts = _activities("gl", _geelark(fake, clock, pacer))
    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(acts.create_device, _input("gl", GEELARK)), gate)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await asyncio.sleep(0.05)
    assert fake.paths() == ["phone/list"]  # the mark looked up; never added
    assert fake.phones == {}


async def test_geelark_create_waiting_for_its_slot_is_not_sent_after_a_cancel() -> None:
    fake, clock = Fake(), Clock()
    provider = _geelark(fake, clock)
    acts = _activities("gl", provider)
    lock = provider._creates._slots.setdefault(geelark_slot_mark("p1", "k-0"), asyncio.Lock())
    await lock.acquire()  # an earlier attempt of the slot still running
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts.create_device, _input("gl", GEELARK)))
    await _until(lambda: bool(lock._waiters), "the create waits for its slot")
    env.cancel()
    await asyncio.sleep(0.05)
    lock.release()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await asyncio.sleep(0.05)
    assert fake.paths() == []


async def test_geelark_create_in_flight_still_lands_through_a_cancel() -> None:
    fake, clock, gate = Fake(), Clock(), Gate()

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/phone/addNew"):
            await gate.passing()
        return fake.handle(request)

    provider = _geelark(fake, clock, transport=httpx.MockTransport(handle))
    acts = _activities("gl", provider)
    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(acts.create_device, _input("gl", GEELARK)), gate)
    result = await asyncio.wait_for(task, timeout=10)
    assert isinstance(result, CreateDeviceResult)
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/start"]


def _geelark(
    fake: Fake, clock: Clock, pacer: EndpointPacer | None = None, **api: Any
) -> GeeLarkProvider:
    if pacer is not None:
        api["pacer"] = pacer
    return GeeLarkProvider(fake.api(clock, **api), wall_clock=clock.wall, sleep=clock.sleep)


# ------------------------------------------------------------ BitBrowser cloud phones

PHONES = DeviceTemplate(platform="android", region=PHONE_REGION, os_version="13", proxy_pool="gw")
ADD = "/phone/profile/add"


async def test_phone_create_waiting_for_the_claim_lock_is_not_sent_after_a_cancel(
    account: Account, n1: Node
) -> None:
    provider = PhoneProvider(n1.phones)
    acts = _activities("bb", provider)
    lock = provider.listings.claim_locks.setdefault("p1", asyncio.Lock())
    await lock.acquire()  # another create's claim of the pool
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts.create_device, _input("bb", PHONES)))
    await _until(lambda: bool(lock._waiters), "the create waits for the claim lock")
    env.cancel()
    await asyncio.sleep(0.05)
    lock.release()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await asyncio.sleep(0.3)
    assert [p for p, _ in n1.recorder.calls] == ["/phone/list"]
    assert (await account.stats())["phones"]["created"] == 0


async def test_phone_create_waiting_for_its_pacer_turn_is_not_sent_after_a_cancel(
    account: Account, n1: Node
) -> None:
    provider = PhoneProvider(n1.phones)
    acts = _activities("bb", provider)
    turn = n1.phones.pacer.turn()
    await turn.__aenter__()  # another call holds the account's turn
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts.create_device, _input("bb", PHONES)))
    await _until(lambda: n1.phones.pacer.waiting > 0, "the create waits for its turn")
    env.cancel()
    await asyncio.sleep(0.05)
    await turn.__aexit__(None, None, None)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await asyncio.sleep(0.3)
    # The pool's listing is shared by its callers (`PoolListings`): it may still be read.
    assert {p for p, _ in n1.recorder.calls} <= {"/phone/list"}
    assert (await account.stats())["phones"]["created"] == 0


async def test_phone_create_waiting_for_its_slot_is_not_sent_after_a_cancel(
    account: Account, n1: Node
) -> None:
    provider = PhoneProvider(n1.phones)
    acts = _activities("bb", provider)
    lock = provider._slots.setdefault(phone_slot_mark("p1", "k-0"), asyncio.Lock())
    await lock.acquire()
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts.create_device, _input("bb", PHONES)))
    await _until(lambda: bool(lock._waiters), "the create waits for its slot")
    env.cancel()
    await asyncio.sleep(0.05)
    lock.release()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await asyncio.sleep(0.3)
    assert n1.recorder.calls == []


async def test_phone_create_in_flight_still_lands_through_a_cancel(
    account: Account, n1: Node
) -> None:
    provider = PhoneProvider(n1.phones)
    acts = _activities("bb", provider)
    gate = Gate()

    async def before(path: str, body: Any) -> None:
        if path == ADD:
            await gate.passing()

    n1.recorder.before = before
    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(acts.create_device, _input("bb", PHONES)), gate)
    result = await asyncio.wait_for(task, timeout=20)
    assert isinstance(result, CreateDeviceResult)
    paths = [p for p, _ in n1.recorder.calls]
    assert paths[:3] == ["/phone/list", ADD, "/phone/openphone"]
    assert (await account.stats())["phones"]["created"] == 1


# ------------------------------------------------------------ REST (no wait before its create)


class _Held(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, gate: Gate) -> None:
        self.inner, self.gate = inner, gate
        self.calls: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.method} {request.url.path}")
        if request.method == "POST":
            await self.gate.passing()
        return await self.inner.handle_async_request(request)


async def test_rest_create_in_flight_still_lands_through_a_cancel(emulator: Emulator) -> None:
    gate = Gate()
    held = _Held(emulator.transport, gate)
    client = BitCloudPhoneClient(base_url=BASE_URL, api_key=DEV_KEY, transport=held)
    acts = _activities("rest", RestProvider(client))
    template = DeviceTemplate(platform="android", region="us-west", os_version="14")
    env = ActivityEnvironment()
    try:
        task = await _cancel_at(env, env.run(acts.create_device, _input("rest", template)), gate)
        result = await asyncio.wait_for(task, timeout=10)
    finally:
        await client.aclose()
    assert isinstance(result, CreateDeviceResult)
    assert held.calls == ["POST /api/v1/android/devices"]
