"""`heartbeating()` (activities/heartbeats.py): a cancel is never lost on the way out.

The context stops its background beat on exit and waits for it. A cancel of the
activity that lands in that wait (the body had just finished: a listing answered
as the watch was dropped or its pool deleted) used to be taken for the beat's own
cancellation and swallowed, so the watch polled on to its `max_seconds` holding a
slot (seen in CI as a watch test that "did not raise" after 30 s).
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import ActivityEnvironment

from devicepool.activities.heartbeats import heartbeating


async def test_a_cancel_that_lands_while_the_beat_stops_still_cancels() -> None:
    reached_after: list[str] = []

    async def body() -> None:
        outer = asyncio.current_task()
        assert outer is not None
        async with heartbeating():
            await asyncio.sleep(0)
            # Runs on the next turn of the loop: when this task already waits for the
            # beat to stop, at the end of the `async with`.
            asyncio.get_running_loop().call_soon(outer.cancel)
        reached_after.append("past the context")
        await asyncio.sleep(5)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(ActivityEnvironment().run(body), timeout=10)
    assert reached_after == []


async def test_a_cancel_inside_the_body_still_cancels() -> None:
    async def body() -> None:
        async with heartbeating():
            await asyncio.sleep(5)

    running = asyncio.ensure_future(ActivityEnvironment().run(body))
    await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_a_body_that_ends_stops_the_beat_and_returns() -> None:
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    async def body() -> str:
        async with heartbeating():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # no beat after the context
        return "done"

    assert await env.run(body) == "done"
    assert len(beats) == 1


async def test_a_create_finished_through_a_cancel_is_not_cancelled_again_afterwards() -> None:
    """`finish_even_if_cancelled` hands its call's answer back once its request is out
    (`point_of_no_return`); a provider call made with `heartbeating()` after it is not
    taken for a cancel still under way."""
    from devicepool.activities.heartbeats import finish_even_if_cancelled, point_of_no_return

    async def create() -> str:
        point_of_no_return()  # its request in flight from here
        await asyncio.sleep(0.1)
        return "device-1"

    async def body() -> str:
        device = await finish_even_if_cancelled(create())
        async with heartbeating():
            await asyncio.sleep(0.01)
        return device

    running = asyncio.ensure_future(ActivityEnvironment().run(body))
    await asyncio.sleep(0.03)
    running.cancel()
    assert await running == "device-1"
