"""`PhonePacer` shares the account's 1 request a second fairly: replacements first, then the
pools round-robin (what `provider_call` says a call serves), one call at a time."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from devicepool.activities.providers.base import ProviderCall, current_call, provider_call
from devicepool.activities.providers.bitbrowser import PhonePacer


async def _order(pacer: PhonePacer, calls: list[tuple[str, ProviderCall]]) -> list[str]:
    """Hold the pacer, queue `calls` (name, whom) in this order, let go: who got the turns."""
    order: list[str] = []
    holding = asyncio.Event()
    go = asyncio.Event()

    async def first() -> None:
        async with pacer.turn(ProviderCall(pool="holder")):
            holding.set()
            await go.wait()

    async def one(name: str, call: ProviderCall) -> None:
        async with pacer.turn(call):
            order.append(name)

    holder = asyncio.create_task(first())
    await holding.wait()
    tasks = []
    for name, call in calls:
        tasks.append(asyncio.create_task(one(name, call)))
        await asyncio.sleep(0)  # queued in this order
    assert pacer.waiting == len(calls)
    go.set()
    await asyncio.gather(holder, *tasks)
    return order


async def test_replacements_go_first_then_pools_take_turns() -> None:
    pacer = PhonePacer(interval=0.01)
    a, b, c = (ProviderCall(pool=p) for p in "abc")
    order = await _order(
        pacer,
        [
            ("a1", a),
            ("a2", a),
            ("a3", a),
            ("b1", b),
            ("r1", ProviderCall(pool="c", replacement=True)),
            ("c1", c),
            ("r2", ProviderCall(pool="a", replacement=True)),
        ],
    )
    assert order == ["r1", "r2", "a1", "b1", "c1", "a2", "a3"]
    assert pacer.replacement_turns == 2 and pacer.turns["a"] == 4


async def test_turns_stay_an_interval_apart_from_the_answer() -> None:
    pacer = PhonePacer(interval=0.05)
    loop = asyncio.get_running_loop()
    starts: list[float] = []

    async def one(pool: str) -> None:
        with provider_call(pool=pool):
            async with pacer.turn():
                starts.append(loop.time())

    await asyncio.gather(*(one(p) for p in "abcab"))
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(starts) == 5 and min(gaps) >= 0.05 - 1e-3


async def test_a_caller_cancelled_while_waiting_gives_its_turn_up() -> None:
    pacer = PhonePacer(interval=0.01)
    holding, go = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        async with pacer.turn(ProviderCall(pool="a")):
            holding.set()
            await go.wait()

    async def one(name: str, pool: str) -> None:
        async with pacer.turn(ProviderCall(pool=pool)):
            order.append(name)

    holder = asyncio.create_task(first())
    await holding.wait()
    gone = asyncio.create_task(one("gone", "b"))
    kept = asyncio.create_task(one("kept", "c"))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert pacer.waiting == 1
    go.set()
    await asyncio.gather(holder, kept)
    assert order == ["kept"] and pacer.waiting == 0
    async with pacer.turn():  # free again
        pass


async def test_provider_call_keeps_what_it_is_not_told() -> None:
    with provider_call(pool="p", replacement=True):
        with provider_call(pool="q"):
            assert current_call() == ProviderCall(pool="q", replacement=True)
