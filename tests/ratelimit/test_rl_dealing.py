"""The ledger's dealing (workflows/ledger/dealing.py): examples first, then hypothesis properties.

Pure: no fixture of conftest.py is requested, so no server starts. The
properties state the rules of the module docstring (replacements first,
round-robin between pools, FIFO within a pool, nothing over- or under-dealt)
on the deal's outcome, not on its internals.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.workflows.ledger.dealing import Deal, deal, due_announcements
from devicepool.workflows.shared.protocol import PermitRequest
from tests.helpers.ratelimit_stack import permit_request as req

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


# ---------------------------------------------------------------- examples


def test_one_request_gets_what_is_free() -> None:
    dealt = deal([req("a1", "a", 30)], 20, None)
    assert dealt.counts == {"a1": 20}
    assert dealt.last_pool == "a"


def test_never_more_than_asked() -> None:
    assert deal([req("a1", "a", 3)], 20, None).counts == {"a1": 3}


def test_nothing_free_deals_nothing_and_keeps_the_rotation() -> None:
    dealt = deal([req("a1", "a", 3)], 0, "b")
    assert dealt.counts == {}
    assert dealt.last_pool == "b"


def test_empty_queue() -> None:
    assert deal([], 5, None).counts == {}


def test_two_pools_share_a_window_evenly() -> None:
    dealt = deal([req("a1", "a", 20), req("b1", "b", 20)], 20, None)
    assert dealt.counts == {"a1": 10, "b1": 10}


def test_a_small_request_leaves_the_rest_to_the_big_one() -> None:
    dealt = deal([req("a1", "a", 2), req("b1", "b", 20)], 20, None)
    assert dealt.counts == {"a1": 2, "b1": 18}


def test_replacements_are_served_before_growth() -> None:
    queue = [req("g1", "grow", 10), req("r1", "fix", 4, replacement=True)]
    dealt = deal(queue, 5, None)
    assert dealt.counts == {"r1": 4, "g1": 1}
    # The replacement was served first, whatever the queue order.
    assert next(iter(dealt.counts)) == "r1"


def test_replacements_alone_when_they_take_the_whole_window() -> None:
    queue = [req("g1", "grow", 10), req("r1", "fix", 8, replacement=True)]
    assert deal(queue, 5, None).counts == {"r1": 5}


def test_fifo_within_one_pool() -> None:
    queue = [req("a1", "a", 3), req("a2", "a", 3)]
    assert deal(queue, 4, None).counts == {"a1": 3, "a2": 1}


def test_the_round_starts_after_the_pool_served_last() -> None:
    queue = [req("a1", "a", 5), req("b1", "b", 5), req("c1", "c", 5)]
    assert deal(queue, 1, None).counts == {"a1": 1}
    assert deal(queue, 1, "a").counts == {"b1": 1}
    assert deal(queue, 1, "c").counts == {"a1": 1}
    # An odd remainder goes round the pools across rounds.
    dealt = deal(queue, 4, "a")
    assert dealt.counts == {"b1": 2, "c1": 1, "a1": 1}
    assert dealt.last_pool == "b"


def test_a_last_pool_no_longer_asking_is_ignored() -> None:
    assert deal([req("a1", "a", 5), req("b1", "b", 5)], 1, "gone").counts == {"a1": 1}


def test_the_queue_is_not_changed() -> None:
    queue = [req("a1", "a", 5), req("b1", "b", 5, replacement=True)]
    before = [r.model_copy() for r in queue]
    deal(queue, 7, None)
    assert queue == before


def test_due_announcements_drop_expired_ones() -> None:
    intents = {"a": NOW + timedelta(seconds=3), "b": NOW, "c": NOW - timedelta(seconds=1)}
    assert due_announcements(intents, NOW) == {"a": NOW + timedelta(seconds=3)}
    assert due_announcements({}, NOW) == {}
    assert intents["b"] == NOW  # the input is left alone


# ---------------------------------------------------------------- properties


@st.composite
def queues(draw: st.DrawFn, smallest: int = 1) -> list[PermitRequest]:
    pools = draw(st.lists(st.sampled_from("abcde"), min_size=0, max_size=8))
    return [
        req(
            f"r{i}",
            pool,
            draw(st.integers(min_value=smallest, max_value=smallest + 11)),
            replacement=draw(st.booleans()),
        )
        for i, pool in enumerate(pools)
    ]


FREE = st.integers(min_value=0, max_value=60)
LAST = st.one_of(st.none(), st.sampled_from("abcdez"))


# One draw checks every rule: drawing a queue costs far more than dealing it, and five
# properties drawing their own 300 queues each took 2.8 of the module's 3.5 CPU-s.
@settings(max_examples=300, deadline=None)
@given(queue=queues(), free=FREE, last_pool=LAST)
def test_every_deal_keeps_the_rules(
    queue: list[PermitRequest], free: int, last_pool: str | None
) -> None:
    dealt = deal(queue, free, last_pool)
    deals_exactly_what_is_free_or_asked(queue, free, dealt.counts)
    growth_only_once_every_replacement_is_served(queue, dealt.counts)
    fifo_within_a_pool_and_class(queue, dealt.counts)
    no_pool_gets_two_more_than_one_left_waiting(queue, dealt.counts)
    last_pool_is_the_pool_served_last(queue, last_pool, dealt)


def deals_exactly_what_is_free_or_asked(
    queue: list[PermitRequest], free: int, counts: dict[str, int]
) -> None:
    asked = {r.request_id: r.count for r in queue}
    assert sum(counts.values()) == min(free, sum(asked.values()))
    assert all(0 < n <= asked[rid] for rid, n in counts.items())


def growth_only_once_every_replacement_is_served(
    queue: list[PermitRequest], counts: dict[str, int]
) -> None:
    if any(counts.get(r.request_id) for r in queue if not r.replacement):
        assert all(counts.get(r.request_id) == r.count for r in queue if r.replacement)
    # ...and the grants of replacements come first in the deal's order.
    kinds = [next(r.replacement for r in queue if r.request_id == rid) for rid in counts]
    assert kinds == sorted(kinds, reverse=True)


def fifo_within_a_pool_and_class(queue: list[PermitRequest], counts: dict[str, int]) -> None:
    for pool in {r.pool for r in queue}:
        for replacement in (True, False):
            mine = [r for r in queue if r.pool == pool and r.replacement == replacement]
            for earlier, later in pairwise(mine):
                if counts.get(later.request_id):
                    assert counts.get(earlier.request_id) == earlier.count


def no_pool_gets_two_more_than_one_left_waiting(
    queue: list[PermitRequest], counts: dict[str, int]
) -> None:
    for replacement in (True, False):
        got: dict[str, int] = {}
        asked: dict[str, int] = {}
        for r in queue:
            if r.replacement == replacement:
                got[r.pool] = got.get(r.pool, 0) + counts.get(r.request_id, 0)
                asked[r.pool] = asked.get(r.pool, 0) + r.count
        for waiting in (p for p in got if got[p] < asked[p]):
            assert all(got[other] <= got[waiting] + 1 for other in got)


def last_pool_is_the_pool_served_last(
    queue: list[PermitRequest], last_pool: str | None, dealt: Deal
) -> None:
    if not dealt.counts:
        assert dealt.last_pool == last_pool
    else:
        assert dealt.last_pool in {r.pool for r in queue if r.request_id in dealt.counts}


@settings(max_examples=200, deadline=None)
@given(queue=queues(smallest=5), last_pool=LAST)
def test_one_permit_at_a_time_goes_round_the_pools(
    queue: list[PermitRequest], last_pool: str | None
) -> None:
    # Dealing one permit per round (booking each, as the ledger does) serves
    # every asking pool once before any pool a second time, within each class.
    # (Every request asks for at least as many permits as there are pools, so
    # none drops out of the rotation during the first turn.)
    queue = [r.model_copy() for r in queue]
    served: list[tuple[bool, str]] = []
    while queue:
        dealt = deal(queue, 1, last_pool)
        ((rid, n),) = dealt.counts.items()
        request = next(r for r in queue if r.request_id == rid)
        request.count -= n
        served.append((request.replacement, request.pool))
        queue = [r for r in queue if r.count > 0]
        last_pool = dealt.last_pool
    for replacement in (True, False):
        order = [pool for kind, pool in served if kind == replacement]
        pools = set(order)
        # The first len(pools) permits of the class go to distinct pools.
        assert len(set(order[: len(pools)])) == len(pools)
