"""The provider seam for browser profiles: what a BrowserPool's node activities reach.

`ProfileProvider` is one node's view of one account's profiles, as `base.Provider` is
one account's devices (docs/providers.md, "The provider seam"). Adapters answer in the
node activities' views and fail only with `ProviderError`; what they return holds no
secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from devicepool.activities.connect_models import ConnectInfo
from devicepool.activities.node_models import NodeOpenResult, ProfileView
from devicepool.activities.proxy import ResolvedProxy

__all__ = ["NewProfile", "ProfileProvider", "UnfitProfile"]


class UnfitProfile(ValueError):
    """A pool, slot or node the provider cannot mark a profile with (no create is tried)."""


@dataclass(frozen=True)
class NewProfile:
    """One profile as a pool asks for it. Worker-side only: the proxy holds its password."""

    pool: str
    slot: str
    # The node it is placed on (its mark names it: the placement the listings show).
    node: str
    # The browser fingerprint ({}: a random one).
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    group_id: str | None = None
    proxy: ResolvedProxy | None = field(default=None, repr=False)


class ProfileProvider(Protocol):
    """One node's Local API over its account's profiles. Every method raises `ProviderError`."""

    async def list_pool(self, pool: str) -> list[ProfileView]:
        """The pool's profiles, account-wide, each with its placement and whether its
        browser is open at this node (sorted by slot, node, id)."""
        ...

    async def create_profile(self, new: NewProfile) -> ProfileView:
        """The slot's profile: the one its mark finds (an earlier attempt's, the oldest
        when two hold it), else one created on this node. `UnfitProfile` for a pool, slot
        or node it cannot mark (refused for good); any other error is not the pool's."""
        ...

    async def open_profile(self, profile_id: str) -> NodeOpenResult:
        """Open its browser here. A refusal of the profile is answered `open: false`; one
        of the node or its account (busy, away, out of time or balance) with
        `node_trouble`; a refused key or budget is raised."""
        ...

    async def connect_profile(self, profile_id: str) -> ConnectInfo:
        """Its browser's CDP endpoint (`ws`, `http`) here, the browser opened if it is not.
        Secret-bearing: never logged, never in an error."""
        ...

    async def close_profile(self, profile_id: str) -> None:
        """Close its browser here and wait until it is gone."""
        ...

    async def remove_profile(self, profile_id: str) -> None:
        """Close, confirm closed, delete; a profile already gone is success."""
        ...

    async def health(self) -> None:
        """Raise `ProviderError` unless the node's API answers with its key."""
        ...

    async def aclose(self) -> None: ...
