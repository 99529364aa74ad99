"""The GeeLark warm reserve's profile-cap freeing against a second cold review (R21).

A node that had served many pools (deleted ones too) listed every one's reserve before it
chose a phone to delete, one `phone/list` each: past ~34 pools at 0.4 s a call the create's
budget ran out first and the 44002 came back on every attempt, the parked phone kept. Why:
docs/providers.md, "The warm reserve on GeeLark".
"""

from __future__ import annotations

from devicepool.activities.providers.base import provider_call
from devicepool.activities.providers.geelark import GeeLarkProvider
from devicepool.activities.providers.geelark.errors import GeeLarkQuotaError
from devicepool.activities.providers.geelark.marks import slot_mark
from tests.activities.test_geelark_warm_reserve import TEMPLATE, _labels, _new, _phone, _pid
from tests.activities.test_geelark_warm_reserve_review import (
    FILLERS,
    Paths,
    _full_account,
    _provider,
)
from tests.helpers.geelark import team


async def _served(provider: GeeLarkProvider, pools: list[str]) -> None:
    """Each pool's create looked at its reserve (none parked), as a create on this node does."""
    assert provider.reserve is not None
    for pool in pools:
        with provider_call(pool=pool):
            mark = slot_mark(pool, "s")
            assert await provider.reserve.claim(pool, mark, _labels(pool), TEMPLATE, None) is None


async def test_the_profile_cap_after_many_pools_frees_the_parked_phone() -> None:
    # 50 pools served, 45 since deleted, one phone parked (pool `other`), 0.4 s a call.
    async with team(max_profiles=FILLERS + 1, creates_per_day=10 * FILLERS) as t:
        provider, slow, other = await _full_account(t, parked=True)
        assert provider.reserve is not None and other is not None
        pools = [f"p{i:02d}" for i in range(50)]
        await _served(provider, pools)
        for pool in pools[:45]:
            await provider.release_pool(pool)
        paths = Paths(slow.inner)
        slow.inner, slow.calls = paths, 0
        made = None
        for attempt in range(2):
            try:
                made = await provider.create_device(_new(f"k{attempt}"))
                break
            except GeeLarkQuotaError as exc:
                assert exc.code != 44002 or _phone(t, _pid(other)) is None, "parked phone kept"
        assert made is not None and _phone(t, _pid(made.id)) is not None
        assert _phone(t, _pid(other)) is None  # deleted to make room
        assert paths.paths.count("phone/list") <= 4, paths.paths
        assert slow.calls <= 10, paths.paths
        await provider.aclose()


async def test_the_freeing_stops_at_the_first_pool_with_a_parked_phone() -> None:
    async with team(max_profiles=FILLERS + 2, creates_per_day=10 * FILLERS) as t:
        provider, slow, other = await _full_account(t, parked=True)
        assert provider.reserve is not None and other is not None
        second = (await provider.create_device(_new("o2", pool="another"))).id
        await t.advance(120)
        with provider_call(pool="another", reserve_keep=2):
            await provider.remove_device(second)
        await _served(provider, [f"p{i:02d}" for i in range(10)])
        paths = Paths(slow.inner)
        slow.inner = paths
        made = await provider.create_device(_new("k1"))
        assert _phone(t, _pid(made.id)) is not None
        assert [_phone(t, _pid(d)) is None for d in (other, second)].count(True) == 1
        # The slot's mark, the new pool's own reserve, then one pool's and its phone read
        # again: never the ten served with none.
        assert paths.paths.count("phone/list") <= 4, paths.paths
        await provider.aclose()


async def test_the_claim_locks_of_pools_are_not_kept() -> None:
    async with team() as t:
        provider = _provider(t)
        assert provider.reserve is not None
        await _served(provider, [f"p{i:02d}" for i in range(5)])
        for i in range(5):
            await provider.release_pool(f"p{i:02d}")
        assert provider.reserve._locks == {}
        assert provider.reserve.current == {}
        await provider.aclose()
