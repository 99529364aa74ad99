"""`Showing`: what a pool's workflow shows of itself (both kinds), each written only when it
changed: search attributes, the Web UI's details, and the pool's row in its memo
(`row_memo`), stamped in `DevicePoolRowAt` when it moves a figure of `get`'s table.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from devicepool.api import names
    from devicepool.workflows.reconciler import search_attributes
    from devicepool.workflows.reconciler.row_memo import LeaseFacts, pool_row, table_figures

if TYPE_CHECKING:
    from devicepool.workflows.reconciler.shell import Reconciler

__all__ = ["ROW_AT_PATCH", "ROW_LEASE_GAP", "ROW_MEMO_PATCH", "Showing"]

# The pool's row in its memo (`row_memo`): a command runs from before it never issued.
ROW_MEMO_PATCH = "pool-row-in-memo"
# The row's time in `DevicePoolRowAt`, upserted with each row write: runs from before it
# issued no such upsert (a row write with no other attribute changed issued none at all).
ROW_AT_PATCH = "pool-row-time"
# A lease message that moves the row writes it at most this often: under a crowd of
# leases, one memo upsert (a history event, a billed Action) a message would double what a
# lease costs. What waits is written by the reaper when the gap ends (`row_due`).
ROW_LEASE_GAP = timedelta(seconds=5)


class Showing:
    """The shell's writer of what the pool shows (`Reconciler.show`, one per run)."""

    def __init__(self, h: Reconciler[Any, Any]) -> None:
        self.h = h
        self._details = ""  # the Web UI details last written (each run writes its own)
        # The memo row: when this run last wrote it, and whether a change waits for the gap.
        self._row_written_at: datetime | None = None
        self.row_pending = False

    def show(self) -> None:
        """Search attributes, UI details and the memo row, each written only when it changed."""
        current = workflow.info().typed_search_attributes
        updates = search_attributes.updates(self.h.kind.search_attributes(), current)
        self.show_details(attributes=updates)

    def show_details(
        self,
        *,
        lease_message: bool = False,
        attributes: Sequence[SearchAttributeUpdate[Any]] = (),
    ) -> None:
        """The UI's live details (served by a built-in query: no history event), and the
        pool's row in its memo (`show_row`), with the search attributes `attributes`."""
        details = self.h.kind.details() + self.h.leasing.details()
        if details != self._details:
            self._details = details
            workflow.set_current_details(details)
        self.show_row(lease_message=lease_message, attributes=attributes)

    def show_row(
        self,
        *,
        lease_message: bool = False,
        attributes: Sequence[SearchAttributeUpdate[Any]] = (),
    ) -> None:
        """What `get` and the worker's gauges read of the pool (`row_memo`), upserted into
        its memo only when it changed: an idle pool's row never does. A change a lease
        message made within `ROW_LEASE_GAP` of the last write waits for the gap's end (the
        reaper writes it), unless the book is empty or the pool is deleting: nothing
        would then wake to write it.

        `attributes` (the pass's search attributes that changed) are upserted first, with
        `DevicePoolRowAt` (the time of the row's write, behind `ROW_AT_PATCH`) in the same
        command when the write moves a figure of `get`'s table (`table_figures`): `get -w`
        lists only the pools whose row moved (`RowWatch`), and a write that moves nothing it
        shows (a lease ticket queued) costs no stamp-only upsert."""
        upserts = list(attributes)
        write = self._row_to_write(lease_message=lease_message)
        # A row write that moves a table figure is stamped in the pass's upsert, and once a
        # row not stamped by this run yet: one a build before the patch wrote, or a stamp
        # carried across continue-as-new, older than the run's start (`get -w` takes such a
        # stamp for a build that does not stamp, and lists the pool every refresh). A run
        # whose memo never holds a row (one from before `ROW_MEMO_PATCH`: `write` is never
        # None) would stamp every pass but for `unstamped`: at most once.
        memo = workflow.memo()
        has_row = names.MEMO_POOL_ROW in memo
        info = workflow.info()
        carried = info.typed_search_attributes.get(search_attributes.KEY_ROW_AT)
        unstamped = carried is None or carried < info.workflow_start_time
        moved = write is not None and (
            table_figures(write) != table_figures(memo.get(names.MEMO_POOL_ROW))
        )
        stamp = (moved and (has_row or unstamped)) or (has_row and unstamped)
        if stamp and workflow.patched(ROW_AT_PATCH):
            upserts.append(search_attributes.KEY_ROW_AT.value_set(workflow.now()))
        if upserts:
            workflow.upsert_search_attributes(upserts)
        if write is not None and workflow.patched(ROW_MEMO_PATCH):
            workflow.upsert_memo({names.MEMO_POOL_ROW: write})
            self._row_written_at = workflow.now()

    def _row_to_write(self, *, lease_message: bool) -> dict[str, Any] | None:
        """The row to write now (None: unchanged, or waiting for the lease gap)."""
        book = self.h.leasing.book
        leases = LeaseFacts(
            leased=len(book.leases),
            queued=len(book.tickets),
            expired=book.expired_total,
            oldest=(book.tickets[0].created_at, book.tickets[0].deadline) if book.tickets else None,
            max_wait=self.h.leasing.rules.queue.max_wait,
        )
        row = pool_row(
            self.h.s.status.to_json_dict(), created_at=self.h.s.created_at, leases=leases
        )
        if workflow.memo().get(names.MEMO_POOL_ROW) == row:
            self.row_pending = False
            return None
        now, last = workflow.now(), self._row_written_at
        if (
            lease_message
            and last is not None
            and now < last + ROW_LEASE_GAP
            and not book.empty()
            and not self.h.s.deleting
        ):
            self.row_pending = True
            return None
        self.row_pending = False
        return row

    def row_due(self) -> datetime | None:
        """When the row a lease message changed is written (None: nothing waits)."""
        if not self.row_pending or self._row_written_at is None:
            return None
        return self._row_written_at + ROW_LEASE_GAP

    def write_row_if_due(self) -> None:
        due = self.row_due()
        if due is not None and workflow.now() >= due:
            self.show_row()
