"""`RowWatch`: what `get -w` holds between refreshes (`_pool_reads.list_kinds` refreshes it),
as `kubectl get -w` holds a watch: the pools shown and the newest server time seen."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import WorkflowExecutionStatus

from devicepool.api.names import SA_ROW_AT
from devicepool.client._results import PoolSummary
from devicepool.workflows.reconciler.search_attributes import KEY_ROW_AT

# `get -w` lists every running pool again this often, a page a refresh in place of the
# narrowed List (an informer's resync): what the narrowed query missed (a record indexed
# later than the margin allows, a run that does not stamp) is shown at most this late.
RESYNC_SECONDS = 60.0
RESYNC_PAGE = 1000
# Running runs whose stamp is older than their start (a build that does not stamp, the
# stamp carried over from the run before) are listed by id each refresh, up to this many;
# more are caught by the resync.
CARRIED_LISTED = 100

# `get -w` asks for the rows that moved since the newest server time it saw (a row's stamp,
# a start, a close) less this much: a change is listed once visibility has it (under a second
# on SQL visibility, a few on Elasticsearch), and a stamp is its workflow task's start,
# earlier than its upsert lands. Rows listed again within the margin are no change.
WATCH_MARGIN = timedelta(seconds=30)


class RowWatch:
    """What a `get -w` holds between refreshes, as `kubectl get -w` holds a watch: the pools it
    shows (each workflow id's newest run as listed) and the newest server time seen.

    After the first List call (every running pool), a refresh lists only the executions of
    the kinds whose row stamp (`DevicePoolRowAt`), start or close is at or after that time
    less `WATCH_MARGIN`, and the running ones with no stamp (a build before it) or one older
    than their start (a build that does not stamp, carrying its predecessor's). `merge`:
    a newer run replaces an older one; a run closed as continued-as-new is passed by (its
    next run is listed by its start); any other close removes the pool, unless a later run
    of the same id is shown. Every `RESYNC_SECONDS`, a refresh lists a page of every
    running pool instead (`resynced`); its last page drops each pool neither it nor a
    narrowed List since its first page listed."""

    def __init__(self, margin: timedelta = WATCH_MARGIN) -> None:
        self.margin = margin
        self.view: dict[str, Any] = {}
        self.mark: datetime | None = None
        self.listed = False
        # False once the namespace refused the narrowed query: every running pool each time.
        self.narrow = True
        # The last refresh asked a queue's workers (the next one lists, whatever is due).
        self.asked_workers = False
        # Each workflow id's row as read from its execution when last listed.
        self.rows: dict[str, PoolSummary] = {}
        # The resync: when the next is due (monotonic), the next page's token, and the ids
        # listed since its first page (None: none under way).
        self.resync_at = math.inf
        self.resync_token: bytes | None = None
        self.resync_seen: set[str] | None = None
        # What the last refresh without the narrowed List did: "workers" or "resync".
        self.last_aside = ""
        # Running runs whose stamp is older than their start: listed by id.
        self.carried: set[str] = set()

    def resync_due(self) -> bool:
        """Whether the next refresh without the narrowed List should be a resync page."""
        if not self.narrow:  # every refresh lists every running pool already
            return False
        return self.resync_seen is not None or time.monotonic() >= self.resync_at

    def resynced(self, page: Iterable[Any], token: bytes | None) -> None:
        """Take a resync page in; `token` None: it was the last, the view is what it and
        the narrowed Lists since its first page listed."""
        if self.resync_seen is None:
            self.resync_seen = set()
        self.merge(page, full=False)
        self.resync_token = token
        if token is None:
            for gone in self.view.keys() - self.resync_seen:
                del self.view[gone]
            for gone in self.rows.keys() - self.view.keys():
                del self.rows[gone]
            self.carried &= self.view.keys()
            self.resync_seen = None
            self.resync_at = time.monotonic() + RESYNC_SECONDS

    def query(self, which: str) -> str:
        """The next List call's query; `which`: the kinds' `WorkflowType` clause."""
        if self.mark is None or not self.narrow:  # no server time to start from yet
            return f"{which} AND ExecutionStatus = 'Running'"
        since = _rfc3339(self.mark - self.margin)
        carried = ""
        if 0 < len(self.carried) <= CARRIED_LISTED:
            ids = ", ".join(f"'{i}'" for i in sorted(self.carried))
            carried = f" OR (ExecutionStatus = 'Running' AND WorkflowId IN ({ids}))"
        return (
            f"{which} AND ({SA_ROW_AT} >= '{since}' OR StartTime >= '{since}'"
            f" OR CloseTime >= '{since}'"
            f" OR (ExecutionStatus = 'Running' AND {SA_ROW_AT} IS NULL){carried})"
        )

    def merge(self, executions: Iterable[Any], *, full: bool) -> None:
        """Take a List call's executions in: `full`, every running one (the view is them)."""
        if full:
            self.view = {}
        self.listed = True
        for execution in sorted(executions, key=_started):
            self._note(execution)
            if self.resync_seen is not None:
                self.resync_seen.add(execution.id)
            status = getattr(execution, "status", None) or WorkflowExecutionStatus.RUNNING
            if status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                continue
            held = self.view.get(execution.id)
            later = (
                held is not None
                and getattr(held, "run_id", None) != getattr(execution, "run_id", None)
                and _started(held) > _started(execution)
            )
            if later:
                continue  # an older run's news: the view has a newer run
            self.rows.pop(execution.id, None)  # listed again: its row is read again
            self.carried.discard(execution.id)
            if status == WorkflowExecutionStatus.RUNNING:
                self.view[execution.id] = execution
                if _carried(execution):
                    self.carried.add(execution.id)
            else:
                self.view.pop(execution.id, None)
        for gone in self.rows.keys() - self.view.keys():
            del self.rows[gone]
        self.carried &= self.view.keys()

    def _note(self, execution: Any) -> None:
        stamp = None if _carried(execution) else execution.typed_search_attributes.get(KEY_ROW_AT)
        times = [getattr(execution, "start_time", None), getattr(execution, "close_time", None)]
        for at in [*times, stamp]:
            if isinstance(at, datetime):
                at = at if at.tzinfo else at.replace(tzinfo=UTC)
                self.mark = at if self.mark is None else max(self.mark, at)


def _carried(execution: Any) -> bool:
    """Whether the run's stamp is older than its start: not its own row's (a build that does
    not stamp carried its predecessor's over), so it says nothing of the row."""
    stamp = execution.typed_search_attributes.get(KEY_ROW_AT)
    if not isinstance(stamp, datetime) or getattr(execution, "start_time", None) is None:
        return False
    stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    return stamp < _started(execution)


def _started(execution: Any) -> datetime:
    at = getattr(execution, "start_time", None)
    if not isinstance(at, datetime):
        return datetime.min.replace(tzinfo=UTC)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
