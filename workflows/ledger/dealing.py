"""Who gets the free permits of a round: the ledger's dealing, pure (no Temporal, no clock).

`workflows/ledger/workflow.py` books the deal and signals it. Why: docs/scaling.md,
"Rate limits" (fairness, announcements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from devicepool.workflows.shared.protocol import PermitRequest

__all__ = ["Deal", "deal", "due_announcements"]


@dataclass(frozen=True)
class Deal:
    # request id -> permits dealt to it, in the order requests were first served
    counts: dict[str, int]
    # the pool served last (where the next round starts after)
    last_pool: str | None


def deal(queue: Sequence[PermitRequest], free: int, last_pool: str | None) -> Deal:
    """Split `free` permits over `queue`: replacements first, round-robin over pools, FIFO per pool."""
    counts: dict[str, int] = {}
    remaining = {r.request_id: r.count for r in queue}
    for replacement in (True, False):
        if free <= 0:
            break
        by_pool: dict[str, list[PermitRequest]] = {}
        for r in queue:
            if r.replacement == replacement:
                by_pool.setdefault(r.pool, []).append(r)
        pools = _rotated(list(by_pool), last_pool)
        while free > 0 and pools:
            for pool in list(pools):
                if free <= 0:
                    break
                waiting = [r for r in by_pool[pool] if remaining[r.request_id] > 0]
                if not waiting:
                    pools.remove(pool)
                    continue
                first = waiting[0]
                remaining[first.request_id] -= 1
                counts[first.request_id] = counts.get(first.request_id, 0) + 1
                last_pool = pool
                free -= 1
    return Deal(counts=counts, last_pool=last_pool)


def _rotated(pools: list[str], last_pool: str | None) -> list[str]:
    """Start after the pool served last, so remainders rotate between rounds."""
    if last_pool in pools:
        i = pools.index(last_pool) + 1
        return pools[i:] + pools[:i]
    return pools


def due_announcements(intents: Mapping[str, datetime], now: datetime) -> dict[str, datetime]:
    """The announced requests still awaited at `now` (pool -> until when); expired ones drop."""
    return {pool: until for pool, until in intents.items() if until > now}
