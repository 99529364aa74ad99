"""Node workers as workflows see them: the registry's messages, the node activities' models.

A node worker serves its Local API's activities on `node_task_queue(NAME)` and
signals the node registry a `NodeBeat` every few seconds; `live_nodes` reads the
registry for a pool. Names and ids only: proxy passwords, the Local API's key and a
profile's secrets never enter these (docs/browserpools.md, "Running a node worker").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ConfigDict, Field

from devicepool.api.base import CamelModel

__all__ = [
    "CLOSING_WAIT_SECONDS",
    "DEFAULT_NODE_HEARTBEAT_SECONDS",
    "NODE_OPEN_BUDGET_SECONDS",
    "OPEN_CALL_SECONDS",
    "LiveNodesInput",
    "LiveNodesResult",
    "NodeBeat",
    "NodeCreateInput",
    "NodeDeleteInput",
    "NodeInfo",
    "NodeListInput",
    "NodeListResult",
    "NodeOpenInput",
    "NodeOpenResult",
    "NodeProxyPoolsView",
    "NodesView",
    "ProfileView",
]

# How often a node worker beats (`--node-heartbeat-seconds`).
DEFAULT_NODE_HEARTBEAT_SECONDS = 10.0
# What a node's `node_open_profile` may take once it holds the node's one open: a
# `/browser/open` with `queue: true` (BrowserProfiles.open_timeout), and for a profile stuck
# opening or closing the wait for its browser to exit (CLOSING_WAIT_SECONDS), a reset and one
# more open, the plain calls at most the Local API client's timeout each. Workflows give an
# open longer than this (tests/browserpool/test_bp_open_budget.py checks it against the
# clients' own defaults).
OPEN_CALL_SECONDS = 180.0
CLOSING_WAIT_SECONDS = 10.0
LOCAL_API_CALL_SECONDS = 30.0
NODE_OPEN_BUDGET_SECONDS = (
    OPEN_CALL_SECONDS + CLOSING_WAIT_SECONDS + 2 * LOCAL_API_CALL_SECONDS + OPEN_CALL_SECONDS
)


class NodeBeat(CamelModel):
    """`node_beat`: a node worker is alive, with its labels (signal-with-start, every interval).

    Unknown fields are ignored, not refused: a newer node worker's beat must
    still reach an older registry (the SDK drops a signal it cannot decode).
    """

    model_config = ConfigDict(extra="ignore")

    node: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    # The BitBrowser account the node's desktop client is logged into, if known.
    account: str = ""
    interval_seconds: float = Field(default=DEFAULT_NODE_HEARTBEAT_SECONDS, gt=0)
    # Whether the desktop client's Local API answered the node's last `/health` (None: the
    # beat does not say), and if not, why (`unauthenticated: ...`, scrubbed of the key).
    api_healthy: bool | None = None
    api_error: str = ""
    # The names of the proxy pools in the node's config (never a host, user or password);
    # None: the beat does not say (an older node worker). `apply` refuses a BrowserPool whose
    # `proxy.poolRef` none of its nodes has (`client._refs_check.RefsCheck`).
    proxy_pools: list[str] | None = None
    # False: no BitBrowser desktop client here (a node worker serving only GeeLark accounts,
    # no `--bitbrowser-url`): no BrowserPool places on it or waits for it. An older beat does
    # not say, and reads as serving browsers, as every node did.
    browsers: bool = True


class NodeInfo(CamelModel):
    """A node as the registry last heard of it."""

    node: str
    labels: dict[str, str] = Field(default_factory=dict)
    account: str = ""
    last_seen: datetime
    interval_seconds: float = DEFAULT_NODE_HEARTBEAT_SECONDS
    # The node's Local API as its last beat said (`NodeBeat.api_healthy`, `api_error`).
    api_healthy: bool | None = None
    api_error: str = ""
    # Whether it serves BrowserPools (`NodeBeat.browsers`; carried state that does not say:
    # True).
    browsers: bool = True


class NodesView(CamelModel):
    """The registry's `nodes` query: every node it remembers, by name."""

    nodes: list[NodeInfo] = Field(default_factory=list)


class NodeProxyPoolsView(CamelModel):
    """The registry's `node_proxy_pools` query: the proxy pool names each remembered node's
    last beat named (a node whose beat does not say is absent).

    Apart from `NodesView` and the carried state on purpose: both forbid unknown fields, and
    a build from before the names (v0.2.0) must still decode them, in a rolling upgrade or
    after a rollback."""

    proxy_pools: dict[str, list[str]] = Field(default_factory=dict)


class LiveNodesInput(CamelModel):
    """`live_nodes`: the nodes whose labels match `selector` ({} matches every node)."""

    selector: dict[str, str] = Field(default_factory=dict)
    lost_after_seconds: float = Field(default=120.0, gt=0)


class LiveNodesResult(CamelModel):
    """Matching nodes, split by whether they beat within `lost_after_seconds` (by name)."""

    alive: list[NodeInfo] = Field(default_factory=list)
    lost: list[NodeInfo] = Field(default_factory=list)


# ------------------------------------------------------------ node activities


class ProfileView(CamelModel):
    """One browser profile of a pool, as a node sees it (no proxy, no secret)."""

    id: str
    slot: str
    # The node recorded in the profile's remark when it was created (its placement).
    node: str
    # Its browser runs at the answering node's Local API (False for one placed elsewhere).
    open: bool = False


class NodeListInput(CamelModel):
    pool: str = Field(min_length=1)


class NodeListResult(CamelModel):
    profiles: list[ProfileView] = Field(default_factory=list)


class NodeCreateInput(CamelModel):
    """One profile of `pool` for `slot`, placed on the node that runs the activity."""

    pool: str = Field(min_length=1)
    slot: str = Field(min_length=1)
    # Passed as `browserFingerPrint` ({} = random).
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    # A proxy pool of the node worker's config; None: no proxy.
    proxy_pool: str | None = None
    session_ttl_seconds: int = Field(default=0, ge=0)
    group_id: str | None = None


class NodeOpenInput(CamelModel):
    id: str = Field(min_length=1)


class NodeOpenResult(CamelModel):
    open: bool
    reason: str = ""
    # Not open for the node's sake, not the profile's (its desktop client was busy, went
    # away or ran out of time): the open does not count toward the profile's failures.
    node_trouble: bool = False


class NodeDeleteInput(CamelModel):
    id: str = Field(min_length=1)
