"""`PhonePacer` shares the account's 1 request a second fairly: replacements first, then the
pools round-robin (what `provider_call` says a call serves), one call at a time."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from devicepool.activities.providers.base import ProviderCall, current_call, provider_call
from devicepool.activities.providers.bitbrowser import PhonePacer


def _refuse() -> None:
    raise asyncio.CancelledError("the create was cancelled before its first write")


async def _order(
    pacer: PhonePacer,
    calls: list[tuple[str, ProviderCall]],
    refused: frozenset[str] = frozenset(),
    answers: list[tuple[float, float]] | None = None,
) -> list[str]:
    """Hold the pacer, queue `calls` (name, whom) in this order, let go: who made calls
    (the `refused` names' turns refused as they come; `answers` gets each call's start
    and end)."""
    order: list[str] = []
    loop = asyncio.get_running_loop()
    holding = asyncio.Event()
    go = asyncio.Event()

    async def first() -> None:
        async with pacer.turn(ProviderCall(pool="holder")):
            holding.set()
            await go.wait()

    async def one(name: str, call: ProviderCall) -> None:
        if name in refused:
            with pytest.raises(asyncio.CancelledError):
                async with pacer.turn(call, refuse=_refuse):
                    raise AssertionError(f"{name}: a refused turn's call is not made")
            return
        async with pacer.turn(call):
            start = loop.time()
            order.append(name)
            await asyncio.sleep(0)  # the call, answered
            if answers is not None:
                answers.append((start, loop.time()))

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


async def test_a_refused_turn_goes_to_its_own_pools_next_waiter() -> None:
    """R32 #1: a deleted pool's cancelled creates queued for their adds, each refused as
    its turn comes, and the pool's sweep queued behind them, on an account with 4 other
    busy pools. The sweep goes after one round of the others' real calls (it went after
    24: each refused turn passed to the next pool, a round per cancelled create); the
    others still take turns, and no two calls are closer than the interval."""
    pacer = PhonePacer(interval=0.01)
    others = [f"q{k}" for k in range(4)]
    creates = [f"create{n}" for n in range(5)]
    answers: list[tuple[float, float]] = []
    order = await _order(
        pacer,
        [(f"{q}.{n}", ProviderCall(pool=q)) for q in others for n in range(6)]
        + [(name, ProviderCall(pool="p")) for name in [*creates, "sweep"]],
        refused=frozenset(creates),
        answers=answers,
    )
    rounds = [[f"{q}.{n}" for q in others] for n in range(6)]
    assert order == rounds[0] + ["sweep"] + [name for later in rounds[1:] for name in later]
    assert pacer.calls == 1 + 25 and pacer.turns["p"] == 1
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(answers)]
    assert min(gaps) >= 0.01 - 1e-3


async def test_a_turn_taken_idle_and_refused_keeps_the_round() -> None:
    """R33 #1: a create takes the idle pacer's turn (no queue: its pool never moved to the
    end of the round) and sleeps out the spacing; p2, q1, p3 queue; the create is cancelled
    and refused. Its unused turn goes to its own pool's next waiter, p2, and the round moves
    on to q1 before p's next (it gave p two calls in a row: p2, p3, q1)."""
    pacer = PhonePacer(interval=0.05)
    order: list[str] = []
    cancelled = False

    def refuse() -> None:
        if cancelled:
            _refuse()

    async with pacer.turn(ProviderCall(pool="x")):  # a call just answered: spacing ahead
        pass

    async def create() -> None:
        with pytest.raises(asyncio.CancelledError):
            async with pacer.turn(ProviderCall(pool="p"), refuse=refuse):
                raise AssertionError("a refused turn's call is not made")

    async def one(name: str, pool: str) -> None:
        async with pacer.turn(ProviderCall(pool=pool)):
            order.append(name)

    taken = asyncio.create_task(create())
    await asyncio.sleep(0)
    assert pacer.waiting == 0  # the idle pacer's turn, taken at once
    tasks = []
    for name, pool in (("p2", "p"), ("q1", "q"), ("p3", "p")):
        tasks.append(asyncio.create_task(one(name, pool)))
        await asyncio.sleep(0)
    cancelled = True  # during the spacing wait
    await asyncio.gather(taken, *tasks)
    assert order == ["p2", "q1", "p3"], order


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


async def test_a_caller_cancelled_once_given_the_turn_leaves_it_to_its_pool() -> None:
    """R33 #2: a caller given the turn and cancelled before it ran (the grant and the cancel
    in one step) uses no turn: it goes to its own pool's next waiter, then the round moves on."""
    pacer = PhonePacer(interval=0.01)
    holding, go = asyncio.Event(), asyncio.Event()
    order: list[str] = []
    tasks: dict[str, asyncio.Task[None]] = {}

    async def first() -> None:
        async with pacer.turn(ProviderCall(pool="a")):
            holding.set()
            await go.wait()
        tasks["gone"].cancel()  # the turn was just given to it; it has not run yet

    async def one(name: str, pool: str) -> None:
        async with pacer.turn(ProviderCall(pool=pool)):
            order.append(name)

    holder = asyncio.create_task(first())
    await holding.wait()
    for name, pool in (("gone", "b"), ("kept", "c"), ("b2", "b")):
        tasks[name] = asyncio.create_task(one(name, pool))
        await asyncio.sleep(0)
    go.set()
    await holder
    with pytest.raises(asyncio.CancelledError):
        await tasks["gone"]
    await asyncio.gather(tasks["kept"], tasks["b2"])
    assert order == ["b2", "kept"], order
    assert pacer.waiting == 0 and pacer.turns["b"] == 1


async def test_provider_call_keeps_what_it_is_not_told() -> None:
    with provider_call(pool="p", replacement=True):
        with provider_call(pool="q"):
            assert current_call() == ProviderCall(pool="q", replacement=True)
