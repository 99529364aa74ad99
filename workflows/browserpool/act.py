"""A BrowserPool pass's act (`BrowserKind.act`): its deletes, its creates (held while a node's
configuration refused the last one: `CONFIG_RETRY`), and one profile's open.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.node_models import NodeOpenResult
    from devicepool.api.errors import ErrorType
    from devicepool.workflows.browserpool import calls
    from devicepool.workflows.browserpool.observe import Observed
    from devicepool.workflows.browserpool.plan import Placement
    from devicepool.workflows.browserpool.status import ConfigProblem
    from devicepool.workflows.shared.errors import raise_if_cancelled

if TYPE_CHECKING:
    from devicepool.workflows.browserpool.kind import BrowserKind

__all__ = ["CONFIGURATION_ERRORS", "CONFIG_RETRY", "create", "delete", "open_profile"]

# A create a node refuses for its configuration (a proxy pool it does not have): the pool
# says so (Ready=False with the reason) and tries one create this often, not every pass.
CONFIG_RETRY = timedelta(seconds=60)
# Errors of a node's configuration, not of the moment: their condition reason.
CONFIGURATION_ERRORS = {ErrorType.UNKNOWN_PROXY_POOL.value: "UnknownProxyPool"}


async def delete(k: BrowserKind, placement: Placement) -> bool:
    done = False
    for pid, node in placement.delete:
        try:
            await calls.delete_on(node, pid)
            k.h.s.failures.pop(pid, None)
            done = True
            k.said("Deleted", f"profile {pid} on {node}: {placement.why[pid]}")
        except ActivityError as err:
            k.warn("DeleteFailed", f"profile {pid} on {node}: {calls.cause(err)}")
        raise_if_cancelled()  # a delete the awaited call absorbed: teardown, now
    return done


async def create(k: BrowserKind, placement: Placement, seen: Observed) -> bool:
    s, done = k.h.s, False
    # A slot held on a lost node: what is made for it is a replacement (the original
    # wins if its node comes back).
    replacing = {p.slot for p in placement.lost}
    for slot, node in _creates(k, placement):
        if s.generation != seen.generation:
            # The spec changed under the pass (another proxy pool, fingerprint, group):
            # nothing is made of the old one; the next pass, soon, plans from the new.
            break
        try:
            made = await calls.create_on(node, k.h.name, seen.spec, slot)
            s.nodes.setdefault(node, "")  # named by the next listing
            if slot in replacing and made.id not in s.replacements:
                s.replacements.append(made.id)  # oldest first (plan.py)
            k.config_problem = None
            done = True
            k.said("Created", f"slot {slot} on {node}: {made.id}")
        except ActivityError as err:
            k.warn("CreateFailed", f"slot {slot} on {node}: {calls.cause(err)}")
            reason = CONFIGURATION_ERRORS.get(calls.error_type(err) or "")
            if reason is not None:
                message = f"node {node}: {calls.cause(err)}"
                retry = CONFIG_RETRY.total_seconds()
                k.config_problem = ConfigProblem(reason, message, retry)
                k.config_retry_at = workflow.now() + CONFIG_RETRY
                break  # the next creates would meet the same refusal (act checks)
        # Not in a `finally`: a run thrown away mid-create is closed outside its loop.
        raise_if_cancelled()  # a delete the awaited call absorbed: teardown, now
    return done


def _creates(k: BrowserKind, placement: Placement) -> list[tuple[int, str]]:
    """This pass's creates: none while a node's configuration refused the last one
    (`CONFIG_RETRY`), then one (did someone fix it?)."""
    if k.config_problem is None:
        return placement.create
    if k.config_retry_at is not None and workflow.now() < k.config_retry_at:
        return []
    return placement.create[:1]


async def open_profile(k: BrowserKind, pid: str, node: str) -> bool:
    opened = await calls.open_on(node, pid)
    if not isinstance(opened, NodeOpenResult) and workflow.cancellation_reason() is not None:
        return False  # cut by a delete: not the profile's failure, nor worth a warning
    ok, why, counted = calls.open_outcome(opened)
    if ok:
        k.h.s.failures.pop(pid, None)
        return True
    if counted:
        k.h.s.failures[pid] = k.h.s.failures.get(pid, 0) + 1
    k.warn("OpenFailed", f"profile {pid} on {node}: {why}")
    return False
