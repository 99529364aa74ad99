"""Where an account's provider calls run: the pool's own workers, or the account's node worker.

`route(account, settings)` is the one place that turns an account into its `Route`. An
account without a node keeps its calls as v0.1.0 made them (no task queue, no new
timeout), so recorded histories replay unchanged. Why: docs/scaling.md, 'Adding workers'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

from devicepool.activities.settings import PoolSettings
from devicepool.api.errors import ErrorType
from devicepool.api.names import (
    account_task_queue,
    node_phone_task_queue,
    node_watch_task_queue,
    watch_task_queue,
)
from devicepool.workflows.shared.errors import error_type

__all__ = [
    "NODE_SCHEDULE_TO_START",
    "REREAD_NODES_PATCH",
    "Route",
    "misplaced",
    "provider_queue",
    "route",
]

# How long a call waits for its node worker to pick it up. Calls wait for the
# node's pacer inside their activity, not in the queue, so a live node starts a
# call within a poll; a minute is a node that is down (or out of slots).
NODE_SCHEDULE_TO_START = timedelta(minutes=1)

# Runs from this build on read where an account's calls go again after `misplaced`.
# Serves v0.1.0: its runs saw `unknown_account` answers too and read nothing again
# (the corpus's PoolHealth histories take the old branch).
REREAD_NODES_PATCH = "reread-account-nodes"


@dataclass(frozen=True)
class Route:
    """Where one account's calls go, as `execute_activity` options ("" node: the caller's
    own workers, and the account's create queue)."""

    account: str
    node: str = ""

    def provider(self) -> dict[str, Any]:
        """For a short provider call."""
        return provider_queue(self.node)

    def create(self) -> dict[str, Any]:
        """For a create: the node's queue, else the account's own."""
        return self.provider() or {"task_queue": account_task_queue(self.account)}

    def watch(self, own_queue: str) -> dict[str, Any]:
        """For a watch: the node's watch queue, else `own_queue`'s."""
        if not self.node:
            return {"task_queue": watch_task_queue(own_queue)}
        return {
            "task_queue": node_watch_task_queue(self.node),
            "schedule_to_start_timeout": NODE_SCHEDULE_TO_START,
        }

    def problem(self, err: BaseException) -> str | None:
        """`NodeUnavailable: ...` when `err` is a call that no worker of the node picked up."""
        cause = err.cause if isinstance(err, ActivityError) else err
        if not self.node or not isinstance(cause, TimeoutError):
            return None
        if cause.type != TimeoutType.SCHEDULE_TO_START:
            return None
        waited = NODE_SCHEDULE_TO_START.total_seconds()
        return (
            f"NodeUnavailable: node worker {self.node!r} took no call in {waited:g}s "
            f"(is `devicepool worker --node {self.node}` running?)"
        )


def route(account: str, settings: PoolSettings) -> Route:
    """Where `account`'s calls go, by the worker's settings (`account_nodes`)."""
    return Route(account, settings.node_of(account))


def provider_queue(node: str) -> dict[str, Any]:
    """`execute_activity` options for a short provider call of an account served by `node`."""
    if not node:
        return {}
    return {
        "task_queue": node_phone_task_queue(node),
        "schedule_to_start_timeout": NODE_SCHEDULE_TO_START,
    }


def misplaced(err: ActivityError) -> bool:
    """Whether the call reached a worker that does not serve its account (`unknown_account`):
    the account moved to a node, or off one, since the settings were read."""
    return error_type(err) == ErrorType.UNKNOWN_ACCOUNT
