"""A pool stamps each write of its memo row that moves a figure of `get`'s table with
`DevicePoolRowAt` (behind `ROW_AT_PATCH`), in the pass's own search-attribute upsert: `get -w`
then lists only the pools whose row moved. A write that moves only what no table shows (a
lease ticket queued, a busy count) is not stamped: no stamp-only upsert, no Action. An idle
pool writes neither; the stamp is carried across continue-as-new; every run replays."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.api.names import MEMO_POOL_ROW, SA_ROW_AT
from devicepool.client import PoolClient
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.reconciler.row_memo import read_row, table_figures
from devicepool.workflows.reconciler.search_attributes import KEY_ROW_AT
from devicepool.workflows.reconciler.shell import ROW_AT_PATCH
from tests.helpers.workflow_stack import Workers, start_pool

pytestmark = pytest.mark.devserver

UPSERT = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
MEMO = EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


def _change_version(event: Any) -> bool:
    """An upsert of `TemporalChangeVersion` alone: the SDK's record of a patch."""
    fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
    return event.event_type == UPSERT and set(fields.indexed_fields) == {"TemporalChangeVersion"}


async def _stamp(handle: WorkflowHandle[Any, Any]) -> tuple[str, datetime | None, int | None]:
    """The current run, its `DevicePoolRowAt`, and its row's ready count."""
    described = await handle.describe()
    row = read_row(await described.memo_value(MEMO_POOL_ROW, None))
    ready = row.status.get("readyDevices") if row is not None else None
    return described.run_id or "", described.typed_search_attributes.get(KEY_ROW_AT), ready


async def test_a_row_write_is_stamped_in_one_upsert_idles_and_replays(
    env: WorkflowEnvironment, workers: Workers, pool_name: str
) -> None:
    before = datetime.now(UTC)
    handle = await start_pool(env.client, pool_name, 2)
    try:

        async def stamped() -> tuple[str, datetime] | None:
            run, at, ready = await _stamp(handle)
            return (run, at) if at is not None and ready == 2 else None

        run, at = await eventually(stamped, what="a stamped row of 2 ready devices", timeout=60)
        assert before - (datetime.now(UTC) - before) <= at <= datetime.now(UTC)

        # Idle: the stamp stays (a run handed over meanwhile carries it: the same value).
        async def idle() -> bool:
            for _ in range(3):
                await handle.signal("wake")
            now_run, now_at, _ = await _stamp(handle)
            return now_at == at or now_run != run

        await eventually(idle, what="passes that leave the stamp", timeout=30)

        writes = await _writes_replayed(env, handle)
        assert any(stamped for _, _, stamped in writes), "no stamped write"
    finally:
        await handle.terminate("test over")


async def _writes_replayed(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]
) -> list[tuple[Any, Any, bool]]:
    """Every run of the pool replayed, and each row write (the row before, the row written,
    whether it was stamped), checked: a write that moves a table figure is stamped by the
    upsert just before it (the pass's attributes and the stamp in one command); one that
    does not is not, unless its run had no stamp yet; no stamp is without a row write."""
    converter = DATA_CONVERTER.payload_converter
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    marked, stamped_before, run_id = False, False, handle.first_execution_run_id or ""
    found: list[tuple[Any, Any, bool]] = []
    while run_id:
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        await replayer.replay_workflow(history)
        events = history.events
        started = events[0].workflow_execution_started_event_attributes
        if stamped_before:  # carried as the other attributes are
            assert SA_ROW_AT in started.search_attributes.indexed_fields, run_id
        marked = marked or any(ROW_AT_PATCH.encode() in e.SerializeToString() for e in events)
        memo = started.memo.fields
        row = converter.from_payload(memo[MEMO_POOL_ROW]) if MEMO_POOL_ROW in memo else None
        # A stamp carried over is older than the run's start: the run stamps once of its own.
        run_stamped = False
        # (A run's first write has its patch's record before it: a marker, and the SDK's
        # upsert of `TemporalChangeVersion`.)
        commands = [e for e in events if e.event_type != MARKER and not _change_version(e)]
        for at, event in enumerate(commands):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if event.event_type == UPSERT and SA_ROW_AT in fields.indexed_fields:
                if commands[at + 1].event_type != MEMO:
                    assert not run_stamped, f"run {run_id}: a stamp, no write, twice"
                    assert row is not None, f"run {run_id}: a stamp without a row"
                    run_stamped = True
            if event.event_type != MEMO:
                continue
            upserted = event.workflow_properties_modified_event_attributes.upserted_memo.fields
            written = converter.from_payload(upserted[MEMO_POOL_ROW])
            before = commands[at - 1]
            stamped = before.event_type == UPSERT and SA_ROW_AT in (
                before.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            )
            moved = table_figures(written) != table_figures(row)
            assert stamped == (moved or not run_stamped), (
                f"run {run_id}: a write that moved {moved}, stamped {stamped}: {row} -> {written}"
            )
            found.append((row, written, stamped))
            row, run_stamped = written, run_stamped or stamped
        stamped_before = stamped_before or run_stamped
        last = events[-1]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    assert marked, "the patch's marker in no run"
    return found


async def test_a_lease_ticket_queued_and_handed_over_moves_no_figure_and_is_not_stamped(
    env: WorkflowEnvironment, workers: Workers, pools: PoolClient, pool_name: str
) -> None:
    """A 1-device pool: lease it (LEASED 0 -> 1: stamped), a second holder queues (a ticket:
    no column moves), the first gives it back and the ticket takes it (LEASED stays 1), the
    second gives it back (LEASED 1 -> 0: stamped). Four row writes, two stamps."""
    handle = await start_pool(env.client, pool_name, 1)

    async def row(**wanted: int) -> bool:
        _, at, _ = await _stamp(handle)
        said = read_row(await (await handle.describe()).memo_value(MEMO_POOL_ROW, None))
        status = said.status if said is not None else {}
        return at is not None and all(status.get(k) == v for k, v in wanted.items())

    try:
        await eventually(lambda: row(readyDevices=1), what="ready", timeout=60)
        first = await pools.acquire_lease(pool_name, holder="f9-first")
        await eventually(lambda: row(leasedDevices=1, leasesQueued=0), what="leased", timeout=30)
        waiting = asyncio.create_task(
            pools.acquire_lease(pool_name, wait=timedelta(seconds=60), holder="f9-second")
        )
        await eventually(lambda: row(leasedDevices=1, leasesQueued=1), what="queued", timeout=30)
        await pools.release_lease(pool_name, first)
        second = await waiting
        await eventually(lambda: row(leasedDevices=1, leasesQueued=0), what="handed", timeout=30)
        await pools.release_lease(pool_name, second)
        await eventually(lambda: row(leasedDevices=0, leasesQueued=0), what="back", timeout=30)
        writes = await _writes_replayed(env, handle)
        leasing = [
            (b, w, stamped)
            for b, w, stamped in writes
            if b is not None
            and (b["status"].get("leasedDevices") or w["status"].get("leasedDevices"))
        ]
        # The ticket's writes (queued; handed over) move no figure and are not stamped; what
        # else a pass writes meanwhile (a cost, a probe) is stamped only if a figure moved,
        # which `_writes_replayed` checks of every write.
        ticket = [
            stamped
            for b, w, stamped in leasing
            if b["status"].get("leasesQueued") != w["status"].get("leasesQueued")
            and table_figures(b) == table_figures(w)
        ]
        assert ticket and not any(ticket), _moved(leasing)
        lent = [
            stamped
            for b, w, stamped in leasing
            if b["status"].get("leasedDevices") != w["status"].get("leasedDevices")
        ]
        assert lent == [True, True], _moved(leasing)
    finally:
        await handle.terminate("test over")


def _moved(writes: list[tuple[Any, Any, bool]]) -> list[tuple[dict[str, Any], bool]]:
    """Each write as what it changed of the row's status, and whether it was stamped."""
    said = []
    for before, written, stamped in writes:
        b, w = before["status"], written["status"]
        said.append(({k: (b.get(k), w.get(k)) for k in {*b, *w} if b.get(k) != w.get(k)}, stamped))
    return said
