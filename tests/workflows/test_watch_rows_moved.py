"""`get -w` on a real server (issue 42): after the first List call, a refresh lists only the
pools whose row moved (`DevicePoolRowAt`), and a pool scaled shows its new row on the next
refresh; the query's `OR`, parentheses, `IS NULL` on the Datetime attribute and its
comparison with an RFC 3339 time are SQL visibility's (the dev server's)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.api.kinds import DEVICE_POOL
from devicepool.client import PoolClient, _queue_workers
from devicepool.client._pool_reads import RowWatch
from devicepool.testing import eventually
from devicepool.workflows.reconciler.search_attributes import KEY_ROW_AT
from tests.helpers.workflow_stack import Workers, start_pool

pytestmark = pytest.mark.devserver


async def test_a_refresh_lists_the_pool_that_moved_and_not_the_others(
    env: WorkflowEnvironment,
    workers: Workers,
    pools: PoolClient,
    pool_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_queue_workers, "WORKERS_FOR_SECONDS", 3600.0)  # List calls only
    moved, still = f"{pool_name}-m", f"{pool_name}-s"
    handles: list[Any] = []
    try:
        stamps: dict[str, datetime] = {}

        async def settled() -> bool:
            for handle in handles:
                described = await handle.describe()
                stamp = described.typed_search_attributes.get(KEY_ROW_AT)
                status = await handle.query("status")
                if (
                    stamp is None
                    or status.get("readyDevices") != 1
                    or stamps.get(handle.id) != stamp
                ):
                    if stamp is not None:
                        stamps[handle.id] = stamp
                    return False  # a row still moving (or not stamped yet)
            return True

        # `still` settles first: `moved`'s stamps are the newest server times the watch sees
        # (a row within the margin of the newest is listed again: no change, drawn once).
        for name in (still, moved):
            handles.append(await start_pool(env.client, name, 1))
            await eventually(settled, what=f"{name}'s settled, stamped row", timeout=60, every=1.5)

        listed: list[list[str]] = []
        list_workflows = env.client.list_workflows

        def counting(query: str, **kwargs: Any) -> Any:
            listed.append([])

            async def each() -> Any:
                async for execution in list_workflows(query, **kwargs):
                    listed[-1].append(execution.id)
                    yield execution

            return each()

        monkeypatch.setattr(env.client, "list_workflows", counting)
        ours = {DEVICE_POOL.workflow_id(moved), DEVICE_POOL.workflow_id(still)}
        # A margin of a second: the settled rows are older than the newest time seen less it.
        watch = RowWatch(margin=timedelta(seconds=1))

        async def refresh() -> dict[str, Any]:
            shown = await pools.list_kinds([DEVICE_POOL.name], full=False, watch=watch)
            return {p.name: p for p in shown}

        first = await refresh()
        assert {moved, still} <= first.keys() and ours <= set(listed[-1])
        assert first[moved].from_row and first[moved].status["readyDevices"] == 1

        async def quiet() -> bool:  # `still`'s stamp is behind the newest time less the margin
            await refresh()
            return DEVICE_POOL.workflow_id(still) not in listed[-1]

        await eventually(quiet, what="a refresh that lists `still` no more", timeout=30, every=0.5)
        assert watch.query("WorkflowType = 'DevicePool'").count(" OR ") == 3

        await pools.scale(moved, 2)

        async def shows_two() -> dict[str, Any] | None:
            shown = await refresh()
            assert DEVICE_POOL.workflow_id(still) not in listed[-1], "an unchanged pool listed"
            return shown if shown[moved].status.get("desiredReplicas") == 2 else None

        shown = await eventually(shows_two, what="the scaled pool's new row", timeout=30, every=0.5)
        assert DEVICE_POOL.workflow_id(moved) in listed[-1]
        assert shown[still].status["readyDevices"] == 1  # still shown, from the first list
    finally:
        for handle in handles:
            await handle.terminate("test over")
