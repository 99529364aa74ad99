"""A DevicePool pass's look at the provider: the worker's settings, the references, the
listing and, when a back-off ends, the region. Run on the pass's `DevicePoolKind`
(`kind.py`), whose `observe` gathers them into one `Observed`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.workflows.pool import calls
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.shared.errors import error_message, problem
    from devicepool.workflows.shared.placement import REREAD_NODES_PATCH, misplaced

if TYPE_CHECKING:
    from devicepool.workflows.pool.kind import DevicePoolKind

__all__ = ["SETTINGS_FIRST_PATCH", "look", "probe_region"]

# Since the provider calls of an account served by a node worker go to that node:
# a run reads the worker's settings before its first provider call. Serves v0.1.0:
# its runs read them beside the listing (tests/replay/histories/v0.1.0).
SETTINGS_FIRST_PATCH = "settings-before-provider-calls"


async def look(k: DevicePoolKind) -> None:
    """One round trip for everything the pass must know, not one each."""
    looks = []
    if k.worker_settings is None:
        # The settings say which node worker serves the account (`account_nodes`),
        # so the provider calls wait for them; runs from before read all at once.
        if workflow.patched(SETTINGS_FIRST_PATCH):
            await k.read_settings()
        else:
            looks.append(k.read_settings())
    if k.refs_problems is None:
        looks.append(_check_refs(k))
    if k.need_observe:
        looks.append(_list(k))
    await asyncio.gather(*looks)


async def _check_refs(k: DevicePoolKind) -> None:
    proxy = k.spec.proxy
    try:
        k.refs_problems = await calls.check_refs(
            k.route, proxy.pool_ref if proxy else None, k.spec.region, k.spec.platform.value
        )
    except ActivityError as err:
        # Only a node worker that takes no call gets here (a node's calls are the
        # only ones bounded): not checked, so no create, checked again next pass.
        k.refs_problems, k.refs_unchecked = None, True
        workflow.logger.warning("pool %s: references not checked: %s", k.name, err)
        return
    k.refs_unchecked = False
    if k.refs_problems:  # said each time it is checked again (repeats are counted)
        reason, message = st.refs_problem(k.refs_problems)
        k.h.happened(say.Happened(reason, message, warning=True))


async def _list(k: DevicePoolKind) -> None:
    number = k.observations.begin()
    try:
        devices = await calls.list_devices(k.route, k.name)
    except ActivityError as err:
        # Keep the last observation; never create or terminate on a guess.
        workflow.logger.warning("pool %s: cannot list devices: %s", k.name, err)
        said = k.route.problem(err) or problem(err)
        if k.observe_problem != said:
            k.h.happened(say.Happened("ListFailed", said, warning=True))
        k.observe_problem = said
        if misplaced(err) and not k.settings_pinned and workflow.patched(REREAD_NODES_PATCH):
            k.worker_settings = None  # the next pass reads where the account's calls go now
        return
    if k.observe_problem is not None:
        k.h.happened(say.Happened("Listed", "the pool's devices are listed again"))
    k.observe_problem = None
    if k.observations.accept(number):
        k.take_listing(devices)


async def probe_region(k: DevicePoolKind) -> None:
    """When a back-off ends, ask the provider about the region before creating again."""
    backoff, now = k.s.backoff, workflow.now()
    if not backoff.probe_due(now):
        return
    try:
        answer = await calls.region_status(k.route, k.spec.region)
        failed = False
    except ActivityError as err:
        answer, failed = error_message(err), True
    region, settings = k.spec.region, k.settings
    if backoff.probed(answer, failed=failed, region=region, settings=settings, now=now):
        k.h.happened(say.backed_off(backoff))
    else:
        k.h.happened(say.region_up(region, answer))
