"""`get -w` holds a watch as `kubectl get -w` does (issue 42): one List call of every running
pool, then each refresh one request, a List call of only the rows that moved since the newest
server time it saw (`RowWatch`), or, when a task queue's workers are due to be asked again,
that one DescribeTaskQueue instead of the List call."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from devicepool.api.names import MEMO_POOL_ROW
from devicepool.client import _pool_reads, _queue_workers, _row_watch
from devicepool.client._pool_reads import WATCH_MARGIN, RowWatch
from devicepool.client.errors import EXIT_OK
from devicepool.client.pool_client import PoolClient
from devicepool.workflows.reconciler.row_memo import pool_row
from devicepool.workflows.reconciler.search_attributes import KEY_ROW_AT
from tests.client.test_client_both_kinds import browser
from tests.client.test_client_get_rows import ROLLING, Polled, _device, _on, names
from tests.helpers.cli import watch_get

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
RUNNING = WorkflowExecutionStatus.RUNNING
WHICH = "WorkflowType IN ('DevicePool', 'BrowserPool')"


def _run(
    workflow_id: str,
    run: str,
    *,
    started: int,
    status: WorkflowExecutionStatus = RUNNING,
    closed: int | None = None,
    stamped: int | None = None,
) -> Any:
    """A listed execution; times in seconds after `T0` (server times)."""
    pairs = (
        []
        if stamped is None
        else [SearchAttributePair(KEY_ROW_AT, T0 + timedelta(seconds=stamped))]
    )
    return SimpleNamespace(
        id=workflow_id,
        run_id=run,
        status=status,
        start_time=T0 + timedelta(seconds=started),
        close_time=None if closed is None else T0 + timedelta(seconds=closed),
        typed_search_attributes=TypedSearchAttributes(pairs),
    )


def _shown(watch: RowWatch) -> dict[str, str]:
    return {workflow_id: e.run_id for workflow_id, e in watch.view.items()}


def test_the_merge_keeps_each_pool_s_newest_run_and_drops_the_closed() -> None:
    watch = RowWatch()
    assert watch.query(WHICH) == f"{WHICH} AND ExecutionStatus = 'Running'"  # nothing seen
    watch.merge(
        [
            _run("devicepool/a", "a1", started=0, stamped=10),
            _run("devicepool/b", "b1", started=0, stamped=20),
            _run("devicepool/c", "c1", started=0, stamped=5),
            _run("devicepool/old", "o1", started=0),  # a build before the stamp: NULL
        ],
        full=True,
    )
    assert _shown(watch) == {
        "devicepool/a": "a1",
        "devicepool/b": "b1",
        "devicepool/c": "c1",
        "devicepool/old": "o1",
    }
    # The newest server time seen, less the margin; old rows (no stamp) every time.
    since = "2026-12-06T00:59:50.000000Z"
    assert T0 + timedelta(seconds=20) - WATCH_MARGIN == datetime.fromisoformat(since)
    assert watch.query(WHICH) == (
        f"{WHICH} AND (DevicePoolRowAt >= '{since}' OR StartTime >= '{since}'"
        f" OR CloseTime >= '{since}' OR (ExecutionStatus = 'Running' AND DevicePoolRowAt IS NULL))"
    )
    watch.merge(
        [
            # a: its row changed
            _run("devicepool/a", "a1", started=0, stamped=40),
            # b: continued as new; the closed run and the new one, either order
            _run("devicepool/b", "b2", started=50, stamped=20),
            _run(
                "devicepool/b",
                "b1",
                started=0,
                status=WorkflowExecutionStatus.CONTINUED_AS_NEW,
                closed=50,
                stamped=20,
            ),
            # c: deleted (its run ended cancelled)
            _run(
                "devicepool/c",
                "c1",
                started=0,
                status=WorkflowExecutionStatus.CANCELED,
                closed=45,
                stamped=44,
            ),
            # d: deleted, and applied again under the same name
            _run("devicepool/d", "d2", started=48, stamped=49),
            _run(
                "devicepool/d",
                "d1",
                started=1,
                status=WorkflowExecutionStatus.TERMINATED,
                closed=47,
            ),
            _run("devicepool/old", "o1", started=0),  # still NULL: listed, still shown
        ],
        full=False,
    )
    assert _shown(watch) == {
        "devicepool/a": "a1",
        "devicepool/b": "b2",
        "devicepool/d": "d2",
        "devicepool/old": "o1",
    }
    assert watch.view["devicepool/a"].typed_search_attributes.get(KEY_ROW_AT) == T0 + timedelta(
        seconds=40
    )
    assert watch.mark == T0 + timedelta(seconds=50)
    # An older run's news listed late changes nothing: d1 (closed before d2 started), b1.
    watch.merge(
        [
            _run(
                "devicepool/d",
                "d1",
                started=1,
                status=WorkflowExecutionStatus.TERMINATED,
                closed=47,
            ),
            _run(
                "devicepool/b",
                "b1",
                started=0,
                status=WorkflowExecutionStatus.CONTINUED_AS_NEW,
                closed=50,
            ),
        ],
        full=False,
    )
    assert _shown(watch)["devicepool/d"] == "d2" and _shown(watch)["devicepool/b"] == "b2"
    # The last run of an id closing removes it; a full list is the view.
    watch.merge(
        [
            _run(
                "devicepool/b",
                "b2",
                started=50,
                status=WorkflowExecutionStatus.COMPLETED,
                closed=60,
            )
        ],
        full=False,
    )
    assert "devicepool/b" not in watch.view
    watch.merge([_run("devicepool/a", "a1", started=0, stamped=40)], full=True)
    assert _shown(watch) == {"devicepool/a": "a1"}


class Counted(Polled):
    """Temporal whose every request (List, DescribeTaskQueue) is counted in order; after
    `requests` of them, Ctrl-C."""

    def __init__(self, *pools: Any, requests: int, **kwargs: Any) -> None:
        super().__init__(*pools, **kwargs)
        self.requests: list[str] = []
        self.limit = requests

    def _count(self, what: str) -> None:
        self.requests.append(what)
        if len(self.requests) == self.limit:
            os.kill(os.getpid(), signal.SIGINT)

    async def list_workflows(self, query: str) -> Any:
        self._count("List")
        self.queries.append(query)
        for pool in self.pools.values():
            if "DevicePool" in query:
                yield pool

    async def _describe(self, request: Any, **kwargs: Any) -> Any:
        self._count(f"Describe {request.task_queue.name}")
        return await super()._describe(request, **kwargs)


def _stamped(pool: Any, seconds: int) -> Any:
    pool.typed_search_attributes = TypedSearchAttributes(
        [
            *pool.typed_search_attributes,
            SearchAttributePair(KEY_ROW_AT, T0 + timedelta(seconds=seconds)),
        ]
    )
    pool.start_time = T0
    return pool


def test_a_watch_s_later_refreshes_list_only_what_moved(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pools = [
        _stamped(_on("devicepool", _device("d1")), 30),
        _stamped(_on("devicepool", browser("b1")), 10),
    ]
    temporal = Counted(*pools, requests=4, polled={"devicepool": [(5, "")]})
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "table")
    assert code == EXIT_OK, err
    # The first refresh as `get`: every running pool, its queue's workers; then one List a
    # refresh, of the rows stamped, started or closed since the newest time seen less 30 s.
    assert temporal.requests == ["List", "Describe devicepool", "List", "List"]
    first, *later = temporal.queries
    assert first == f"{WHICH} AND ExecutionStatus = 'Running'"
    since = "2026-12-06T01:00:00.000000Z"  # d1's stamp (30 s) less the margin
    assert (
        later
        == [
            f"{WHICH} AND (DevicePoolRowAt >= '{since}' OR StartTime >= '{since}' OR CloseTime >= "
            f"'{since}' OR (ExecutionStatus = 'Running' AND DevicePoolRowAt IS NULL))"
        ]
        * 2
    )
    assert [p.queries for p in pools] == [[], []]
    assert names(out) == ["NAME", "d1", "NAME", "browserpool/b1"]


def test_a_refresh_due_to_ask_a_queue_s_workers_asks_them_instead_of_listing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every queue due at once (a 0-second pause), refreshes alternate: a queue's
    DescribeTaskQueue (one queue, the one asked longest ago), then a List call; never both
    in one refresh. A queue whose workers went away marks its rows `?` on the refresh after."""
    monkeypatch.setattr(_queue_workers, "WORKERS_FOR_SECONDS", 0.0)
    pools = [_stamped(_on("q1", _device("d1")), 30), _stamped(_on("q2", _device("d2")), 30)]
    temporal = Counted(*pools, requests=8, polled={"q1": [(5, "")], "q2": [(5, "")]})
    refreshes = 0
    list_kinds = _pool_reads.list_kinds

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal refreshes
        refreshes += 1
        if refreshes == 4:
            temporal.polled["q2"] = [(600, "")]  # its worker stopped polling
        return await list_kinds(*args, **kwargs)

    monkeypatch.setattr(_pool_reads, "list_kinds", counted)
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "table")
    assert code == EXIT_OK, err
    assert temporal.requests == [
        "List",
        "Describe q1",
        "Describe q2",  # the first refresh, as `get`
        "Describe q1",
        "List",
        "Describe q2",
        "List",
        "Describe q1",
    ]
    assert "d2" in out.splitlines()[-1] and "Ready?" in out.splitlines()[-1]


class NoStamp(Counted):
    """An older cluster: its namespace has no `DevicePoolRowAt`, and refuses a query on it."""

    async def list_workflows(self, query: str) -> Any:
        from temporalio.service import RPCError, RPCStatusCode

        if "DevicePoolRowAt" in query:
            self._count("refused")
            raise RPCError(
                "invalid query: DevicePoolRowAt is not defined", RPCStatusCode.INVALID_ARGUMENT, b""
            )
        async for pool in super().list_workflows(query):
            yield pool


def test_a_namespace_without_the_stamp_is_listed_whole_each_refresh(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """This CLI against a cluster whose workers and namespace are a release older: the
    narrowed query is refused once; from then on each refresh lists every running pool."""
    pools = [_stamped(_on("devicepool", _device("d1")), 30)]
    temporal = NoStamp(*pools, requests=5, polled={"devicepool": [(5, "")]})
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "table")
    assert code == EXIT_OK, err
    assert temporal.requests == ["List", "Describe devicepool", "refused", "List", "List"]
    assert set(temporal.queries) == {f"{WHICH} AND ExecutionStatus = 'Running'"}
    assert names(out) == ["NAME", "d1"]


class Visibility:
    """Temporal visibility as `get -w`'s queries read it (what is indexed now: `records`, a
    run each), pages of `page_size` for a List call that asks one page at a time; every
    request (List, DescribeTaskQueue) counted in order."""

    namespace = "default"
    service_client = SimpleNamespace(config=SimpleNamespace(target_host="temporal.test:7233"))

    def __init__(self, *records: Any) -> None:
        self.records = list(records)
        self.requests: list[str] = []
        self.workflow_service = SimpleNamespace(describe_task_queue=self._describe)

    async def _describe(self, request: Any, **_: Any) -> Any:
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueResponse

        self.requests.append("Describe")
        return DescribeTaskQueueResponse()  # no pollers: rows marked `?`, nothing else

    def list_workflows(
        self, query: str, *, page_size: int = 1000, next_page_token: bytes | None = None
    ) -> Any:
        found = [e for e in self.records if _matches(query, e)]
        return _Pages(self, found, page_size, int(next_page_token or b"0"))


class _Pages:
    def __init__(self, seen: Visibility, found: list[Any], size: int, at: int) -> None:
        self.seen, self.found, self.size, self.at = seen, found, size, at
        self.current_page: list[Any] | None = None
        self.next_page_token: bytes | None = None

    async def fetch_next_page(self) -> None:
        self.seen.requests.append("Page")
        self.current_page = self.found[self.at : self.at + self.size]
        more = self.at + self.size < len(self.found)
        self.next_page_token = str(self.at + self.size).encode() if more else None

    def __aiter__(self) -> Any:
        self.seen.requests.append("List")
        return self._all()

    async def _all(self) -> Any:
        for e in self.found:
            yield e


def _matches(query: str, e: Any) -> bool:
    running = e.status == RUNNING
    since = re.search(r">= '([^']+)'", query)
    if since is None:
        assert "ExecutionStatus = 'Running'" in query
        return running
    at = datetime.fromisoformat(since.group(1).replace("Z", "+00:00"))
    stamp = e.typed_search_attributes.get(KEY_ROW_AT)
    listed = re.search(r"WorkflowId IN \(([^)]*)\)", query)
    ids = re.findall(r"'([^']+)'", listed.group(1)) if listed else []
    return bool(
        (stamp is not None and stamp >= at)
        or e.start_time >= at
        or (e.close_time is not None and e.close_time >= at)
        or (running and stamp is None)
        or (running and e.id in ids)
    )


def _pool(name: str, run: str, *, started: int, stamped: int | None, ready: int = 3) -> Any:
    """A DevicePool's run as listed: its row (memo) says `ready` devices are ready."""
    e = _run(f"devicepool/{name}", run, started=started, stamped=stamped)
    e.task_queue = "q"
    e.workflow_type = "DevicePool"
    e.memo = json.loads(json.dumps(pool_row({**ROLLING, "readyDevices": ready}, created_at=T0)))

    async def memo_value(key: str, default: Any = None) -> Any:
        return e.memo if key == MEMO_POOL_ROW else default

    e.memo_value = memo_value
    return e


def _stamp(e: Any, seconds: int) -> None:
    e.typed_search_attributes = TypedSearchAttributes(
        [SearchAttributePair(KEY_ROW_AT, T0 + timedelta(seconds=seconds))]
    )


async def _refresh(pools: Any, watch: RowWatch) -> dict[str, int]:
    """One `get -w` refresh: each shown pool's ready devices."""
    shown = await _pool_reads.list_kinds(pools, ["DevicePool"], full=False, watch=watch)
    return {p.name: p.status["readyDevices"] for p in shown}


def _one_request_each(temporal: Visibility, refreshes: int) -> None:
    assert len(temporal.requests) == refreshes, temporal.requests


async def test_a_close_indexed_below_the_watch_s_window_is_gone_after_a_resync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R15 #1a: B is deleted at 100 and its close is indexed late, after A's row moved at 140
    (the narrowed query then asks from 110): the watch's full resync, a page a refresh
    between the narrowed ones, drops it."""
    monkeypatch.setattr(_row_watch, "RESYNC_SECONDS", 0.0)
    monkeypatch.setattr(_queue_workers, "WORKERS_FOR_SECONDS", 3600.0)
    a = _pool("a", "a1", started=0, stamped=0)
    b = _pool("b", "b1", started=0, stamped=0)
    temporal = Visibility(a, b)
    pools = PoolClient(temporal)  # type: ignore[arg-type]
    watch = RowWatch()
    assert await _refresh(pools, watch) == {"a": 3, "b": 3}  # a List, a Describe
    temporal.requests.clear()
    _stamp(a, 140)
    assert await _refresh(pools, watch) == {"a": 3, "b": 3}
    b.status, b.close_time = WorkflowExecutionStatus.CANCELED, T0 + timedelta(seconds=100)
    shown = [await _refresh(pools, watch) for _ in range(4)]
    assert shown[-1] == {"a": 3}, shown
    _one_request_each(temporal, 5)
    # never two refreshes in a row without the narrowed List
    assert ("Page", "Page") not in set(itertools.pairwise(temporal.requests))


async def test_a_run_with_an_older_carried_stamp_shows_its_row_s_change() -> None:
    """R15 #1b: a rollback's run (a build that does not stamp) carries the stamp its
    predecessor wrote, older than its own start: the watch lists it as it lists an unstamped
    run, and shows its row's change on the next narrowed refresh."""
    old = _pool("old", "o2", started=200, stamped=140)  # continued as new onto the old build
    other = _pool("other", "x1", started=0, stamped=0)
    temporal = Visibility(old, other)
    pools = PoolClient(temporal)  # type: ignore[arg-type]
    watch = RowWatch()
    assert await _refresh(pools, watch) == {"old": 3, "other": 3}
    _stamp(other, 400)  # the mark moves on: `old`'s start and stamp fall out of the window
    await _refresh(pools, watch)
    old.memo = json.loads(json.dumps(pool_row({**ROLLING, "readyDevices": 1}, created_at=T0)))
    shown = [await _refresh(pools, watch) for _ in range(2)]
    assert shown[-1] == {"old": 1, "other": 3}, shown


async def test_a_resync_carries_its_page_token_across_refreshes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resync of three pages takes three refreshes, each with its one request, narrowed
    Lists between; a pool not in it (nor seen by the narrowed Lists meanwhile) is gone."""
    monkeypatch.setattr(_row_watch, "RESYNC_SECONDS", 0.0)
    monkeypatch.setattr(_row_watch, "RESYNC_PAGE", 1)
    monkeypatch.setattr(_queue_workers, "WORKERS_FOR_SECONDS", 3600.0)
    runs = [_pool(n, f"{n}1", started=0, stamped=0) for n in ("a", "b", "c")]
    temporal = Visibility(*runs)
    pools = PoolClient(temporal)  # type: ignore[arg-type]
    watch = RowWatch()
    await _refresh(pools, watch)
    temporal.requests.clear()
    _stamp(runs[0], 140)
    gone = _pool("d", "d1", started=0, stamped=0)  # shown, its close never listed
    watch.view[gone.id] = gone
    for _ in range(6):
        await _refresh(pools, watch)
    assert temporal.requests == ["Page", "List", "Page", "List", "Page", "List"]
    assert sorted(watch.view) == ["devicepool/a", "devicepool/b", "devicepool/c"]


def test_a_row_s_table_figures_are_every_figure_get_s_tables_read_from_it() -> None:
    """What a pool stamps on (`table_figures`) moves whenever a figure of either kind's `get`
    table read from the row moves, and not for what no table shows: a row write that moves
    only those costs no stamp-only upsert."""
    from devicepool.client._cli_kinds import VIEWS
    from devicepool.client._results import PoolSummary
    from devicepool.workflows.reconciler.row_memo import (
        COUNT_FIELDS,
        LeaseFacts,
        read_row,
        table_figures,
    )

    rolling = {"type": "RollingOut", "status": "True", "reason": "SpecChanged"}
    base = {
        **ROLLING,
        "readyProfiles": 2,
        "openProfiles": 1,
        "lostProfiles": 0,
        "byNode": {"n1": 2},
        "conditions": [rolling],
        "observedGeneration": 3,
    }
    facts = LeaseFacts(leased=1, queued=0, expired=0, max_wait=60.0)

    def tables(row: dict[str, Any]) -> list[list[Any]]:
        read = read_row(json.loads(json.dumps(row)))
        status = {} if read is None else read.status
        return [
            view.rows([PoolSummary(name="p", spec={}, status=status, created=T0, kind=kind)])[0]
            for kind, view in VIEWS.items()
        ]

    before = pool_row(base, created_at=T0, leases=facts)
    changes: list[tuple[dict[str, Any], LeaseFacts]] = [
        *(
            ({**base, key: 9}, facts)
            for key in COUNT_FIELDS
            if key not in ("leasedDevices", "leasesQueued", "leasesExpired")  # `facts` say
        ),
        ({**base, "hourlyCost": 2.5}, facts),
        ({**base, "phase": "Degraded"}, facts),
        ({**base, "byNode": {"n1": 1, "n2": 1}}, facts),
        ({**base, "conditions": []}, facts),  # the rollout ended: `(rollout 2/4)` goes
        ({**base, "conditions": [{**rolling, "reason": "Other"}]}, facts),
        (base, LeaseFacts(leased=2, queued=0, expired=0, max_wait=60.0)),
        (base, LeaseFacts(leased=1, queued=2, expired=1, max_wait=60.0, oldest=(T0, T0))),
        (base, LeaseFacts(leased=1, queued=0, expired=0, max_wait=30.0)),
    ]
    unshown = 0
    for status, leases in changes:
        after = pool_row(status, created_at=T0, leases=leases)
        assert after != before
        shown = tables(after) != tables(before)
        assert shown == (table_figures(after) != table_figures(before)), (status, leases)
        unshown += not shown
    assert unshown >= 5  # busy, queued/expired, generation, a reason, maxWait: no stamp
    partial = {**before, "partial": True}  # read as no row: the pool is asked instead
    assert table_figures(partial) != table_figures(before)
    assert table_figures(None) != table_figures(before)
