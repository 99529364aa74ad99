"""A pool stamps each write of its memo row with `DevicePoolRowAt` (behind `ROW_AT_PATCH`), in
the pass's own search-attribute upsert: `get -w` then lists only the pools whose row moved. An
idle pool writes neither; the stamp is carried across continue-as-new; every run replays."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.api.names import MEMO_POOL_ROW, SA_ROW_AT
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.reconciler.row_memo import read_row
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

        replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
        marked, stamped_before, run_id = False, False, handle.first_execution_run_id or ""
        while run_id:
            history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
            await replayer.replay_workflow(history)
            events = history.events
            started = events[0].workflow_execution_started_event_attributes
            if stamped_before:  # carried as the other attributes are
                assert SA_ROW_AT in started.search_attributes.indexed_fields, run_id
            marked = marked or any(ROW_AT_PATCH.encode() in e.SerializeToString() for e in events)
            stamps = [
                e
                for e in events
                if e.event_type == UPSERT
                and SA_ROW_AT
                in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            ]
            writes = [e for e in events if e.event_type == MEMO]
            # Each row write is stamped by the upsert just before it (the pass's attributes
            # and the stamp in one command), and nothing else is: no upsert of its own.
            # (A run's first write has its patch's record between them: a marker, and the
            # SDK's upsert of `TemporalChangeVersion`.)
            commands = [e for e in events if e.event_type != MARKER and not _change_version(e)]
            unstamped = [w for w in writes if commands[commands.index(w) - 1] not in stamps]
            assert not unstamped, f"run {run_id}: row writes without their stamp"
            assert len(stamps) == len(writes), f"run {run_id}: stamps without a row write"
            stamped_before = stamped_before or bool(stamps)
            last = events[-1]
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        assert marked, "the patch's marker in no run"
    finally:
        await handle.terminate("test over")
