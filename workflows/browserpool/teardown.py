"""A BrowserPool's teardown (`BrowserKind.tear_down`): delete every profile through the
nodes of its BitBrowser account (`accounts.py`), holding the pool in Deleting with
`TeardownBlocked` while a node that holds some is down."""

from __future__ import annotations

import asyncio
import functools
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.api.browserpool.v1beta1 import BrowserConditionType
    from devicepool.api.labels import selector_matches
    from devicepool.api.v1alpha1 import ConditionStatus
    from devicepool.workflows.browserpool import calls
    from devicepool.workflows.browserpool.accounts import teardown_nodes, teardown_step
    from devicepool.workflows.browserpool.observe import merge_listings
    from devicepool.workflows.browserpool.status import teardown_status
    from devicepool.workflows.reconciler.conditions import ConditionUpdate
    from devicepool.workflows.reconciler.events import Happened
    from devicepool.workflows.reconciler.kind import TeardownBlocked
    from devicepool.workflows.reconciler.teardown import until_torn_down

if TYPE_CHECKING:
    from devicepool.workflows.browserpool.kind import BrowserHost


async def tear_down(h: BrowserHost) -> None:
    """Delete every profile of the pool on its node; hold while one cannot be reached
    (when it may end: `accounts.py`). Hands over while it waits long."""
    _show_teardown(h, done=False)
    pause = timedelta(seconds=min(h.settings.resync_seconds, 10))
    await until_torn_down(
        functools.partial(_teardown_step, h),
        blocked=functools.partial(_blocked, h),
        hand_over=h.hand_over_if_due,
        first=pause,
        most=pause,
        summary="delete the profiles again",
    )
    _show_teardown(h, done=True)


async def _teardown_step(h: BrowserHost) -> bool | TeardownBlocked:
    s = h.s
    lost_after = h.settings.node_lost_after_seconds
    nodes = await calls.live_nodes({}, lost_after_seconds=lost_after)
    live = {n.node: n.account for n in nodes.alive}
    selector = h.spec.node_selector
    selected = {n.node for n in nodes.alive if selector_matches(selector, n.labels)}
    # Only the nodes of the pool's account may say "none left" (accounts.py).
    listed = teardown_nodes(s.nodes, live=live, selected=selected, groups=s.groups)
    profiles, failed, _ = merge_listings(await calls.list_on(sorted(listed), h.name))
    step = teardown_step(
        s.nodes,
        live=live,
        listed=listed,
        failed={n: cause for n, (_, cause) in failed.items()},
        profiles=profiles,
        groups=s.groups,
    )

    async def delete(pid: str, node: str) -> bool:
        try:
            await calls.delete_on(node, pid)
            return True
        except ActivityError as err:
            why = f"profile {pid} on {node}: {calls.cause(err)}"
            h.happened(Happened("DeleteFailed", why, warning=True))
            return False

    # All at once: each node closes its own browsers side by side.
    deleted = await asyncio.gather(*(delete(pid, node) for pid, node in step.delete))
    if not step.reason and all(deleted):
        return True
    if step.reason:
        return TeardownBlocked(step.reason, step.message)
    return TeardownBlocked("DeleteFailed", "a profile could not be deleted; trying again")


def _blocked(h: BrowserHost, block: TeardownBlocked) -> None:
    h.set_condition(
        ConditionUpdate(
            BrowserConditionType.TEARDOWN_BLOCKED,
            ConditionStatus.TRUE,
            block.reason,
            block.message,
        )
    )
    h.show()


def _show_teardown(h: BrowserHost, *, done: bool) -> None:
    h.s.status = teardown_status(
        h.s.status, done=done, now=workflow.now(), generation=h.s.generation
    )
    h.show()
