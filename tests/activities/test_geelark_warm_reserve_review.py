"""The GeeLark warm reserve against a cold review's findings (R20, issue 41).

Each test is a sequence the first build got wrong: a retired phone parked and served again
as new; a lowered `spec.reserve.keep` still claimed; a profile cap on a large account
turned into timeouts; a second attempt of one scale-down parking a phone a claim has
since handed to another slot, or stopping it on a read from before; a claim's partly
applied update leaving a slot-named phone with its old proxy. Why: docs/providers.md, "The warm reserve on GeeLark".
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from devicepool.activities import orphans
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.errors import NotFoundError, ProviderError
from devicepool.activities.models import CreateDeviceInput, TerminateDeviceInput
from devicepool.activities.orphan_models import FindOrphansInput, TerminateOrphansInput
from devicepool.activities.pool_runs import PoolCheck
from devicepool.activities.providers.base import provider_call
from devicepool.activities.providers.geelark import GeeLarkApi, GeeLarkProvider
from devicepool.activities.providers.geelark.errors import GeeLarkQuotaError
from devicepool.activities.providers.geelark.marks import (
    MANAGED_TAG,
    Remark,
    reserve_mark,
    slot_mark,
)
from devicepool.activities.proxy import ResolvedProxy
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from tests.activities.test_geelark_warm_reserve import (
    POOL,
    TEMPLATE,
    _new,
    _phone,
    _pid,
    _running,
)
from tests.helpers.geelark import BASE, Team, team


class Wall:
    """The adapter's wall clock (a remark's created time), moved by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _provider(t: Team, wall: Wall | None = None) -> GeeLarkProvider:
    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    client = GeeLarkApi(
        base_url=BASE, app_id=DEFAULT_APP_ID, api_key=DEFAULT_API_KEY, transport=t.transport
    )
    return GeeLarkProvider(
        client, sleep=sleep, confirm_seconds=5.0, reserve=True, wall_clock=wall or Wall()
    )


@pytest.fixture
async def t() -> AsyncIterator[Team]:
    async with team() as made:
        yield made


# ------------------------------------------------------------------ 1: retirements


async def test_a_retired_phone_is_deleted_never_served_again_as_new(t: Team) -> None:
    # maxAge, or a person's `replace --when-idle`: the pool removes it only if idle, as a
    # scale-down, but says it retires it. Before, it was parked and the replacement's
    # create claimed it back: the same phone, its age reset.
    wall = Wall()
    provider = _provider(t, wall)
    old = await _running(t, provider, "a")
    wall.now += 8 * 86400  # past a maxAge of 7 days
    acts = DeviceActivities(accounts={}, proxy_pools={})
    acts._providers["gl"] = provider
    retire = TerminateDeviceInput(
        account="gl", device_id=old, pool=POOL, only_if_idle=True, reserve_keep=1, retiring=True
    )
    done = await ActivityEnvironment().run(acts.terminate_device, retire)
    assert done.skipped is None and not done.already_gone
    assert _phone(t, _pid(old)) is None  # stopped, then deleted
    new = await provider.create_device(_new("replacement"))
    assert _pid(new.id) != _pid(old)
    await provider.aclose()


# ------------------------------------------------------------------ 2: a lowered keep


def _acts(provider: GeeLarkProvider) -> DeviceActivities:
    acts = DeviceActivities(accounts={}, proxy_pools={})
    acts._providers["gl"] = provider
    return acts


async def _create(acts: DeviceActivities, key: str, keep: int | None) -> str:
    made = await ActivityEnvironment().run(
        acts.create_device,
        CreateDeviceInput(
            account="gl",
            pool=POOL,
            template=TEMPLATE,
            name=key,
            idempotency_key=key,
            reserve_keep=keep,
        ),
    )
    return str(made.device.id)


async def _scale_down_by(acts: DeviceActivities, device: str, keep: int) -> None:
    gone = TerminateDeviceInput(
        account="gl", device_id=device, pool=POOL, only_if_idle=True, reserve_keep=keep
    )
    assert (await ActivityEnvironment().run(acts.terminate_device, gone)).skipped is None


async def test_a_keep_lowered_to_zero_claims_nothing_and_deletes_the_reserve(t: Team) -> None:
    # `keep: 0`, or `spec.reserve` removed: the pool says 0 (None is an older build's batch).
    provider = _provider(t)
    acts = _acts(provider)
    a, b = [await _create(acts, k, 2) for k in ("a", "b")]
    await t.advance(120)
    for device in (a, b):
        await _scale_down_by(acts, device, 2)
    assert _phone(t, _pid(a)).name == reserve_mark(POOL)
    new = await _create(acts, "c", 0)
    assert _pid(new) not in (_pid(a), _pid(b))  # added: nothing claimed
    assert _phone(t, _pid(a)) is None and _phone(t, _pid(b)) is None
    await provider.aclose()


async def test_a_keep_lowered_keeps_what_a_claim_leaves_within_it(t: Team) -> None:
    provider = _provider(t)
    acts = _acts(provider)
    made = [await _create(acts, k, 5) for k in ("a", "b", "c", "d")]
    await t.advance(120)
    for device in made:
        await _scale_down_by(acts, device, 5)
    new = await _create(acts, "e", 1)  # keep 5 -> 1: claims one, keeps one
    assert _pid(new) in {_pid(d) for d in made}
    parked = [d for d in made if _pid(d) != _pid(new) and _phone(t, _pid(d)) is not None]
    assert len(parked) == 1, parked
    await provider.aclose()


async def test_a_park_over_a_lowered_keep_deletes_the_surplus(t: Team) -> None:
    provider = _provider(t)
    acts = _acts(provider)
    made = [await _create(acts, k, 5) for k in ("a", "b", "c", "d")]
    await t.advance(120)
    for device in made[:3]:
        await _scale_down_by(acts, device, 5)
    await _scale_down_by(acts, made[3], 1)  # keep 5 -> 1: one kept, the rest deleted
    left = [d for d in made if _phone(t, _pid(d)) is not None]
    assert len(left) == 1 and _phone(t, _pid(left[0])).name == reserve_mark(POOL)
    await provider.aclose()


async def test_an_older_builds_create_still_claims(t: Team) -> None:
    # A batch an older build started says no keep: claims as before, deletes nothing.
    provider = _provider(t)
    acts = _acts(provider)
    a, b = [await _create(acts, k, 2) for k in ("a", "b")]
    await t.advance(120)
    for device in (a, b):
        await _scale_down_by(acts, device, 2)
    new = await _create(acts, "c", None)
    other = ({_pid(a), _pid(b)} - {_pid(new)}).pop()  # claimed one, the other still kept
    assert _phone(t, other).name == reserve_mark(POOL)
    await provider.aclose()


# ------------------------------------------------------------------ 3: the profile cap


class Slow(httpx.AsyncBaseTransport):
    """The emulator at `latency` virtual seconds a call (the adapter's clock): a large
    account's listing outruns a create's budget as a real one would."""

    def __init__(self, inner: httpx.AsyncBaseTransport, latency: float = 0.4) -> None:
        self.inner, self.latency, self.now, self.calls = inner, latency, 0.0, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now += self.latency
        self.calls += 1
        return await self.inner.handle_async_request(request)


FILLERS = 1500  # managed phones of other pools: 15 pages of `phone/list`


async def _full_account(t: Team, *, parked: bool) -> tuple[GeeLarkProvider, Slow, str | None]:
    """An account at its profile cap with `FILLERS` managed phones, and (if `parked`)
    one stopped phone in pool `other`'s reserve, parked by this process."""
    for start in range(0, FILLERS, 100):
        rows = [
            {"profileName": f"filler-{i}", "profileTags": [MANAGED_TAG]}
            for i in range(start, start + 100)
        ]
        await t.ok("phone/addNew", {"mobileType": "Android 13", "data": rows})
    slow = Slow(t.transport)

    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    client = GeeLarkApi(
        base_url=BASE,
        app_id=DEFAULT_APP_ID,
        api_key=DEFAULT_API_KEY,
        transport=slow,
        clock=lambda: slow.now,
    )
    provider = GeeLarkProvider(client, sleep=sleep, confirm_seconds=5.0, reserve=True)
    other = None
    if parked:
        other = (await provider.create_device(_new("o1", pool="other"))).id
        await t.advance(120)
        with provider_call(pool="other", reserve_keep=2):
            await provider.remove_device(other)
    return provider, slow, other


async def test_the_profile_cap_on_a_large_account_frees_a_reserve_phone_in_time() -> None:
    # Before: the add's 8 s send-by passed while every managed phone was listed (twice):
    # a TIMEOUT, retried for ever, nothing freed, the 44002 lost.
    async with team(max_profiles=FILLERS + 1, creates_per_day=10 * FILLERS) as t:
        provider, slow, other = await _full_account(t, parked=True)
        assert other is not None
        slow.calls = 0
        made = await provider.create_device(_new("k1"))
        assert _phone(t, _pid(other)) is None  # deleted to make room
        assert _phone(t, _pid(made.id)) is not None
        assert slow.calls <= 10, slow.calls
        await provider.aclose()


async def test_the_profile_cap_with_nothing_parked_says_the_cap_at_once() -> None:
    async with team(max_profiles=FILLERS, creates_per_day=10 * FILLERS) as t:
        provider, slow, _ = await _full_account(t, parked=False)
        with pytest.raises(GeeLarkQuotaError) as raised:
            await provider.create_device(_new("k1"))
        assert raised.value.code == 44002
        assert slow.calls <= 4, slow.calls  # no account-wide listing
        await provider.aclose()


# ------------------------------------------------------------------ 5: a second park


async def test_a_late_park_never_takes_a_phone_a_claim_gave_another_slot(t: Team) -> None:
    # Two attempts of one scale-down: the first parks the phone and a create of slot b
    # claims and starts it; the second, its stop confirmed before that, parks now. Before,
    # it renamed the phone serving b to the reserve: b's device vanished.
    provider = _provider(t)
    assert provider.reserve is not None
    a = await _running(t, provider, "a")
    pid = _pid(a)
    remark_a = Remark.parse(_phone(t, pid).remark)
    assert remark_a is not None
    with provider_call(pool=POOL, reserve_keep=2):
        await provider.remove_device(a)  # attempt 1: parked
    b = await provider.create_device(_new("b"))
    assert _pid(b.id) == pid
    await t.advance(120)
    with provider_call(pool=POOL, reserve_keep=2), pytest.raises(NotFoundError):
        await provider.reserve.park(POOL, pid, remark_a, name=slot_mark(POOL, "a"))
    phone = _phone(t, pid)
    assert phone.name == slot_mark(POOL, "b") and phone.status == 0
    assert (await provider.read_statuses([b.id]))[1] == []  # b still serves
    await provider.aclose()


async def test_a_park_of_a_phone_started_since_its_stop_keeps_nothing(t: Team) -> None:
    provider = _provider(t)
    assert provider.reserve is not None
    a = await _running(t, provider, "a")
    pid = _pid(a)
    remark_a = Remark.parse(_phone(t, pid).remark)
    assert remark_a is not None
    await t.ok("phone/stop", {"ids": [pid]})
    await t.advance(30)
    await t.ok("phone/start", {"ids": [pid]})  # by a person, between the stop and the park
    with provider_call(pool=POOL, reserve_keep=2):
        kept = await provider.reserve.park(POOL, pid, remark_a, name=slot_mark(POOL, "a"))
    assert kept is False and _phone(t, pid).name == slot_mark(POOL, "a")
    await provider.aclose()


# ------------------------------------------------------------------ 6: a partial update


class PartlyApplied(httpx.AsyncBaseTransport):
    """`phone/detail/update` as GeeLark may answer it (its `failDetails` suggest per-part
    results; the emulator applies all or nothing, its choice): a proxy refused (45002)
    while the rest of the update is applied. Records every update's fields."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.updates: list[set[str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/phone/detail/update"):
            return await self.inner.handle_async_request(request)
        body = json.loads(request.content)
        self.updates.append(set(body) - {"id"})
        proxy = body.pop("proxyConfig", None)
        applied = httpx.Request(
            request.method, request.url, headers=request.headers, content=json.dumps(body)
        )
        answer = await self.inner.handle_async_request(applied)
        if proxy is None:
            return answer
        fail = {"code": 45002, "id": body["id"], "msg": "proxy unavailable"}
        envelope = {"traceId": "t", "code": 0, "msg": "success", "data": {"failDetails": [fail]}}
        return httpx.Response(200, json=envelope)


async def test_a_claim_renames_last_so_a_refused_proxy_leaves_the_phone_in_reserve(
    t: Team,
) -> None:
    partly = PartlyApplied(t.transport)

    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    client = GeeLarkApi(
        base_url=BASE, app_id=DEFAULT_APP_ID, api_key=DEFAULT_API_KEY, transport=partly
    )
    provider = GeeLarkProvider(client, sleep=sleep, confirm_seconds=5.0, reserve=True)
    old = await _running(t, provider, "k1")
    with provider_call(pool=POOL, reserve_keep=2):
        await provider.remove_device(old)
    proxy = ResolvedProxy(
        pool="gw", type="http", host="gw.example", port=8080, username="u", password=SecretStr("p")
    )
    partly.updates.clear()
    new = dataclasses.replace(_new("k2"), proxy=proxy)
    with pytest.raises(ProviderError):
        await provider.create_device(new)
    # The proxy (and remark) first, under the reserve name; the name never sent.
    assert partly.updates == [{"remark", "proxyConfig"}]
    phone = _phone(t, _pid(old))
    assert phone.name == reserve_mark(POOL) and phone.status == 2  # never started as k2
    await provider.aclose()


# ------------------------------------------------------------------ a pool gone


async def test_the_orphan_sweep_removes_the_reserve_of_a_pool_gone(
    t: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pool whose workflow was terminated (no teardown) left its reserve stopped, holding
    # plan profiles for good: the sweep sees it. A running pool's reserve is left alone,
    # and outside the sweep (the ledger's device count) a parked phone is still no device.
    provider = _provider(t)
    acts = _acts(provider)
    gone = await _running(t, provider, "g", pool="gone")
    live = await _running(t, provider, "l")
    for pool, device in (("gone", gone), (POOL, live)):
        with provider_call(pool=pool, reserve_keep=2):
            await provider.remove_device(device)

    async def check(client: Any, pool: str, account: str) -> PoolCheck:
        return PoolCheck(
            orphaned=pool == "gone", state="TERMINATED" if pool == "gone" else "RUNNING"
        )

    monkeypatch.setattr(orphans, "check_pool", check)
    env = ActivityEnvironment(client=cast(Client, object()))
    found = await env.run(acts.find_orphans, FindOrphansInput(account="gl"))
    assert [(o.pool, _pid(o.id)) for o in found.orphans] == [("gone", _pid(gone))]
    ids = [o.id for o in found.orphans]
    done = await env.run(
        acts.terminate_orphans, TerminateOrphansInput(account="gl", device_ids=ids)
    )
    assert [o.id for o in done.terminated] == ids and done.kept == []
    assert _phone(t, _pid(gone)) is None
    assert _phone(t, _pid(live)).name == reserve_mark(POOL)
    assert await provider.list_managed() == []
    await provider.aclose()


async def test_a_late_attempt_never_stops_a_phone_a_claim_gave_another_slot(t: Team) -> None:
    # Two attempts of one scale-down in one node process: the second's idle check reads the
    # phone (started, slot a's), the first parks it, a create of slot b claims and starts
    # it, and the second removes now. Before, it stopped the phone on that read before the
    # park check: b's device went offline (a lease's phone with it) and was replaced.
    provider = _provider(t)
    a = await _running(t, provider, "a")
    pid = _pid(a)
    second = contextvars.copy_context()  # attempt 2's task: its read is its own
    await asyncio.create_task(provider.get_device(a), context=second)
    with provider_call(pool=POOL, reserve_keep=2):
        await provider.remove_device(a)  # attempt 1: stopped and parked
    b = await provider.create_device(_new("b"))
    assert _pid(b.id) == pid
    await t.advance(120)

    async def attempt_2() -> None:
        with provider_call(pool=POOL, reserve_keep=2):
            await provider.remove_device(a)

    with pytest.raises(NotFoundError):  # the removal is already_gone
        await asyncio.create_task(attempt_2(), context=second)
    phone = _phone(t, pid)
    assert phone.name == slot_mark(POOL, "b") and phone.status == 0  # never stopped
    assert (await provider.read_statuses([b.id]))[1] == []  # b still serves
    await provider.aclose()


class Paths(httpx.AsyncBaseTransport):
    """The emulator, each call's path recorded; once `hold` is set, the next call of that
    path sets `held` and waits for `go`."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.paths = inner, list[str]()
        self.hold: str | None = None
        self.held, self.go = asyncio.Event(), asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rpartition("/v1/")[2]
        self.paths.append(path)
        if path == self.hold:
            self.hold = None
            self.held.set()
            await self.go.wait()
        return await self.inner.handle_async_request(request)


async def test_a_second_attempt_waits_for_the_first_and_reads_afresh(t: Team) -> None:
    # The second attempt removes while the first still confirms its stop: it waits, then
    # reads the phone again (parked now: the device is gone) and never stops it itself.
    paths = Paths(t.transport)
    client = GeeLarkApi(
        base_url=BASE, app_id=DEFAULT_APP_ID, api_key=DEFAULT_API_KEY, transport=paths
    )
    provider = GeeLarkProvider(client, confirm_seconds=5.0, reserve=True)
    a = await _running(t, provider, "a")
    second = contextvars.copy_context()
    await asyncio.create_task(provider.get_device(a), context=second)

    async def attempt() -> None:
        with provider_call(pool=POOL, reserve_keep=2):
            await provider.remove_device(a)

    paths.hold = "phone/status"
    one = asyncio.create_task(attempt(), context=contextvars.copy_context())
    await paths.held.wait()  # attempt 1 stopped the phone and confirms it
    two = asyncio.create_task(attempt(), context=second)
    for _ in range(20):
        await asyncio.sleep(0)
    paths.go.set()
    await one
    with pytest.raises(NotFoundError):
        await two
    assert paths.paths.count("phone/stop") == 1
    assert _phone(t, _pid(a)).name == reserve_mark(POOL)
    await provider.aclose()
