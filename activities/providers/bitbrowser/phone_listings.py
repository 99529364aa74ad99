"""devicepool's profiles as listings find them, and one listing of a pool for many callers.

A pool's listing whose first call is not sent yet is joined by every caller that
needs the pool's profiles; one begun before a reserve claim never serves another
claim. A listing keeps what later calls need of what it saw: each phone's `seq`, its
pool, the pool's size and reserve ids. Why: docs/providers.md, "The cloud-phone adapter".
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from devicepool.activities.providers.base import current_call
from devicepool.activities.providers.bitbrowser.models import Phone
from devicepool.activities.providers.bitbrowser.phone_marks import (
    MARK_PREFIX,
    RESERVE,
    Remark,
    pool_prefix,
)
from devicepool.activities.providers.bitbrowser.phones import CloudPhones

__all__ = ["Listing", "PoolListings"]


@dataclass
class Listing:
    """One listing of a pool's profiles that callers join until its first call is sent.

    `parks` and `claims` are the pool's counters when it was begun: a listing begun
    before a claim (or a park) may show that profile as it was.
    """

    parks: int
    claims: int
    # A reserve claim of the pool was under way when it was begun.
    claiming: bool = False
    sent: bool = False
    found: list[tuple[Phone, Remark]] = field(default_factory=list)
    done: asyncio.Future[None] | None = None


class PoolListings:
    """The pools' listings of one adapter, and what they saw (module docstring)."""

    def __init__(
        self, phones: CloudPhones, *, wall_clock: Callable[[], float], clock: Callable[[], float]
    ) -> None:
        self.phones = phones
        self._wall = wall_clock
        self._clock = clock
        self.seqs: dict[str, int] = {}  # phone id -> seq: one listing call finds it again
        # phone id -> (its remark's start, far ahead; when first seen): see `_first_seen`.
        self._seen_ahead: dict[str, tuple[int, float]] = {}
        # phone id -> the pool whose listing last showed it: a call naming no pool (a
        # scale-down's idle check and removal) still joins that pool's listing and turn.
        self.pools: dict[str, str] = {}
        # pool -> (when, the ids of its reserve profiles): what a removal under
        # `spec.reserve.keep` counts. From a listing no claim or park was under way
        # during, kept right by this process's claims and parks since: a scale-down's
        # N removals count on the listing their idle checks shared, not N listings.
        self.reserve_ids: dict[str, tuple[float, set[str]]] = {}
        self.parks: Counter[str] = Counter()
        self.claimed: Counter[str] = Counter()  # reserve claims made, by pool
        # pool -> one reserve claim of the pool at a time (this process)
        self.claim_locks: dict[str, asyncio.Lock] = {}
        # (pool, replacement) -> its listing not sent yet, which later callers join
        self._listings: dict[tuple[str, bool], Listing] = {}
        # pool -> how many profiles its last listing found (a large pool's creates look
        # their mark up alone: one call, not a listing of several pages)
        self.sizes: dict[str, int] = {}

    async def pool_phones(self, pool: str) -> list[tuple[Phone, Remark]]:
        return list((await self.pool_listing(pool)).found)

    async def pool_listing(self, pool: str) -> Listing:
        """A listing of `pool`'s profiles begun no sooner than this call: the one whose
        first call is not sent yet, joined, else a new one. A replacement's joins only
        another replacement's."""
        key = (pool, current_call().replacement)
        listing = self._listings.get(key)
        if listing is None or listing.sent:
            listing = Listing(
                parks=self.parks[pool],
                claims=self.claimed[pool],
                claiming=self.claiming(pool),
            )
            listing.done = asyncio.ensure_future(self._list_pool(key, listing))
            listing.done.add_done_callback(_retrieved)
            self._listings[key] = listing
        assert listing.done is not None
        # Shielded: a caller cancelled while waiting cancels no one else's listing.
        await asyncio.shield(listing.done)
        return listing

    async def _list_pool(self, key: tuple[str, bool], listing: Listing) -> None:
        def sent() -> None:
            listing.sent = True

        pool = key[0]
        try:
            found = await self.marked(pool_prefix(pool), on_turn=sent)
        finally:
            listing.sent = True  # joined no more, answered or not
            if self._listings.get(key) is listing:
                del self._listings[key]
        listing.found = [(p, r) for p, r in found if r.pool == pool]
        self.sizes[pool] = len(found)
        self.pools.update({p.id: pool for p, _ in listing.found})
        quiet = not (listing.claiming or self.claiming(pool))
        if quiet and (listing.parks, listing.claims) == (self.parks[pool], self.claimed[pool]):
            reserve = {p.id for p, r in listing.found if r.state == RESERVE}
            self.reserve_ids[pool] = (self._clock(), reserve)

    def claiming(self, pool: str) -> bool:
        """A reserve claim of the pool is under way here (its lock is held)."""
        lock = self.claim_locks.get(pool)
        return lock is not None and lock.locked()

    async def marked(
        self, prefix: str, *, on_turn: Callable[[], None] | None = None
    ) -> list[tuple[Phone, Remark]]:
        """devicepool's profiles whose name starts with `prefix`, with their remarks."""
        listed = await self.phones.list_all(mark_prefix=prefix, on_turn=on_turn)
        found = [(p, r) for p in listed if (r := self.remark_of(p)) is not None]
        self.seqs.update({p.id: p.seq for p, _ in found if p.seq is not None})
        return found

    def remark_of(self, phone: Phone) -> Remark | None:
        """The phone's remark as devicepool wrote it; None (counted) for a profile named
        like ours whose remark is not: foreign, skipped, never managed."""
        wall = self._wall()
        remark = Remark.parse(
            phone.remark, now=wall, first_seen=lambda at: self._first_seen(phone.id, at, wall)
        )
        seen = self._seen_ahead.get(phone.id)
        if remark is not None and seen is not None and remark.started == seen[0]:
            # This clock has caught up with it: the start it aged from so far stays.
            remark = replace(remark, started=seen[1])
        if remark is None and phone.name.startswith(MARK_PREFIX):
            metrics = self.phones.api.metrics
            if metrics is not None:
                metrics.foreign_mark("phone")
        return remark

    def _first_seen(self, phone_id: str, written: int, wall: float) -> float:
        """When this process first saw the phone's remark start at `written`, far ahead
        of its clock: the start it ages from (kept per process; a claim's new remark
        starts afresh, and a park writes this start back)."""
        seen = self._seen_ahead.get(phone_id)
        if seen is None or seen[0] != written:
            seen = self._seen_ahead[phone_id] = (written, wall)
        return seen[1]


def _retrieved(done: asyncio.Future[None]) -> None:
    """A shared listing's failure reaches its callers; nobody left to hear it is no error."""
    if not done.cancelled():
        done.exception()
