"""A BrowserPool placement for pure tests: `plan` with the defaults the tests share (every
profile wanted open, no failures, a failure limit of 3), so a case names only what it varies."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from devicepool.workflows.browserpool.plan import NodeProfile, Placement, plan


def place(
    replicas: int,
    profiles: list[NodeProfile],
    alive: Set[str],
    lost: Set[str] = frozenset(),
    *,
    open_wanted: bool = True,
    failures: Mapping[str, int] | None = None,
    **more: Any,
) -> Placement:
    """`plan` for `replicas` over `profiles` on the `alive` nodes; `more`: plan's other
    keywords (`unreachable`, `leased`, `used`, `replacements`, ...)."""
    return plan(
        replicas=replicas,
        profiles=profiles,
        alive=alive,
        lost=set(lost),
        open_wanted=open_wanted,
        failures=failures or {},
        failure_limit=3,
        **more,
    )
