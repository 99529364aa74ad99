"""The GeeLark emulator bills running minutes, caps each phone's day, charges monthly
rentals, and shows it all in `/_emulator/stats`."""

from __future__ import annotations

import pytest

from tests.helpers.geelark import team


async def test_running_minutes_are_billed_whole_from_the_start_call_to_the_stop() -> None:
    async with team(boot_seconds=30) as t:
        await t.to_next_utc_day()
        a, b = await t.create("a", "b")
        await t.ok("phone/start", {"ids": [a, b]})
        await t.advance(150)  # 2.5 minutes, the boot included
        await t.ok("phone/stop", {"ids": [a]})
        await t.advance(600)  # a stopped phone costs nothing; b runs on
        stats = await t.stats()
        assert stats["billing"]["byPhone"][a] == {"minutes": 3, "money": 0.021}
        assert stats["billing"]["byPhone"][b]["minutes"] == 13
        assert stats["minutesBilled"] == 16
        assert stats["moneyBilled"] == pytest.approx(16 * 0.007)
        assert stats["billing"]["balance"] == pytest.approx(100 - 16 * 0.007)


async def test_the_daily_cap_applies_per_phone_and_utc_day() -> None:
    async with team(boot_seconds=0) as t:
        await t.to_next_utc_day()
        [phone] = await t.create("a")
        await t.ok("phone/start", {"ids": [phone]})
        await t.advance(10 * 3600)  # 600 minutes: $4.20 uncapped
        stats = await t.stats()
        assert stats["billing"]["byPhone"][phone] == {"minutes": 600, "money": 1.0}
        assert stats["billing"]["capAppliedDays"] == 1
        await t.to_next_utc_day()  # the rest of the first day, still capped; the new day begins
        await t.advance(59.9)  # 0.001 s past midnight + 59.9 s: one (started) minute
        stats = await t.stats()
        assert stats["billing"]["byPhone"][phone]["money"] == pytest.approx(1.0 + 0.007)


async def test_a_deleted_phone_stays_on_the_bill_and_a_monthly_one_pays_its_rental() -> None:
    async with team(boot_seconds=0, monthly_price=9.9) as t:
        [phone] = await t.create("a")
        [monthly] = await t.create("m", chargeMode=1)
        started = await t.ok("phone/start", {"ids": [phone, monthly]})
        assert [d["chargingMethod"] for d in started["successDetails"]] == [
            "Per-minute usage",
            "Monthly rental",
        ]
        await t.advance(120)
        await t.ok("phone/stop", {"ids": [phone, monthly]})
        await t.ok("phone/delete", {"ids": [phone]})
        stats = await t.stats()
        assert stats["billing"]["byPhone"][phone] == {"minutes": 2, "money": 0.014}
        assert stats["billing"]["byPhone"][monthly] == {"minutes": 2, "money": 9.9}
        assert stats["billing"]["rental"] == 9.9
        assert stats["moneyBilled"] == pytest.approx(9.914)


async def test_the_stats_shape_promised_to_the_rest_of_devicepool() -> None:
    async with team() as t:
        stats = await t.stats()
        assert {"total", "running", "created", "starts", "deleted"} <= set(stats["phones"])
        assert {"accepted", "rateLimited", "locked"} <= set(stats["requests"])
        assert {"minutesBilled", "moneyBilled"} <= set(stats)
        assert set(stats) == {
            "phones",
            "requests",
            "quotas",
            "minutesBilled",
            "moneyBilled",
            "billing",
            "secrets",
            "faultsInjected",
        }
