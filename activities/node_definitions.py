"""What a workflow may know of the node activities: names, inputs and results, no I/O.

`live_nodes` runs on the main task queue (`node_registry`); `NodeActivityDefinitions`
only on a node worker's own: schedule them with `task_queue=node_task_queue(node)`.
"""

from __future__ import annotations

import abc

from temporalio import activity

from devicepool.activities import connect_models as cm
from devicepool.activities import node_models as nm

__all__ = ["NodeActivityDefinitions", "NodeRegistryActivityDefinitions"]


class NodeRegistryActivityDefinitions(abc.ABC):
    """The registry's reader as workflows call it (implemented by `NodeRegistryActivities`)."""

    @activity.defn
    @abc.abstractmethod
    async def live_nodes(self, input: nm.LiveNodesInput) -> nm.LiveNodesResult:
        """The registry's nodes matching `selector`, alive or lost (empty if it never started)."""


class NodeActivityDefinitions(abc.ABC):
    """A node worker's Local API activities (implemented by `NodeBrowserActivities`)."""

    @activity.defn
    @abc.abstractmethod
    async def node_list_profiles(self, input: nm.NodeListInput) -> nm.NodeListResult:
        """Every profile of the pool, account-wide; `open` as this node's Local API sees it."""

    @activity.defn
    @abc.abstractmethod
    async def node_create_profile(self, input: nm.NodeCreateInput) -> nm.ProfileView:
        """The pool's profile for the slot: found by its mark, else created on this node."""

    @activity.defn
    @abc.abstractmethod
    async def node_open_profile(self, input: nm.NodeOpenInput) -> nm.NodeOpenResult:
        """Open the profile's browser on this node (one open in flight per node)."""

    @activity.defn
    @abc.abstractmethod
    async def node_delete_profile(self, input: nm.NodeDeleteInput) -> None:
        """Close, confirm closed, delete; a profile already gone is success."""

    @activity.defn
    @abc.abstractmethod
    async def node_lease_connect(self, input: cm.NodeConnectInput) -> cm.ConnectInfo:
        """A leased profile's CDP endpoint, its browser opened if it is not; secret-bearing."""
