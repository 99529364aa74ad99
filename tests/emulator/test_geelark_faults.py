"""Faults of the GeeLark emulator's control plane: an answer lost after its change was made,
47002 and 45002 on start, batch items failing under a code-0 envelope, whole-call refusals."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.geelark import phone_row, team


async def test_a_timeout_after_the_change_applied_leaves_the_phone_made() -> None:
    async with team() as t:
        await t.faults(timeouts=1, timeoutSeconds=30, timeoutPaths=["phone/addNew"])
        await t.ok("phone/list", {})  # another path: answered
        body = {"mobileType": "Android 12", "data": [phone_row("made")]}
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(t.call("phone/addNew", body), timeout=0.3)
        listed = await t.ok("phone/list", {"serialName": "made"})
        assert listed["total"] == 1  # the answer never came, the phone exists
        await t.create("answered")  # only the next one was held
        stats = await t.stats()
        assert stats["faultsInjected"] == {"timeout": 1}
        assert stats["phones"]["created"] == 2


async def test_start_fails_items_with_45002_and_47002_when_told() -> None:
    async with team() as t:
        a, b, c = await t.create("a", "b", "c")
        await t.faults(startProxyFailures=1, startResourceFailures=1)
        data = await t.ok("phone/start", {"ids": [a, b, c]})
        assert [(f["id"], f["code"]) for f in data["failDetails"]] == [(a, 45002), (b, 47002)]
        assert data["successAmount"] == 1 and await t.status(a, b, c) == {a: 2, b: 2, c: 1}
        assert (await t.stats())["quotas"]["opens"] == 1  # a failed start opens nothing


async def test_a_batch_with_failing_items_still_answers_code_0() -> None:
    async with team(boot_seconds=0) as t:
        ids = await t.create("a", "b", "c")
        await t.ok("phone/start", {"ids": ids})
        await t.faults(itemFailures=2, itemFailureCode=43021)
        data = await t.ok("phone/stop", {"ids": ids})  # `ok` checks code 0
        assert [f["code"] for f in data["failDetails"]] == [43021, 43021]
        assert await t.status(*ids) == {ids[0]: 0, ids[1]: 0, ids[2]: 2}


async def test_whole_call_refusals_and_the_faults_body_checked() -> None:
    async with team() as t:
        await t.faults(concurrencyRate=1)
        assert await t.refused("phone/list", {}) == 47002
        await t.faults(serverErrorRate=1)
        assert await t.refused("phone/list", {}) == 50000
        for bad in ({"nope": 1}, {"timeoutRate": 2}, {"itemFailures": 1.5}, {"timeoutPaths": "x"}):
            response = await t.http.post("/_emulator/faults", json=bad)
            assert response.status_code == 400, bad
        assert (await t.http.get("/_emulator/faults")).json()["serverErrorRate"] == 1
        await t.faults()
        await t.ok("phone/list", {})
        assert (await t.stats())["faultsInjected"] == {"concurrency": 1, "serverError": 1}


async def test_the_control_plane_answers_unknown_phones_with_404_and_reset_empties() -> None:
    async with team() as t:
        await t.create("a")
        assert (await t.http.post("/_emulator/phones/nope/stop")).status_code == 404
        bad = await t.http.post("/_emulator/phones/nope/busy", json={"task": "yes"})
        assert bad.status_code == 404
        reset = (await t.http.post("/_emulator/reset")).json()
        assert reset["phones"]["total"] == 0 and reset["phones"]["created"] == 0


async def test_a_fault_that_would_hold_a_call_for_ever_is_refused() -> None:
    async with team() as t:
        for bad in ({"timeoutSeconds": 1e308}, {"latencyMs": 1e12}):
            response = await t.http.post("/_emulator/faults", json=bad)
            assert response.status_code == 400, bad
