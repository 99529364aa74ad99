"""The GeeLark emulator's four kinds of limit: request windows and the two-hour lock,
concurrency, daily quotas in UTC days, the profile cap and the balance."""

from __future__ import annotations

import asyncio

from devicepool.testing import eventually
from tests.helpers.geelark import Team, phone_row, team


async def _to_next(t: Team, window: int) -> None:
    """Just past the start of the next UTC minute (60) or hour (3600)."""
    utc = t.emulator.now() + t.emulator.windows.offset
    await t.advance(window - utc % window + 0.001)


async def _to_next_minute(t: Team) -> None:
    await _to_next(t, 60)


async def test_the_minute_window_is_per_endpoint_and_lifts_in_the_next_minute() -> None:
    async with team(requests_per_minute=3) as t:
        await _to_next_minute(t)
        for _ in range(3):
            await t.ok("phone/list", {})
        assert await t.refused("phone/list", {}) == 40007
        await t.ok("phone/status", {"ids": ["x"]})  # another endpoint: its own window
        await _to_next_minute(t)
        await t.ok("phone/list", {})
        requests = (await t.stats())["requests"]
        assert (requests["accepted"], requests["rateLimited"], requests["maxPerMinute"]) == (
            5,
            1,
            3,
        )


async def test_an_hourly_overrun_locks_the_key_for_two_hours_on_every_endpoint() -> None:
    async with team(requests_per_minute=2, requests_per_hour=4) as t:
        await _to_next(t, 3600)
        await t.ok("phone/list", {})
        await t.ok("phone/list", {})
        assert await t.refused("phone/list", {}) == 40007
        assert await t.refused("phone/list", {}) == 40007
        # The fifth call this hour: past 4 (refused calls count), the key is locked.
        assert await t.refused("phone/list", {}) == 40014
        assert await t.refused("phone/status", {"ids": ["x"]}) == 40014
        await t.ok("phone/status", {"ids": ["x"]}, mode="token")  # another credential
        await t.advance(7200 - 1)
        assert await t.refused("phone/status", {"ids": ["x"]}) == 40014
        assert (await t.stats())["requests"]["lockedNow"] == {f"key:{t.config.app_id}": 1.0}
        await t.advance(1)
        await t.ok("phone/status", {"ids": ["x"]})
        requests = (await t.stats())["requests"]
        assert requests["locks"] == 1 and requests["locked"] == 3 and requests["lockedNow"] == {}


async def test_the_billing_endpoints_have_their_own_minute_limits() -> None:
    async with team() as t:
        await _to_next_minute(t)
        await t.ok("pay/plan/info", {})
        assert await t.refused("pay/plan/info", {}) == 40007
        for _ in range(10):
            await t.ok("pay/wallet", {})
        assert await t.refused("pay/wallet", {}) == 40007


async def test_too_many_calls_in_flight_are_refused_with_47002() -> None:
    async with team(max_concurrent_requests=2) as t:
        await t.faults(latencyMs=60_000)  # held in flight until cancelled
        held = [asyncio.create_task(t.call("phone/list", {})) for _ in range(2)]

        async def both_in_flight() -> bool:
            return sum(t.emulator.windows.in_flight.values()) == 2

        await eventually(both_in_flight, timeout=10, every=0.001, what="two calls in flight")
        assert await t.refused("phone/list", {}) == 47002
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        await t.faults()
        await t.ok("phone/list", {})  # the cancelled calls left
        assert (await t.stats())["requests"]["concurrencyRefused"] == 1


async def test_phones_running_at_once_are_capped_with_47001() -> None:
    async with team(max_running=1) as t:
        a, b = await t.create("a", "b")
        data = await t.ok("phone/start", {"ids": [a, b]})
        assert data["failDetails"] == [
            {"code": 47001, "id": b, "msg": "device concurrency limit reached"}
        ]
        await t.ok("phone/stop", {"ids": [a]})
        assert (await t.ok("phone/start", {"ids": [b]}))["successAmount"] == 1


async def test_daily_creates_are_a_utc_day_quota_44004() -> None:
    async with team(creates_per_day=2) as t:
        await t.to_next_utc_day()
        rows = [phone_row(f"p{i}") for i in range(3)]
        data = await t.ok("phone/addNew", {"mobileType": "Android 12", "data": rows})
        assert [d["code"] for d in data["details"]] == [0, 0, 44004]
        assert await t.refused("phone/addNew", {"mobileType": "Android 12", "data": rows}) == 44004
        await t.advance(86400 - 2)  # the same UTC day
        assert await t.refused("phone/addNew", {"mobileType": "Android 12", "data": rows}) == 44004
        await t.to_next_utc_day()
        await t.create("next-day")
        quotas = (await t.stats())["quotas"]
        assert (quotas["creates"], quotas["createsPerDay"]) == (1, 2)
        assert quotas["refused"] == {"creates:44004": 3}


async def test_daily_opens_are_a_utc_day_quota_43008() -> None:
    async with team(opens_per_day=2, boot_seconds=0) as t:
        await t.to_next_utc_day()
        a, b = await t.create("a", "b")
        await t.ok("phone/start", {"ids": [a]})
        await t.ok("phone/start", {"ids": [a]})  # already on: no second open
        await t.ok("phone/stop", {"ids": [a]})
        await t.ok("phone/start", {"ids": [a]})
        data = await t.ok("phone/start", {"ids": [b]})
        assert data["failDetails"][0]["code"] == 43008
        await t.to_next_utc_day()
        assert (await t.ok("phone/start", {"ids": [b]}))["successAmount"] == 1


async def test_the_profile_cap_44002_and_the_basic_plan_44001() -> None:
    async with team(max_profiles=2) as t:
        rows = [phone_row(f"p{i}") for i in range(3)]
        data = await t.ok("phone/addNew", {"mobileType": "Android 12", "data": rows})
        assert [d["code"] for d in data["details"]] == [0, 0, 44002]
        assert await t.refused("phone/addNew", {"mobileType": "Android 12", "data": rows}) == 44002
    async with team(plan="base") as t:
        rows = [phone_row("a"), phone_row("b")]
        assert await t.refused("phone/addNew", {"mobileType": "Android 12", "data": rows}) == 44001
        await t.create("one")


async def test_an_empty_wallet_refuses_starts_with_41001() -> None:
    async with team(balance=0.01, price_per_minute=0.007, boot_seconds=0) as t:
        a, b = await t.create("a", "b")
        await t.ok("phone/start", {"ids": [a]})
        await t.advance(60)  # one minute billed: 0.003 left, less than a minute's price
        data = await t.ok("phone/start", {"ids": [b]})
        assert data["failDetails"][0]["code"] == 41001
        assert (await t.ok("pay/wallet", {}))["balance"] < 0.007


async def test_a_phone_the_provider_stopped_for_idleness_frees_its_running_slot() -> None:
    async with team(max_running=1, boot_seconds=0, idle_minutes=1) as t:
        a, b = await t.create("a", "b")
        await t.ok("phone/start", {"ids": [a], "energySavingMode": 1})
        await t.advance(61)  # a stopped itself; nobody has looked at it since
        assert (await t.ok("phone/start", {"ids": [b]}))["successAmount"] == 1
