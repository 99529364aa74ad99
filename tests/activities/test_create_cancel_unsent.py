"""A create cancelled before its first write never writes after it (R27, F23, R28).

`finish_even_if_cancelled` lets a create already on its way to the provider land
through a cancel (the pool's final sweep must see it). A create cancelled before its
first write (its point of no return) is not cut off: it goes on through its waits in
this process (its slot's lock, a claim lock, a pacer's turn) and its reads, so a retry
waiting for the earlier attempt of its slot finds and returns what that one made; but
it ends once that lookup found nothing (no claim, no reserve listing: R30 #1), its first
write is refused in any case, and the activity ends cancelled. Before F23 the whole
call was shielded: a create still waiting went to the provider after its pool's
cancel, and, past the activity's 20 s, after the pool's sweep (an orphan that bills).
In F23 it ended at the cancel: a retry then ended before the earlier attempt holding
its slot, whose device nobody reported (R28). Each adapter with an in-process wait
before its create is checked, and each one's create in flight still finishes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities
from devicepool.activities import heartbeats as hb
from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.models import (
    CreateDeviceInput,
    CreateDeviceResult,
    DeviceTemplate,
    TerminatePoolInput,
)
from devicepool.activities.providers.base import Provider
from devicepool.activities.providers.bitbrowser import PhonePacer
from devicepool.activities.providers.bitbrowser.phone_marks import parse_device_id
from devicepool.activities.providers.bitbrowser.phone_marks import slot_mark as phone_slot_mark
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from devicepool.activities.providers.geelark import EndpointPacer
from devicepool.activities.providers.geelark.marks import reserve_mark
from devicepool.activities.providers.geelark.marks import slot_mark as geelark_slot_mark
from devicepool.activities.providers.geelark.provider import GeeLarkProvider
from devicepool.activities.providers.rest import RestProvider
from tests.activities.conftest import bitbrowser_account
from tests.activities.geelark_fake import Clock, Fake
from tests.activities.test_bitbrowser_phone_provider import new_device, ready
from tests.activities.test_geelark_warm_reserve import (
    POOL,
    _new,
    _phone,
    _pid,
    _running,
    _scale_down,
)
from tests.activities.test_geelark_warm_reserve import _provider as _reserve_provider
from tests.helpers.bitbrowser import Account
from tests.helpers.bitbrowser_client import Node
from tests.helpers.emulator import BASE_URL, DEV_KEY, Emulator
from tests.helpers.geelark import Team, team
from tests.helpers.settings import proxy_pools

PHONE_REGION = "d69bcf13db844d1cb81e779f64161223"

account = bitbrowser_account(speed=20.0, seed=5)


def _activities(name: str, provider: Provider) -> DeviceActivities:
    acts = DeviceActivities(accounts={}, proxy_pools=proxy_pools("phone-proxy-pass-Qv7"))
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


def _held_updates(monkeypatch: pytest.MonkeyPatch, phones: Any) -> Gate:
    """`phones.update` held at the gate returned, before it is sent (its pacer's turn)."""
    gate, update = Gate(), phones.update

    async def held(*args: Any, **kwargs: Any) -> Any:
        await gate.passing()
        return await update(*args, **kwargs)

    monkeypatch.setattr(phones, "update", held)
    return gate


async def _ends_cancelled(task: asyncio.Future[Any]) -> None:
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=20)


async def _cancelled_waiting(
    acts: DeviceActivities, new: CreateDeviceInput, waiting: Callable[[], bool], what: str
) -> asyncio.Future[Any]:
    """A create cancelled once it waits (`waiting`): it waits on, unended."""
    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(acts.create_device, new))
    await _until(waiting, what)
    env.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # the cancel went in; the create waits on, beating
    return task


async def _retry_behind_a_sent_add(
    acts: DeviceActivities, new: CreateDeviceInput, gate: Gate, slot: Callable[[], asyncio.Lock]
) -> tuple[CreateDeviceResult, Any]:
    """An attempt of slot k-0 holds its slot's lock, its add out, unanswered at `gate` (the
    server timed it out: its result is dropped); the retry, on the same worker, is
    cancelled while it waits for that lock (its pool deleted). Both outcomes, `gate` opened."""
    first = asyncio.ensure_future(ActivityEnvironment().run(acts.create_device, new))
    await asyncio.wait_for(gate.reached.wait(), timeout=10)
    lock = slot()
    retry = await _cancelled_waiting(acts, new, lambda: bool(lock._waiters), "the retry waits")
    gate.open()
    landed = await asyncio.wait_for(first, timeout=20)
    return landed, await asyncio.wait_for(retry, timeout=20)


async def _retry_behind_an_unsent_attempt(
    acts: DeviceActivities, new: CreateDeviceInput, lock: asyncio.Lock
) -> None:
    """The retry cancelled while an attempt of its slot that sent nothing holds the lock:
    it waits for it, then ends cancelled."""
    await lock.acquire()
    retry = await _cancelled_waiting(acts, new, lambda: bool(lock._waiters), "the retry waits")
    lock.release()
    await _ends_cancelled(retry)


# ------------------------------------------------------------ the seam itself


async def _beating_through_a_cancel(
    monkeypatch: pytest.MonkeyPatch, create: Coroutine[Any, Any, str], gate: Gate
) -> asyncio.Future[Any]:
    """`create` run as a create, cancelled while it waits at `gate`: it has not ended and
    beats on (a silent attempt is timed out by the server past HEARTBEAT_TIMEOUT, its
    batch done before its device lands). Then `gate` opens."""
    monkeypatch.setattr(hb, "HEARTBEAT_EVERY", timedelta(seconds=0.02))
    env, beats = ActivityEnvironment(), []
    env.on_heartbeat = lambda *details: beats.append(details)
    task = asyncio.ensure_future(env.run(hb.finish_even_if_cancelled, create))
    await asyncio.wait_for(gate.reached.wait(), timeout=10)
    env.cancel()
    await asyncio.sleep(0.01)
    before = len(beats)
    await asyncio.sleep(0.15)
    assert not task.done() and len(beats) > before
    gate.open()
    return task


async def test_a_call_cancelled_before_its_point_of_no_return_waits_reads_but_never_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate, done = Gate(), []

    async def create() -> str:
        await gate.passing()  # a lock (an earlier attempt's, landing a device), a pacer
        done.append("read")
        hb.point_of_no_return()
        done.append("write")
        return "device-1"

    await _ends_cancelled(await _beating_through_a_cancel(monkeypatch, create(), gate))
    assert done == ["read"]  # went on to its first write, which was refused


async def test_a_call_cancelled_before_any_write_returns_what_its_reads_found() -> None:
    gate = Gate()

    async def create() -> str:
        await gate.passing()  # the earlier attempt's lock
        return "device-1"  # its mark found: that attempt's device

    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(hb.finish_even_if_cancelled, create()), gate)
    assert await asyncio.wait_for(task, timeout=10) == "device-1"


async def test_a_call_past_its_point_of_no_return_finishes_and_beats_through_a_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate()

    async def create() -> str:
        hb.point_of_no_return()
        await gate.passing()  # the request in flight
        hb.point_of_no_return()  # and the next one (the start) still goes out
        return "device-1"

    task = await _beating_through_a_cancel(monkeypatch, create(), gate)
    assert await asyncio.wait_for(task, timeout=10) == "device-1"


async def test_a_create_ends_at_its_look_only_if_cancelled_before_any_write() -> None:
    gate = Gate()

    async def create() -> str:
        hb.end_if_cancelled_unsent()  # not cancelled yet: goes on
        hb.point_of_no_return()
        await gate.passing()  # its add in flight when the cancel comes
        hb.end_if_cancelled_unsent()  # a look after the add was sent: goes on, lands
        return "device-1"

    hb.end_if_cancelled_unsent()  # outside any create: nothing
    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(hb.finish_even_if_cancelled, create()), gate)
    assert await asyncio.wait_for(task, timeout=10) == "device-1"


async def test_a_write_outside_a_cancelled_create_is_not_refused() -> None:
    """The refusal belongs to the one create cancelled (a contextvar), not to the process:
    a call outside any create, and another create, still write."""
    gate = Gate()

    async def create() -> str:
        await gate.passing()
        hb.point_of_no_return()
        return "device-1"

    async def other() -> str:
        hb.point_of_no_return()
        return "device-2"

    env = ActivityEnvironment()
    task = asyncio.ensure_future(env.run(hb.finish_even_if_cancelled, create()))
    await asyncio.wait_for(gate.reached.wait(), timeout=10)
    env.cancel()
    await asyncio.sleep(0.05)  # cancelled, its write not reached yet
    hb.point_of_no_return()  # outside any create: marks nothing, refuses nothing
    assert await ActivityEnvironment().run(hb.finish_even_if_cancelled, other()) == "device-2"
    gate.open()
    await _ends_cancelled(task)


def _refused() -> None:
    raise asyncio.CancelledError("the create was cancelled before its first write")


async def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"waited {seconds:g}s: the refused turn spaced or counted")


async def test_a_turn_refused_as_it_comes_passes_on_unspaced_and_uncounted() -> None:
    """A write refused at its pacer turn (`refuse`): the next call goes at once (BitBrowser:
    not spaced an interval; GeeLark: the budget's one send still free)."""
    phones = PhonePacer(interval=5.0, clock=lambda: 0.0, sleep=_no_sleep)
    with pytest.raises(asyncio.CancelledError):
        async with phones.turn(refuse=_refused):
            raise AssertionError("a refused turn's call is not made")
    async with phones.turn():
        pass
    assert phones.calls == 1
    endpoints = EndpointPacer(per_minute=1, per_hour=1, clock=lambda: 0.0, sleep=_no_sleep)
    with pytest.raises(asyncio.CancelledError):
        await endpoints.turn("/open/v1/phone/addNew", refuse=_refused)
    await endpoints.turn("/open/v1/phone/addNew")
    assert endpoints.calls == 1


class _CancelledInSleep:
    """A fake clock whose sleep passes the time and, meanwhile, cancels the create that
    `refuse` checks (`cancelled`): a create cancelled during its spacing or budget wait."""

    def __init__(self) -> None:
        self.now, self.cancelled = 0.0, False
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.cancelled = True

    def refuse(self) -> None:
        if self.cancelled:
            _refused()


async def test_a_turn_cancelled_during_its_spacing_wait_is_refused_as_it_comes() -> None:
    """Cancelled while it sleeps out the spacing (BitBrowser) or the budget (GeeLark), a
    write is refused when the wait ends, before its call: nothing counted, and the next
    call goes when the refused one would have, not an interval later (R32: pins the
    pacers' second check; at `exchange` it would have been counted and spaced)."""
    fake = _CancelledInSleep()
    phones = PhonePacer(interval=1.05, clock=lambda: fake.now, sleep=fake.sleep)
    async with phones.turn():
        pass  # a real call, answered at 0: the next goes at 1.05
    with pytest.raises(asyncio.CancelledError):
        async with phones.turn(refuse=fake.refuse):
            raise AssertionError("a refused turn's call is not made")
    assert (fake.now, phones.calls) == (1.05, 1)
    async with phones.turn():
        pass
    assert fake.slept == [1.05]  # the next call went at once, at 1.05
    fake = _CancelledInSleep()
    endpoints = EndpointPacer(
        per_minute=1, per_hour=5, max_wait=120.0, clock=lambda: fake.now, sleep=fake.sleep
    )
    await endpoints.turn("/open/v1/phone/addNew")
    with pytest.raises(asyncio.CancelledError):
        await endpoints.turn("/open/v1/phone/addNew", refuse=fake.refuse)
    assert len(fake.slept) == 1 and endpoints.calls == 1
    assert endpoints.count("/open/v1/phone/addNew", endpoints.hour) == 1


async def _as_cancelled_create(call: Awaitable[Any]) -> Any:
    """`call` run as a create cancelled before any write (`heartbeats._CREATE`)."""
    create = hb._Create()
    create.cancelled = True
    hb._CREATE.set(create)  # this task's own context only
    return await call


async def test_phone_write_of_a_cancelled_create_is_refused_before_queueing(n1: Node) -> None:
    """`CloudPhones` refuses a cancelled create's write before it queues for the pacer:
    it ends at once while another call holds the turn, never a waiter in its pool's lane
    (R32: pins the check before the turn; queued, it would wait out a round per pool)."""
    pacer = n1.phones.pacer
    async with pacer.turn():
        write = asyncio.ensure_future(_as_cancelled_create(n1.phones.suspend("p-1")))
        await asyncio.sleep(0.05)
        assert pacer.waiting == 0
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(write, timeout=1)
    assert pacer.calls == 1 and n1.recorder.calls == []


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
    await _ends_cancelled(task)
    await asyncio.sleep(0.05)
    assert fake.paths() == ["phone/list"]  # the mark looked up; never added
    assert fake.phones == {}


async def test_geelark_retry_cancelled_at_its_slot_returns_the_device_sent_before() -> None:
    fake, clock, gate = Fake(), Clock(), Gate()
    provider = _geelark_held_at_add(fake, clock, gate)
    acts = _activities("gl", provider)
    slot = geelark_slot_mark("p1", "k-0")
    landed, found = await _retry_behind_a_sent_add(
        acts, _input("gl", GEELARK), gate, lambda: provider._creates._slots[slot]
    )
    # The retry's reads find the earlier attempt's phone: the batch reports it, and its
    # pool's sweep, after the batch, removes it (R28: the retry ended at the cancel, the
    # sweep found nothing yet, and the phone landed and started after it).
    assert found.device.id == landed.device.id
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/start", "phone/list"]
    sweep = TerminatePoolInput(account="gl", pool="p1")
    swept = await ActivityEnvironment().run(acts.terminate_pool, sweep)
    assert (swept.terminated, swept.remaining, fake.phones) == (1, 0, {})


async def test_geelark_retry_cancelled_at_its_slot_held_unsent_sends_nothing() -> None:
    fake, clock = Fake(), Clock()
    provider = _geelark(fake, clock)
    slots = provider._creates._slots
    lock = slots.setdefault(geelark_slot_mark("p1", "k-0"), asyncio.Lock())
    await _retry_behind_an_unsent_attempt(_activities("gl", provider), _input("gl", GEELARK), lock)
    await asyncio.sleep(0.05)
    assert fake.paths() == ["phone/list"]  # the mark looked up; never added
    assert fake.phones == {}


async def test_geelark_create_in_flight_still_lands_through_a_cancel() -> None:
    fake, clock, gate = Fake(), Clock(), Gate()
    acts = _activities("gl", _geelark_held_at_add(fake, clock, gate))
    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(acts.create_device, _input("gl", GEELARK)), gate)
    result = await asyncio.wait_for(task, timeout=10)
    assert isinstance(result, CreateDeviceResult)
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/start"]


async def _one_parked(t: Team) -> tuple[GeeLarkProvider, str]:
    """A provider with a warm reserve, and the phone parked in it (slot k1's, run once)."""
    provider = _reserve_provider(t)
    old = await _running(t, provider, "k1")
    await _scale_down(provider, old)  # parked in the pool's warm reserve
    return provider, old


async def test_geelark_claim_cancelled_before_its_update_leaves_the_phone_claimable(
    t: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, old = await _one_parked(t)
    gate = _held_updates(monkeypatch, provider.phones)
    env = ActivityEnvironment()
    claim = env.run(hb.finish_even_if_cancelled, provider.create_device(_new("k2")))
    await _ends_cancelled(await _cancel_at(env, claim, gate))  # its rename refused unsent
    assert _phone(t, _pid(old)).name == reserve_mark(POOL)
    assert not provider.reserve._locks  # type: ignore[union-attr]
    assert _pid((await provider.create_device(_new("k3"))).id) == _pid(old)  # claimed next
    await provider.aclose()


async def test_geelark_creates_cancelled_at_their_lookup_end_there_no_claim(
    t: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates of a pool with a warm reserve, cancelled while their slot lookups wait: after
    the cancel, each sends its own lookup (GeeLark shares none; begun before the cancel)
    and nothing more: no reserve listing, no claim (R30 #1: each refused claim made the
    next create list the reserve again, a turn of the account's budget each)."""
    provider, old = await _one_parked(t)
    phones, lookups, after = provider.phones, Gate(), []
    listed, update = phones.listed, phones.update
    held = 0

    async def listed_after(filters: dict[str, Any]) -> list[dict[str, Any]]:
        nonlocal held
        held += 1
        await lookups.passing()
        after.append(f"list {filters.get('serialName')}")
        return await listed(filters)

    async def update_after(phone_id: str, fields: dict[str, Any], **kw: Any) -> None:
        after.append("update")
        await update(phone_id, fields, **kw)

    monkeypatch.setattr(phones, "listed", listed_after)
    monkeypatch.setattr(phones, "update", update_after)
    keys = ["k2", "k3", "k4"]
    envs, creates = _started([provider.create_device(_new(k)) for k in keys])
    await _until(lambda: held == len(keys), "every create waits for its lookup")
    await _cancel_all(envs)
    lookups.open()
    for create in creates:
        await _ends_cancelled(create)
    assert sorted(after) == [f"list {geelark_slot_mark(POOL, k)}" for k in keys]
    assert _phone(t, _pid(old)).name == reserve_mark(POOL)  # still the pool's reserve
    await provider.aclose()


def _started(runs: list[Coroutine[Any, Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Each create run as a create in an activity of its own: (the activities, the runs)."""
    envs = [ActivityEnvironment() for _ in runs]
    started = [
        asyncio.ensure_future(env.run(hb.finish_even_if_cancelled, run))
        for env, run in zip(envs, runs, strict=True)
    ]
    return envs, started


async def _cancel_all(envs: list[ActivityEnvironment]) -> None:
    """The pool deleted: its batch cancels every create."""
    for env in envs:
        env.cancel()
    await asyncio.sleep(0.05)  # the cancels handled before anything moves on


@pytest.fixture
async def t() -> AsyncIterator[Team]:
    async with team() as made:
        yield made


def _geelark_held_at_add(fake: Fake, clock: Clock, gate: Gate) -> GeeLarkProvider:
    """Its `phone/addNew`s held in flight at `gate`."""

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/phone/addNew"):
            await gate.passing()
        return fake.handle(request)

    return _geelark(fake, clock, transport=httpx.MockTransport(handle))


def _geelark(
    fake: Fake, clock: Clock, pacer: EndpointPacer | None = None, **api: Any
) -> GeeLarkProvider:
    if pacer is not None:
        api["pacer"] = pacer
    return GeeLarkProvider(fake.api(clock, **api), wall_clock=clock.wall, sleep=clock.sleep)


# ------------------------------------------------------------ BitBrowser cloud phones

PHONES = DeviceTemplate(
    platform="android", region=PHONE_REGION, os_version="13", proxy_pool="proxyseller-us"
)
ADD = "/phone/profile/add"


async def test_phone_create_waiting_for_the_claim_lock_is_not_sent_after_a_cancel(
    account: Account, n1: Node
) -> None:
    def claim_lock(provider: PhoneProvider) -> asyncio.Lock:
        return provider.listings.claim_locks.setdefault("p1", asyncio.Lock())

    # another create's claim of the pool holds the lock
    await _phone_create_cancelled_behind(
        account, n1, claim_lock, lambda p: bool(claim_lock(p)._waiters), "the create waits to claim"
    )


async def test_phone_create_waiting_for_its_pacer_turn_is_not_sent_after_a_cancel(
    account: Account, n1: Node
) -> None:
    # another call holds the account's turn
    await _phone_create_cancelled_behind(
        account,
        n1,
        lambda _: n1.phones.pacer.turn(),
        lambda _: n1.phones.pacer.waiting > 0,
        "the create waits",
    )


async def _phone_create_cancelled_behind(
    account: Account,
    n1: Node,
    hold: Callable[[PhoneProvider], AbstractAsyncContextManager[Any]],
    waiting: Callable[[PhoneProvider], bool],
    what: str,
) -> None:
    """A phone create cancelled while `hold` (taken first) keeps it waiting: once let go,
    it ends cancelled and nothing was added."""
    provider = PhoneProvider(n1.phones)
    acts = _activities("bb", provider)
    async with hold(provider):
        task = await _cancelled_waiting(acts, _input("bb", PHONES), lambda: waiting(provider), what)
    await _ends_cancelled(task)
    await _looked_never_added(account, n1)


async def test_phone_retry_cancelled_at_its_slot_returns_the_device_sent_before(
    account: Account, n1: Node
) -> None:
    provider = PhoneProvider(n1.phones)
    acts = _activities("bb", provider)
    slot = phone_slot_mark("p1", "k-0")
    landed, found = await _retry_behind_a_sent_add(
        acts, _input("bb", PHONES), _held_at_add(n1), lambda: provider._slots[slot]
    )
    assert found.device.id == landed.device.id
    assert (await account.stats())["phones"]["created"] == 1


async def test_phone_retry_cancelled_at_its_slot_held_unsent_sends_nothing(
    account: Account, n1: Node
) -> None:
    provider = PhoneProvider(n1.phones)
    lock = provider._slots.setdefault(phone_slot_mark("p1", "k-0"), asyncio.Lock())
    await _retry_behind_an_unsent_attempt(_activities("bb", provider), _input("bb", PHONES), lock)
    await _looked_never_added(account, n1)


async def test_phone_create_in_flight_still_lands_through_a_cancel(
    account: Account, n1: Node
) -> None:
    acts = _activities("bb", PhoneProvider(n1.phones))
    gate = _held_at_add(n1)
    env = ActivityEnvironment()
    task = await _cancel_at(env, env.run(acts.create_device, _input("bb", PHONES)), gate)
    result = await asyncio.wait_for(task, timeout=20)
    assert isinstance(result, CreateDeviceResult)
    paths = [p for p, _ in n1.recorder.calls]
    assert paths[:3] == ["/phone/list", ADD, "/phone/openphone"]
    assert (await account.stats())["phones"]["created"] == 1


async def test_phone_claim_cancelled_before_its_update_leaves_the_profile_claimable(
    account: Account, n1: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = PhoneProvider(n1.phones)
    first = await provider.create_device(new_device(slot=0))
    await ready(account, provider)
    await provider.remove_device(first.id)  # parked in the pool's reserve
    gate = _held_updates(monkeypatch, provider.phones)
    env = ActivityEnvironment()
    claim = env.run(hb.finish_even_if_cancelled, provider.create_device(new_device(slot=1)))
    await _ends_cancelled(await _cancel_at(env, claim, gate))  # its update refused unsent
    again = await provider.create_device(new_device(slot=2))
    profile = [(parse_device_id(d.id) or ("", 0))[0] for d in (first, again)]
    assert profile[0] == profile[1] != ""  # the same profile claimed next, none added
    assert (await account.stats())["phones"]["created"] == 1


async def test_phone_creates_cancelled_at_their_lookup_end_there_no_claim(
    account: Account, n1: Node
) -> None:
    """Creates of a pool with a reserve profile, cancelled while they wait for the account's
    turn: after the cancel, one `/phone/list`, the pool's listing their slot lookups share
    (`PoolListings` joins a listing not sent yet), and nothing more: no claim (R30 #1:
    each refused claim made the next create list the pool again, a pacer turn each, past
    the attempt's 20 s a timed-out create the batch counts as failed)."""
    provider = PhoneProvider(n1.phones)
    first = await provider.create_device(new_device(slot=0))
    await ready(account, provider)
    await provider.remove_device(first.id)  # parked in the pool's reserve
    async with n1.phones.pacer.turn():  # another call holds the account's turn
        envs, creates = _started([provider.create_device(new_device(slot=i)) for i in (1, 2, 3)])
        await _until(lambda: n1.phones.pacer.waiting > 0, "the creates wait")
        await _cancel_all(envs)
        before = len(n1.recorder.calls)
    for create in creates:
        await _ends_cancelled(create)
    await asyncio.sleep(0.3)
    assert [p for p, _ in n1.recorder.calls[before:]] == ["/phone/list"]
    assert (await account.stats())["phones"]["created"] == 1  # the reserve's, none since


async def _looked_never_added(account: Account, n1: Node) -> None:
    await asyncio.sleep(0.3)
    assert [p for p, _ in n1.recorder.calls] == ["/phone/list"]  # its mark looked up
    assert (await account.stats())["phones"]["created"] == 0


def _held_at_add(n1: Node) -> Gate:
    """The node's phone adds held in flight at the gate returned."""
    gate = Gate()

    async def before(path: str, body: Any) -> None:
        if path == ADD:
            await gate.passing()

    n1.recorder.before = before
    return gate


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


# ------------------------------------------------------------ cancelled past the lookup (R31 #1)


async def test_phone_creates_cancelled_at_the_claim_lock_list_nothing_more(
    account: Account, n1: Node
) -> None:
    """Creates past their lookup, cancelled while another claim of the pool holds its claim
    lock: let in, none lists the pool's reserve (R31 #1: each refused claim dropped the
    cached reserve, so the next one listed again)."""
    provider = PhoneProvider(n1.phones)
    first = await provider.create_device(new_device(slot=0))
    await ready(account, provider)
    await provider.remove_device(first.id)  # parked in the pool's reserve
    lock = provider.listings.claim_locks.setdefault("phones-a", asyncio.Lock())
    async with lock:  # another create's claim of the pool holds it (its update out)
        envs, creates = _started([provider.create_device(new_device(slot=i)) for i in (1, 2, 3)])
        await _until(lambda: len(lock._waiters or ()) == 3, "every create waits at the lock")
        await _cancel_all(envs)
        before = len(n1.recorder.calls)
    for create in creates:
        await _ends_cancelled(create)
    assert n1.recorder.calls[before:] == []
    assert (await account.stats())["phones"]["created"] == 1  # the reserve's, none since


async def test_phone_creates_cancelled_behind_a_claim_in_flight_send_nothing_more(
    account: Account, n1: Node
) -> None:
    """No lock held by the test: 2 reserve profiles, 4 creates at once; the first claim's
    update is out when the pool is deleted. That one lands; the 3 at the claim lock end
    with no listing, no claim."""
    provider = PhoneProvider(n1.phones)
    made = [await provider.create_device(new_device(slot=s)) for s in (100, 101)]
    await ready(account, provider)
    for d in made:
        await provider.remove_device(d.id)  # both parked in the pool's reserve
    gate = Gate()

    async def before(path: str, body: Any) -> None:
        if path == "/phone/profile/update" and not gate.reached.is_set():
            await gate.passing()

    n1.recorder.before = before
    lock = provider.listings.claim_locks.setdefault("phones-a", asyncio.Lock())
    envs, creates = _started([provider.create_device(new_device(slot=i)) for i in range(1, 5)])
    await asyncio.wait_for(gate.reached.wait(), timeout=20)
    await _until(lambda: len(lock._waiters or ()) == 3, "3 creates wait at the claim lock")
    await _cancel_all(envs)
    calls = len(n1.recorder.calls)
    gate.open()
    outcomes = [type(r).__name__ for r in await asyncio.gather(*creates, return_exceptions=True)]
    assert outcomes == ["DeviceInfo"] + ["CancelledError"] * 3
    assert [p for p, _ in n1.recorder.calls[calls:]] == ["/phone/openphone"]


async def test_phone_creates_cancelled_queued_for_their_add_take_no_turn(
    account: Account, n1: Node
) -> None:
    """No reserve: 6 creates share one lookup and queue at the pacer for their adds, the
    first's add out. Cancelled there, the 5 queued give their turns up unsent, none spaced
    an interval (R31 #1: each took a turn the deleted pool's sweep waited behind)."""
    provider = PhoneProvider(n1.phones)
    pacer = n1.phones.pacer
    gate = _held_at_add(n1)
    envs, creates = _started([provider.create_device(new_device(slot=i)) for i in range(1, 7)])
    await asyncio.wait_for(gate.reached.wait(), timeout=20)
    await _until(lambda: pacer.waiting == 5, "5 creates wait for their add's turn")
    await _cancel_all(envs)
    turns, calls = pacer.calls, len(n1.recorder.calls)
    gate.open()
    outcomes = [type(r).__name__ for r in await asyncio.gather(*creates, return_exceptions=True)]
    assert outcomes == ["DeviceInfo"] + ["CancelledError"] * 5
    assert [p for p, _ in n1.recorder.calls[calls:]] == ["/phone/openphone"]
    assert pacer.calls - turns == 1  # the landed create's power-on only


async def test_phone_large_pool_cancelled_creates_still_look_up_alone(
    account: Account, n1: Node
) -> None:
    """Reads are never cut (R28): in a pool whose last listing found >= 100 profiles each
    create looks its mark up alone (`find_by_mark`), one turn each, then ends there."""
    provider = PhoneProvider(n1.phones)
    provider.listings.sizes["phones-a"] = 100  # as a listing of a 100-profile pool leaves it
    async with n1.phones.pacer.turn():
        envs, creates = _started([provider.create_device(new_device(slot=i)) for i in (1, 2, 3)])
        await _until(lambda: n1.phones.pacer.waiting == 3, "3 lookups wait")
        await _cancel_all(envs)
        before = len(n1.recorder.calls)
    for create in creates:
        await _ends_cancelled(create)
    assert [p for p, _ in n1.recorder.calls[before:]] == ["/phone/list"] * 3


def _listed_after(
    monkeypatch: pytest.MonkeyPatch, provider: GeeLarkProvider, cancelled: list[bool]
) -> list[str]:
    """The listings the provider's phones make once `cancelled[0]`."""
    phones, after = provider.phones, []
    listed = phones.listed

    async def listed_after(filters: dict[str, Any]) -> list[dict[str, Any]]:
        if cancelled[0]:
            after.append(f"list {filters.get('serialName')}")
        return await listed(filters)

    monkeypatch.setattr(phones, "listed", listed_after)
    return after


async def _geelark_cancelled_at_the_reserve_lock(
    provider: GeeLarkProvider, keys: list[str], held: Callable[[], None] = lambda: None
) -> list[asyncio.Future[Any]]:
    """Creates cancelled while another claim holds the pool's reserve lock (`held` run
    before it is let go)."""
    reserve = provider.reserve
    assert reserve is not None
    async with reserve.lock(POOL):
        envs, creates = _started([provider.create_device(_new(k)) for k in keys])
        await _until(lambda: reserve._locks[POOL][1] == 1 + len(keys), "the creates wait")
        await _cancel_all(envs)
        held()
    return creates


async def test_geelark_creates_cancelled_at_the_reserve_lock_list_nothing_more(
    t: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, old = await _one_parked(t)
    cancelled = [False]
    after = _listed_after(monkeypatch, provider, cancelled)
    creates = await _geelark_cancelled_at_the_reserve_lock(
        provider, ["k2", "k3", "k4"], lambda: cancelled.__setitem__(0, True)
    )
    for create in creates:
        await _ends_cancelled(create)
    assert after == []
    assert _phone(t, _pid(old)).name == reserve_mark(POOL)
    await provider.aclose()


async def test_geelark_create_cancelled_at_the_reserve_lock_past_its_send_by_ends_cancelled(
    t: Team,
) -> None:
    """Let in past its 15 s send-by, a cancelled unsent create ends cancelled, not
    GeeLarkTimeSpentError (a failed create the batch counts: the ledger's slow start)."""
    provider, old = await _one_parked(t)
    offset = [0.0]
    provider._creates.api.clock = lambda: time.monotonic() + offset[0]  # type: ignore[method-assign]
    creates = await _geelark_cancelled_at_the_reserve_lock(
        provider, ["k2"], lambda: offset.__setitem__(0, 16.0)
    )
    await _ends_cancelled(creates[0])
    assert _phone(t, _pid(old)).name == reserve_mark(POOL)
    await provider.aclose()
