"""A pool writes its row into its memo (`row_memo`, behind `ROW_MEMO_PATCH`): what its status
says, written when it changes, never while the pool idles; and its history replays."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import MEMO_POOL_ROW, SIGNAL_WAKE
from devicepool.client import PoolClient
from devicepool.testing import eventually
from devicepool.workflows.reconciler.row_memo import Row, pool_row, read_row
from devicepool.workflows.reconciler.shell import ROW_MEMO_PATCH
from tests.helpers.histories import replay_every_run
from tests.helpers.workflow_stack import Workers, start_pool

pytestmark = pytest.mark.devserver


async def _row(handle: WorkflowHandle[Any, Any]) -> Row | None:
    return read_row(await (await handle.describe()).memo_value(MEMO_POOL_ROW, None))


async def _memo_writes(client: Client, handle: WorkflowHandle[Any, Any]) -> tuple[str, int]:
    """The current run, and how many times it wrote its memo."""
    run = (await handle.describe()).run_id
    history = await client.get_workflow_handle(handle.id, run_id=run).fetch_history()
    events = history.events
    return run, sum(
        1 for e in events if e.HasField("workflow_properties_modified_event_attributes")
    )


async def _a_pass(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the pool has made another pass (its `lastReconciled` moved); woken, so that the
    pass comes now rather than at its next resync."""
    first = (await handle.query("status"))["lastReconciled"]
    await handle.signal(SIGNAL_WAKE)

    async def passed() -> bool:
        return bool((await handle.query("status"))["lastReconciled"] != first)

    await eventually(passed, what="another pass", timeout=30)


def _converged(row: Row) -> bool:
    conditions = {c["type"]: c["status"] for c in row.status.get("conditions") or ()}
    return conditions.get("Ready") == "True" and conditions.get("Progressing") == "False"


async def test_a_pool_s_memo_row_is_its_status_and_idles_with_it(
    env: WorkflowEnvironment, workers: Workers, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    try:

        async def settled() -> Row | None:
            status = await handle.query("status")
            row = await _row(handle)
            said = read_row(json.loads(json.dumps(pool_row(status, created_at=None))))
            if status.get("readyDevices") != 2 or row is None or said is None:
                return None
            return row if row.status == said.status and _converged(row) else None

        row = await eventually(settled, what="a memo row of 2 ready devices", timeout=60)
        assert row.status["phase"] == "Ready" and row.created_at is not None
        assert row.max_wait == 300.0  # the default `leases.queue.maxWait`

        # Idle: passes go on (lastReconciled moves), the memo is not written again (a run
        # handed over meanwhile writes its own first row: then looked at again).
        async def idle() -> bool:
            assert row is not None
            before = await _memo_writes(env.client, handle)
            for _ in range(2):
                await _a_pass(handle)
            after = await _memo_writes(env.client, handle)
            if after[0] != before[0]:
                return False
            assert after[1] == before[1], "an idle pool wrote its memo"
            return True

        await eventually(idle, what="two passes in one run", timeout=120)

        # The changed path (behind its patch) is in a run's history, and every run replays.
        # A run handed over after a row was written starts with it (Temporal carries no memo
        # across continue-as-new unless the command names it).
        written = False
        for run, history in enumerate(
            await replay_every_run(env.client, handle.id, marked_by=ROW_MEMO_PATCH)
        ):
            started = history.events[0].workflow_execution_started_event_attributes
            if written:
                assert MEMO_POOL_ROW in started.memo.fields, f"run {run} started without its row"
            written = written or any(
                e.HasField("workflow_properties_modified_event_attributes") for e in history.events
            )
    finally:
        await handle.terminate()


async def test_a_crowd_of_lease_messages_writes_the_row_once_a_gap_not_once_a_message(
    env: WorkflowEnvironment, workers: Workers, pools: PoolClient, pool_name: str
) -> None:
    """Each lease taken and given back moves the row's lease counts twice; written for each
    message, a lease would cost two memo upserts (events, billed Actions). Within
    `ROW_LEASE_GAP` of a write they wait, and the reaper writes the last of them."""
    handle = await start_pool(env.client, pool_name, 2)
    try:

        async def ready() -> Row | None:
            row = await _row(handle)
            return row if row is not None and row.status.get("readyDevices") == 2 else None

        await eventually(ready, what="a memo row of 2 ready devices", timeout=60)
        run, before = await _memo_writes(env.client, handle)
        leases = 6
        for _ in range(leases):
            async with pools.lease(pool_name, duration=timedelta(minutes=5)):
                pass

        async def given_back() -> Row | None:
            row = await _row(handle)
            return row if row is not None and row.status.get("leasedDevices") == 0 else None

        # The last give-back is written by the reaper once the gap ends, not left stale.
        row = await eventually(given_back, what="the row after the give-backs", timeout=30)
        assert row.status.get("leasesQueued") == 0
        after_run, after = await _memo_writes(env.client, handle)
        if after_run == run:  # a run handed over meanwhile writes its own first row
            # One message a gap writes at once (12 messages in a few seconds: 2 or 3 gaps),
            # plus the pending row the reaper writes: far under one a message.
            assert after - before <= 4, f"{after - before} memo writes for {leases} leases"
    finally:
        await handle.terminate("test over")
