"""`DeviceActivities` run in `ActivityEnvironment` against the real emulator app."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from devicepool.activities import DeviceActivities, pool_runs
from devicepool.activities import heartbeats as heartbeats_module
from devicepool.activities.models import (
    MAX_RETRY_AFTER_SECONDS,
    AccountSettings,
    CheckRefsInput,
    CreateDeviceInput,
    DeviceInfo,
    GetStatusesInput,
    ListDevicesInput,
    PoolRunInput,
    PoolRunResult,
    PoolSettings,
    ProxyPoolSettings,
    TerminateDeviceInput,
    TerminatePoolInput,
    WatchDevicesInput,
    WatchHealthInput,
    device_fingerprint,
    template_hash,
)
from devicepool.activities.proxy import session_id
from devicepool.api.errors import ErrorType
from devicepool.api.names import (
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
    create_idempotency_key,
)
from devicepool.api.v1beta1 import Platform
from tests.helpers.emulator import BASE_URL, DEV_KEY, OTHER_KEY, Emulator, running_emulator

PROXY_PASSWORD = "proxy-pass-s3cret"


def _accounts() -> dict[str, AccountSettings]:
    return {
        "default": AccountSettings(name="default", base_url=BASE_URL, api_key=SecretStr(DEV_KEY)),
        "other": AccountSettings(name="other", base_url=BASE_URL, api_key=SecretStr(OTHER_KEY)),
    }


PROXY_POOLS = {
    "proxyseller-us": ProxyPoolSettings(
        name="proxyseller-us",
        type="socks5",
        host="gw.proxy.example",
        port=10000,
        username_template="cust-session-{session}-ttl-{ttl}",
        password=SecretStr(PROXY_PASSWORD),
    )
}


@pytest.fixture
async def acts(emulator: Emulator) -> AsyncIterator[DeviceActivities]:
    activities = DeviceActivities(
        accounts=_accounts(),
        proxy_pools=PROXY_POOLS,
        settings=PoolSettings(resync_seconds=5),
        transport=emulator.transport,
    )
    yield activities
    await activities.aclose()


def _create_input(slot: int, *, pool: str = "p1", **overrides) -> CreateDeviceInput:
    values = {
        "account": "default",
        "pool": pool,
        "platform": Platform.ANDROID,
        "region": "us-west",
        "os_version": "14",
        "name": f"{pool}-{slot}",
        "idempotency_key": create_idempotency_key(pool, 1, slot),
        "proxy_pool": "proxyseller-us",
        "sticky_ttl": 900,
    }
    values.update(overrides)
    return CreateDeviceInput(**values)


class Heartbeats:
    """Counts heartbeats; `await beats.reached(n)` waits for the n-th."""

    def __init__(self) -> None:
        self.count = 0
        self._loop_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def __call__(self, *details: object) -> None:
        self.count += 1
        for n, future in list(self._loop_waiters):
            if self.count >= n and not future.done():
                future.set_result(None)

    async def reached(self, n: int) -> None:
        if self.count >= n:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loop_waiters.append((n, future))
        await asyncio.wait_for(future, timeout=5)


async def _create(acts: DeviceActivities, count: int, *, pool: str = "p1") -> list[DeviceInfo]:
    env = ActivityEnvironment()
    return [
        (await env.run(acts.create_device, _create_input(slot, pool=pool))).device
        for slot in range(count)
    ]


# ------------------------------------------------------------------ settings and refs


async def test_pool_settings_are_the_workers(acts: DeviceActivities) -> None:
    settings = await ActivityEnvironment().run(acts.pool_settings)
    assert settings == PoolSettings(resync_seconds=5)
    async with running_emulator() as emu:
        defaults = DeviceActivities(accounts={}, proxy_pools={}, transport=emu.transport)
        assert await ActivityEnvironment().run(defaults.pool_settings) == PoolSettings()


async def test_check_pool_refs(acts: DeviceActivities) -> None:
    env = ActivityEnvironment()
    ok = await env.run(acts.check_pool_refs, CheckRefsInput(account="default"))
    assert ok.problems == []
    ok = await env.run(
        acts.check_pool_refs, CheckRefsInput(account="other", proxy_pool="proxyseller-us")
    )
    assert ok.problems == []
    bad = await env.run(acts.check_pool_refs, CheckRefsInput(account="foo", proxy_pool="x"))
    assert bad.problems == [
        "unknown account 'foo' (providerCredentialRef); known: default, other",
        "unknown proxy pool 'x' (proxy.poolRef); known: proxyseller-us",
    ]


# ------------------------------------------------------------------ create


async def test_create_labels_the_device_and_resolves_the_proxy(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    input = _create_input(0, extra_labels={"team": "growth", LABEL_POOL: "spoofed"})
    result = await ActivityEnvironment().run(acts.create_device, input)
    device = result.device
    assert device.status == "provisioning"
    assert device.labels == {
        LABEL_POOL: "p1",
        LABEL_MANAGED_BY: MANAGED_BY,
        "team": "growth",
        # what it was made from: a later template change sees it drifted (spec.rollout)
        LABEL_TEMPLATE_HASH: template_hash(input.template),
    }
    assert PROXY_PASSWORD not in result.model_dump_json()
    # What the provider stored: the deterministic sticky-session username.
    async with emulator.client() as client:
        stored = await client.get_device(device.id)
    assert stored["proxy"]["username"] == (
        f"cust-session-{session_id(input.idempotency_key)}-ttl-900"
    )
    assert stored["proxy"]["host"] == "gw.proxy.example"


async def test_a_retried_create_returns_the_same_device(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    env = ActivityEnvironment()
    first = await env.run(acts.create_device, _create_input(0))
    again = await env.run(acts.create_device, _create_input(0))
    assert again.device.id == first.device.id
    stats = await emulator.stats()
    assert stats["creates"]["accepted"] == 1
    assert stats["creates"]["idempotentReplays"] == 1


async def test_create_unknown_account_or_proxy_pool_is_non_retryable(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError) as info:
        await env.run(acts.create_device, _create_input(0, account="nope"))
    assert info.value.type == ErrorType.UNKNOWN_ACCOUNT.value
    assert info.value.non_retryable
    assert "known: default, other" in str(info.value)
    with pytest.raises(ApplicationError) as info:
        await env.run(acts.create_device, _create_input(0, proxy_pool="nope"))
    assert info.value.type == ErrorType.UNKNOWN_PROXY_POOL.value
    assert info.value.non_retryable
    assert (await emulator.stats())["creates"]["accepted"] == 0


async def test_create_without_proxy(acts: DeviceActivities, emulator: Emulator) -> None:
    result = await ActivityEnvironment().run(
        acts.create_device, _create_input(0, proxy_pool=None, platform=Platform.IOS)
    )
    async with emulator.client() as client:
        assert (await client.get_device(result.device.id))["proxy"] is None


async def test_create_rate_limited_sets_the_next_retry_delay() -> None:
    async with running_emulator(creates_per_minute=2) as emu:
        acts = DeviceActivities(
            accounts=_accounts(), proxy_pools=PROXY_POOLS, transport=emu.transport
        )
        env = ActivityEnvironment()
        await env.run(acts.create_device, _create_input(0))
        await env.run(acts.create_device, _create_input(1))
        with pytest.raises(ApplicationError) as info:
            await env.run(acts.create_device, _create_input(2))
        await acts.aclose()
    assert info.value.type == ErrorType.RATE_LIMITED.value
    assert not info.value.non_retryable
    assert info.value.category is ApplicationErrorCategory.BENIGN
    assert info.value.next_retry_delay is not None
    assert timedelta(0) < info.value.next_retry_delay <= timedelta(seconds=60)


@pytest.mark.parametrize("retry_after", ["inf", "nan", "1e12", "86400"])
async def test_a_wild_retry_after_still_maps_to_a_bounded_rate_limit(retry_after: str) -> None:
    def too_many(request: httpx.Request) -> httpx.Response:
        problem = {"status": 429, "code": "rate_limited", "detail": "slow down"}
        return httpx.Response(429, json=problem, headers={"Retry-After": retry_after})

    acts = DeviceActivities(
        accounts=_accounts(), proxy_pools=PROXY_POOLS, transport=httpx.MockTransport(too_many)
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.create_device, _create_input(0))
    await acts.aclose()
    assert info.value.type == ErrorType.RATE_LIMITED.value
    delay = info.value.next_retry_delay
    assert delay is None or delay <= timedelta(seconds=MAX_RETRY_AFTER_SECONDS)


async def test_create_in_a_down_region_is_retryable(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    await emulator.region("us-west", "down")
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.create_device, _create_input(0))
    assert info.value.type == ErrorType.REGION_UNAVAILABLE.value
    assert not info.value.non_retryable


async def test_a_changed_body_under_the_same_key_is_non_retryable(acts: DeviceActivities) -> None:
    env = ActivityEnvironment()
    await env.run(acts.create_device, _create_input(0))
    with pytest.raises(ApplicationError) as info:
        await env.run(acts.create_device, _create_input(0, sticky_ttl=60))
    assert info.value.type == ErrorType.IDEMPOTENCY_KEY_REUSED.value
    assert info.value.non_retryable


async def test_no_secret_in_logs(
    acts: DeviceActivities, emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    env = ActivityEnvironment()
    await env.run(acts.create_device, _create_input(0))
    await emulator.faults(serverErrorRate=1.0)
    with pytest.raises(ApplicationError):
        await env.run(acts.create_device, _create_input(1))
    assert "p1" in caplog.text  # the pool name is logged ...
    assert DEV_KEY not in caplog.text  # ... never the key or the proxy password
    assert PROXY_PASSWORD not in caplog.text
    assert DEV_KEY not in repr(acts)


# ------------------------------------------------------------------ list, statuses, terminate


async def test_list_devices_excludes_terminated(acts: DeviceActivities, emulator: Emulator) -> None:
    env = ActivityEnvironment()
    devices = await _create(acts, 3)
    await _create(acts, 1, pool="p2")
    await env.run(
        acts.terminate_device, TerminateDeviceInput(account="default", device_id=devices[0].id)
    )
    listed = await env.run(acts.list_devices, ListDevicesInput(account="default", pool="p1"))
    assert {d.id for d in listed.devices} == {d.id for d in devices}  # terminating still counts
    await emulator.advance(10)
    listed = await env.run(acts.list_devices, ListDevicesInput(account="default", pool="p1"))
    assert {d.id for d in listed.devices} == {devices[1].id, devices[2].id}
    assert all(d.created_at.tzinfo is not None for d in listed.devices)


async def test_list_devices_unknown_account(acts: DeviceActivities) -> None:
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(
            acts.list_devices, ListDevicesInput(account="ghost", pool="p1")
        )
    assert info.value.type == ErrorType.UNKNOWN_ACCOUNT.value


async def test_get_statuses(acts: DeviceActivities, emulator: Emulator) -> None:
    devices = await _create(acts, 2)
    await emulator.advance(31)
    await emulator.session(devices[1].id, active=True)
    result = await ActivityEnvironment().run(
        acts.get_statuses,
        GetStatusesInput(account="default", ids=[devices[0].id, devices[1].id, "dev-gone"]),
    )
    by_id = {item.id: item for item in result.items}
    assert by_id[devices[0].id].status == "ready"
    assert (by_id[devices[1].id].status, by_id[devices[1].id].session_active) == ("busy", True)
    assert result.not_found == ["dev-gone"]


async def test_terminate_device_treats_404_as_gone(acts: DeviceActivities) -> None:
    env = ActivityEnvironment()
    (device,) = await _create(acts, 1)
    first = await env.run(
        acts.terminate_device, TerminateDeviceInput(account="default", device_id=device.id)
    )
    assert (first.device_id, first.already_gone) == (device.id, False)
    missing = await env.run(
        acts.terminate_device, TerminateDeviceInput(account="default", device_id="dev-nope")
    )
    assert missing.already_gone


async def test_terminate_pool_completes_only_when_none_is_left(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    await _create(acts, 3)
    (keeper,) = await _create(acts, 1, pool="p2")
    await emulator.advance(31)
    heartbeats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: heartbeats.append(details)

    with pytest.raises(ApplicationError) as info:
        await env.run(acts.terminate_pool, TerminatePoolInput(account="default", pool="p1"))
    assert not info.value.non_retryable
    assert "3 device(s) not yet terminated" in str(info.value)
    assert heartbeats
    assert (await emulator.stats())["terminations"] == 3

    # Still terminating: a retry deletes nothing new and still refuses to complete.
    with pytest.raises(ApplicationError):
        await env.run(acts.terminate_pool, TerminatePoolInput(account="default", pool="p1"))
    assert (await emulator.stats())["terminations"] == 3

    await emulator.advance(6)
    done = await env.run(acts.terminate_pool, TerminatePoolInput(account="default", pool="p1"))
    assert done.remaining == 0
    stats = await emulator.stats()
    assert stats["devices"]["byPool"] == {"p2": 1}  # the other pool is untouched
    async with emulator.client() as client:
        assert (await client.get_status(keeper.id))["status"] == "ready"


async def test_terminate_pool_with_instant_termination() -> None:
    async with running_emulator(terminate_seconds=0) as emu:
        acts = DeviceActivities(
            accounts=_accounts(), proxy_pools=PROXY_POOLS, transport=emu.transport
        )
        await _create(acts, 2)
        result = await ActivityEnvironment().run(
            acts.terminate_pool, TerminatePoolInput(account="default", pool="p1")
        )
        await acts.aclose()
        assert (result.terminated, result.remaining) == (2, 0)
        assert (await emu.stats())["devices"]["live"] == 0


# ------------------------------------------------------------------ watch


def _watching(
    acts: DeviceActivities, devices: list[DeviceInfo], env: ActivityEnvironment | None = None
) -> tuple[ActivityEnvironment, Heartbeats, asyncio.Task[Any]]:
    """A watch of `devices` started in `env` (a new one by default), its heartbeats counted."""
    env = env or ActivityEnvironment()
    heartbeats = Heartbeats()
    env.on_heartbeat = heartbeats
    watch = asyncio.create_task(env.run(acts.watch_devices, _watch(device_fingerprint(devices))))
    return env, heartbeats, watch


def _watch(fingerprint: str, *, max_seconds: float = 10.0) -> WatchDevicesInput:
    return WatchDevicesInput(
        account="default",
        pool="p1",
        fingerprint=fingerprint,
        poll_seconds=0.01,
        max_seconds=max_seconds,
    )


def test_fingerprint_is_stable_and_order_independent() -> None:
    now = datetime.now(UTC)
    a = DeviceInfo(id="a", status="ready", created_at=now)
    b = DeviceInfo(id="b", status="busy", created_at=now, session_active=True)
    assert device_fingerprint([a, b]) == device_fingerprint([b, a])
    assert len(device_fingerprint([a])) == 16
    a_later = a.model_copy(update={"updated_at": now + timedelta(seconds=5)})
    assert device_fingerprint([a_later, b]) == device_fingerprint([a, b])
    a_busy = a.model_copy(update={"status": "busy"})
    assert device_fingerprint([a_busy, b]) != device_fingerprint([a, b])
    a_session = a.model_copy(update={"session_active": True})
    assert device_fingerprint([a_session, b]) != device_fingerprint([a, b])
    assert device_fingerprint([]) != device_fingerprint([a])


async def test_watch_returns_at_once_when_the_fingerprint_differs(acts: DeviceActivities) -> None:
    devices = await _create(acts, 2)
    result = await ActivityEnvironment().run(acts.watch_devices, _watch(""))
    assert result.changed
    assert result.fingerprint == device_fingerprint(devices)
    assert {d.id for d in result.devices} == {d.id for d in devices}


async def test_watch_returns_on_change(acts: DeviceActivities, emulator: Emulator) -> None:
    devices = await _create(acts, 2)
    _, heartbeats, watch = _watching(acts, devices)
    await heartbeats.reached(3)
    assert not watch.done()
    await emulator.advance(31)  # provisioning -> ready
    result = await asyncio.wait_for(watch, timeout=5)
    assert result.changed
    assert {d.status for d in result.devices} == {"ready"}
    assert result.fingerprint != device_fingerprint(devices)


async def test_watch_times_out_unchanged(acts: DeviceActivities) -> None:
    devices = await _create(acts, 1)
    fingerprint = device_fingerprint(devices)
    result = await ActivityEnvironment().run(
        acts.watch_devices, _watch(fingerprint, max_seconds=0.1)
    )
    assert not result.changed
    assert result.fingerprint == fingerprint
    assert [d.id for d in result.devices] == [devices[0].id]


@pytest.mark.parametrize("name", ["list_devices", "watch_devices"])
async def test_a_compact_answer_asked_to_fold_names_the_template_hash_once(
    acts: DeviceActivities, name: str
) -> None:
    devices = await _create(acts, 3)
    asked = {"compact": True, "fold_template_hash": True}
    if name == "list_devices":
        listing = ListDevicesInput(account="default", pool="p1", **asked)
        answer: Any = await ActivityEnvironment().run(acts.list_devices, listing)
    else:
        watch = _watch("").model_copy(update=asked)
        answer = await ActivityEnvironment().run(acts.watch_devices, watch)
    assert answer.template_hash == template_hash(_create_input(0).template)
    assert [row[8:] for row in answer.rows] == [[], [], []]  # no label left to spell
    assert {d.id: d.labels for d in answer.listing("p1")} == {d.id: d.labels for d in devices}


async def test_a_watch_whose_health_check_ended_says_so_with_the_listing(
    acts: DeviceActivities, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = await _create(acts, 2)

    async def ended(client: Any, workflow_id: str) -> bool:
        return False

    monkeypatch.setattr(pool_runs, "still_running", ended)
    watch = _watch(device_fingerprint(devices)).model_copy(
        update={"compact": True, "fold_template_hash": True, "health_every_seconds": 0.0}
        | {"health_workflow_id": "health-p1"}
    )
    answer = await ActivityEnvironment(client=cast(Any, object())).run(acts.watch_devices, watch)
    assert (answer.health_ended, answer.changed) == (True, False)
    assert {d.id: d.labels for d in answer.listing("p1")} == {d.id: d.labels for d in devices}


async def test_watch_rides_out_server_errors(acts: DeviceActivities, emulator: Emulator) -> None:
    await _create(acts, 1)
    await emulator.advance(31)
    env = ActivityEnvironment()
    devices = (
        await env.run(acts.list_devices, ListDevicesInput(account="default", pool="p1"))
    ).devices
    await emulator.faults(serverErrorRate=1.0)
    _, heartbeats, watch = _watching(acts, devices, env)
    await heartbeats.reached(3)
    assert not watch.done()  # three failed polls, still watching
    await emulator.faults()
    await emulator.session(devices[0].id, active=True)
    result = await asyncio.wait_for(watch, timeout=5)
    assert result.changed
    assert result.devices[0].session_active


async def test_watch_fails_if_it_never_saw_the_pool(
    emulator: Emulator, acts: DeviceActivities
) -> None:
    await emulator.faults(serverErrorRate=1.0)
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.watch_devices, _watch("x", max_seconds=0.05))
    assert info.value.type == ErrorType.SERVER_ERROR.value
    assert not info.value.non_retryable


async def test_watch_reacts_to_cancellation(acts: DeviceActivities) -> None:
    env, heartbeats, watch = _watching(acts, await _create(acts, 1))
    await heartbeats.reached(1)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(watch, timeout=5)


@pytest.mark.parametrize("watch", ["watch_devices", "watch_health", "terminate_pool"])
async def test_a_watch_heartbeats_while_it_lists(
    watch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heartbeats_module, "HEARTBEAT_EVERY", timedelta(milliseconds=10))
    monkeypatch.setattr(DeviceActivities, "_pool_run", _still_running)
    beats = Heartbeats()
    during_listing: list[int] = []

    async def slow_listing(request: httpx.Request) -> httpx.Response:
        before = beats.count
        await asyncio.sleep(0.2)  # a slow provider: the listing alone outlasts heartbeats
        during_listing.append(beats.count - before)
        return httpx.Response(200, json={"items": [], "nextPageToken": None})

    acts = DeviceActivities(
        accounts=_accounts(), proxy_pools={}, transport=httpx.MockTransport(slow_listing)
    )
    env = ActivityEnvironment()
    env.on_heartbeat = beats
    if watch == "watch_devices":
        await env.run(acts.watch_devices, _watch("x"))
    elif watch == "terminate_pool":
        await env.run(acts.terminate_pool, TerminatePoolInput(account="default", pool="p1"))
    else:
        run = PoolRunInput(workflow_id="devicepool/p1")
        await env.run(
            acts.watch_health,
            WatchHealthInput(account="default", pool="p1", pool_run=run, once=True),
        )
    await acts.aclose()
    assert during_listing and during_listing[0] >= 3


async def _still_running(self: DeviceActivities, run: PoolRunInput) -> PoolRunResult:
    return PoolRunResult(running=True, first_run_id="r", status="RUNNING")


async def test_watch_unknown_account_fails_at_once(acts: DeviceActivities) -> None:
    input = _watch("x").model_copy(update={"account": "ghost"})
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(acts.watch_devices, input)
    assert info.value.type == ErrorType.UNKNOWN_ACCOUNT.value
    assert info.value.non_retryable


async def test_a_create_cancelled_on_its_way_lands_and_is_reported(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    # A deleted pool cancels its batches, then sweeps the provider: a create
    # already sent must finish (and be reported), never land after the sweep.
    await emulator.faults(latencyMs=300)
    env = ActivityEnvironment()
    heartbeats = Heartbeats()
    env.on_heartbeat = heartbeats
    run = asyncio.ensure_future(env.run(acts.create_device, _create_input(0, pool="gone")))
    await heartbeats.reached(1)
    env.cancel()
    result = await run
    await emulator.faults()
    assert result.device.labels[LABEL_POOL] == "gone"
    assert (await emulator.stats())["devices"]["byPool"] == {"gone": 1}


async def test_a_scale_down_removes_a_booting_or_idle_device_and_keeps_a_busy_one(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    # The pool removes a device still booting before an idle one (issue 15,
    # item 5); the re-check right before the DELETE lets it go, and does not
    # count it as a replacement (it is a scale-down, not an unhealthy device).
    env = ActivityEnvironment()
    booting, busy = await _create(acts, 2)
    assert booting.status == "provisioning"
    await emulator.advance(31)
    await emulator.session(busy.id, active=True)
    [fresh] = await _create(acts, 1, pool="p2")

    def down(device_id: str) -> TerminateDeviceInput:
        return TerminateDeviceInput(account="default", device_id=device_id, only_if_idle=True)

    gone = await env.run(acts.terminate_device, down(fresh.id))
    assert (gone.skipped, gone.already_gone) == (None, False)
    kept = await env.run(acts.terminate_device, down(busy.id))
    assert kept.skipped and "busy" in kept.skipped
    replaced = acts.metrics.registry.get_sample_value(
        "devicepool_replacements_total", {"pool": "p2", "reason": "startup_timeout"}
    )
    assert replaced is None


async def test_a_scale_down_keeps_a_device_used_since_the_plans_listing(
    acts: DeviceActivities, emulator: Emulator
) -> None:
    # Issue 23 (suspected): the re-check looked at status and session only. A
    # session that started and ended after the plan's listing leaves the device
    # ready and sessionless, but used within the idle grace: it stays.
    env = ActivityEnvironment()
    [device] = await _create(acts, 1, pool="p3")
    await emulator.advance(31)
    [seen] = (
        await env.run(acts.list_devices, ListDevicesInput(account="default", pool="p3"))
    ).devices
    assert seen.status == "ready"
    await emulator.advance(5)
    await emulator.session(device.id, active=True)
    await emulator.session(device.id, active=False)
    down = TerminateDeviceInput(
        account="default", device_id=device.id, only_if_idle=True, idle_since=seen.idle_since
    )
    kept = await env.run(acts.terminate_device, down)
    assert kept.skipped and "used since" in kept.skipped, kept
    # Judged on what the listing shows now, it goes.
    [now] = (
        await env.run(acts.list_devices, ListDevicesInput(account="default", pool="p3"))
    ).devices
    gone = await env.run(
        acts.terminate_device, down.model_copy(update={"idle_since": now.idle_since})
    )
    assert (gone.skipped, gone.already_gone) == (None, False)


class _RegionsAnswer(httpx.AsyncBaseTransport):
    """The emulator, except `GET /api/v1/regions` answers `status` (404: a provider
    without the call) when set; counts the region calls that reach the provider."""

    def __init__(self, inner: httpx.AsyncBaseTransport, status: int | None = None) -> None:
        self.inner = inner
        self.status = status
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/regions":
            self.calls += 1
            if self.status is not None:
                problem = {"type": "about:blank", "title": "Not Found", "status": self.status}
                problem |= {"detail": "no such route", "code": "not_found"}
                return httpx.Response(self.status, json=problem)
        return await self.inner.handle_async_request(request)


async def test_check_pool_refs_refuses_an_unknown_region(emulator: Emulator) -> None:
    # Issue 28: `region: us-wset` was applied and rented devices there.
    transport = _RegionsAnswer(emulator.transport)
    acts = DeviceActivities(accounts=_accounts(), proxy_pools=PROXY_POOLS, transport=transport)
    env = ActivityEnvironment()
    try:
        ok = await env.run(
            acts.check_pool_refs, CheckRefsInput(account="default", region="us-west")
        )
        assert ok.problems == []
        bad = await env.run(
            acts.check_pool_refs, CheckRefsInput(account="default", region="us-wset")
        )
        assert bad.problems == [
            "unknown region 'us-wset' (spec.region); known: ap-southeast, eu-central, eu-west, "
            "us-east, us-west"
        ]
        assert transport.calls == 1  # the list is kept, not asked for every pool pass
        # An unknown account is the one problem: its regions cannot be asked.
        unknown = await env.run(acts.check_pool_refs, CheckRefsInput(account="x", region="nope"))
        assert len(unknown.problems) == 1 and "unknown account 'x'" in unknown.problems[0]
    finally:
        await acts.aclose()


@pytest.mark.parametrize("status", [404, 500])
async def test_a_provider_that_cannot_list_regions_blocks_no_pool(
    emulator: Emulator, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    transport = _RegionsAnswer(emulator.transport, status=status)
    acts = DeviceActivities(accounts=_accounts(), proxy_pools=PROXY_POOLS, transport=transport)
    try:
        with caplog.at_level(logging.WARNING):
            result = await ActivityEnvironment().run(
                acts.check_pool_refs, CheckRefsInput(account="default", region="anywhere")
            )
        assert result.problems == []
        assert "cannot list the provider's regions, so regions are not checked" in caplog.text
    finally:
        await acts.aclose()
