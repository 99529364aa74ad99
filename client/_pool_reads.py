"""What `PoolClient` reads besides a query's answer: summaries, lists, `describe`, cost, an
account's window, the profiles a teardown retired. Each is called by the method of its name."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.conversion import stored_spec_json
from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL
from devicepool.api.names import (
    MEMO_POOL_ROW,
    QUERY_COST,
    QUERY_DEVICES,
    QUERY_EVENTS,
    QUERY_LEASES,
    QUERY_LEDGER,
    QUERY_SPEC,
    QUERY_STATUS,
    SA_ROW_AT,
    ledger_workflow_id,
)
from devicepool.client._kind_sides import Side, side_of
from devicepool.client._lease_watch import read_view
from devicepool.client._results import PoolSummary, iso, parse_time
from devicepool.client._temporal_errors import QUERY_TIMEOUT
from devicepool.client._validation import validate_name
from devicepool.workflows.pool.messages import DevicesView, PoolCost
from devicepool.workflows.reconciler.events import PoolEvents
from devicepool.workflows.reconciler.lease_messages import LeasesView
from devicepool.workflows.reconciler.row_memo import Row, read_row
from devicepool.workflows.reconciler.search_attributes import KEY_ROW_AT

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

# `describe`'s events: the newest of the pool's own (query `events`), as kubectl shows them.
RECENT_EVENTS = 20


async def summary_of(pools: PoolClient, kind: str, name: str, execution: Any) -> PoolSummary | None:
    """The pool's answers to `spec` and `status`; without them (no worker answered),
    what its search attributes say, marked stale."""
    side = side_of(kind)
    handle = pools._client.get_workflow_handle(execution.id)
    spec_answer, status_answer = await asyncio.gather(
        pools._try_query(handle, QUERY_SPEC), pools._try_query(handle, QUERY_STATUS)
    )
    if isinstance(spec_answer, dict) and isinstance(status_answer, dict):
        return PoolSummary(
            name=name,
            spec=side.kind.conversion.stored_spec_json(spec_answer.get("spec") or {}),
            status=dict(status_answer),
            # The pool's creation, carried across its runs (a run's start restarts at
            # every continue-as-new); a worker from before answers without it.
            created=parse_time(spec_answer.get("createdAt")) or execution.start_time,
            metadata=dict(spec_answer.get("metadata") or {}),
            kind=side.kind.name,
        )
    return side.stale(name, execution)


async def list_pools(
    pools: PoolClient, kind: str | None, *, full: bool = True
) -> list[PoolSummary]:
    """Every running pool of the kind (visibility), each with its live spec and status;
    without `full`, what `get`'s table shows (`list_kinds`)."""
    return await list_kinds(pools, [pools._side(kind).kind.name], full=full)


async def list_kinds(
    pools: PoolClient,
    kinds: Sequence[str],
    *,
    full: bool = True,
    ask: Callable[[PoolSummary], bool] | None = None,
    watch: RowWatch | None = None,
) -> list[PoolSummary]:
    """Every running pool of the kinds from one List call, in the kinds' order and by name
    within, each with its live spec and status (two queries a pool); without `full`, what
    `get`'s table shows: each pool's row from its memo, and only a pool without one is asked,
    or one whose row `ask` answers True for (`get -w -o json`: a row that changed).

    With `watch` (`get -w`, without `full`): its first refresh is that List call; each
    later one is one request, a List call of only the rows that moved since (`RowWatch`),
    or, when a task queue's workers are due to be asked again, that DescribeTaskQueue
    instead (the rows are then the last refresh's), or, every `RESYNC_SECONDS`, a page of
    every running pool instead (`RowWatch.resynced`)."""
    sides = [pools._side(kind) for kind in kinds]
    types = ", ".join(f"'{side.kind.workflow_type}'" for side in sides)
    which = f"WorkflowType = {types}" if len(sides) == 1 else f"WorkflowType IN ({types})"
    if watch is not None and watch.listed and not full:
        # Never two refreshes in a row without the narrowed List: a queue's workers due and
        # a resync due take turns in the refreshes between.
        queues = {getattr(e, "task_queue", None) for e in watch.view.values()}
        due = pools._workers.due(queues) if not watch.asked_workers else []
        resync = not watch.asked_workers and watch.resync_due()
        if due and resync:
            due, resync = (due, False) if watch.last_aside == "resync" else ([], True)
        watch.asked_workers = bool(due) or resync
        if due:
            watch.last_aside = "workers"
            await pools._workers.ask(due[0])
        elif resync:
            watch.last_aside = "resync"
            page, token = await _page(pools, sides, watch, which)
            watch.resynced(page, token)
        else:
            executions = await _listed_since(pools, sides, watch, which)
            watch.merge(executions, full=not watch.narrow)
        listed = _named(sides, watch.view.values())
        served = pools._workers.known(getattr(e, "task_queue", None) for _, _, e in listed)
    else:
        executions = await _listed(pools, sides, f"{which} AND ExecutionStatus = 'Running'")
        if watch is not None and not full:
            watch.merge(executions, full=True)
            watch.resync_at = time.monotonic() + RESYNC_SECONDS
        listed = _named(sides, executions)
        served = (
            {}
            if full
            else await pools._workers.served({getattr(e, "task_queue", None) for _, _, e in listed})
        )
    limit = asyncio.Semaphore(16)

    async def one(side: Side, name: str, execution: Any) -> PoolSummary | None:
        row = None if full else await _row_summary(side, name, execution, watch)
        if row is not None:
            # A row is frozen at its last write: it cannot say that no worker is left.
            row.stale = not is_served(served.get(getattr(execution, "task_queue", None)), execution)
        if row is not None and not (ask is not None and ask(row)):
            return row
        async with limit:
            return await summary_of(pools, side.kind.name, name, execution)

    found = await asyncio.gather(*(one(*each) for each in listed))
    order = {side.kind.name: i for i, side in enumerate(sides)}
    return sorted((p for p in found if p is not None), key=lambda p: (order[p.kind], p.name))


async def _listed(pools: PoolClient, sides: Sequence[Side], query: str) -> list[Any]:
    with pools._errors(None, kind=sides[0].kind.name):
        return [execution async for execution in pools._client.list_workflows(query)]


async def _listed_since(
    pools: PoolClient, sides: Sequence[Side], watch: RowWatch, which: str
) -> list[Any]:
    """The watch's List call; on a namespace that refuses its query (no `DevicePoolRowAt`:
    this CLI against an older cluster), every running pool, from then on."""
    if watch.narrow:
        try:
            return [e async for e in pools._client.list_workflows(watch.query(which))]
        except RPCError as err:
            if err.status != RPCStatusCode.INVALID_ARGUMENT:
                with pools._errors(None, kind=sides[0].kind.name):
                    raise
            watch.narrow = False
    return await _listed(pools, sides, watch.query(which))


async def _page(
    pools: PoolClient, sides: Sequence[Side], watch: RowWatch, which: str
) -> tuple[list[Any], bytes | None]:
    """The watch's resync's next page of every running pool, and the token of the one
    after it (None: that was the last)."""
    with pools._errors(None, kind=sides[0].kind.name):
        pages = pools._client.list_workflows(
            f"{which} AND ExecutionStatus = 'Running'",
            page_size=RESYNC_PAGE,
            next_page_token=watch.resync_token,
        )
        await pages.fetch_next_page()
        return list(pages.current_page or []), pages.next_page_token or None


def _named(sides: Sequence[Side], executions: Iterable[Any]) -> list[tuple[Side, str, Any]]:
    """The executions that are pools of one of the kinds, with their side and name."""
    listed: list[tuple[Side, str, Any]] = []
    for execution in executions:
        for side in sides:
            name = side.kind.name_from_workflow_id(execution.id)
            of_type = getattr(execution, "workflow_type", None) or side.kind.workflow_type
            if name and of_type == side.kind.workflow_type:
                listed.append((side, name, execution))
                break
    return listed


async def _row_summary(
    side: Side, name: str, execution: Any, watch: RowWatch | None
) -> PoolSummary | None:
    """`summary_in_list`, read once per listed execution under a watch (a row not listed
    again is the one read before: 1,000 memo rows are not decoded every 2 s)."""
    if watch is None:
        return await summary_in_list(side.kind.name, name, execution)
    if execution.id in watch.rows:
        return watch.rows[execution.id]
    row = await summary_in_list(side.kind.name, name, execution)
    if row is not None:
        watch.rows[execution.id] = row
    return row


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


# A worker's poll of its queue is a long poll (about a minute on the server): its last
# access is when it began. Not one this recent: no worker serves the queue.
POLLED_WITHIN = timedelta(minutes=2)
# `get -w`: a task queue's workers are asked again at most this often.
WORKERS_FOR_SECONDS = 30.0

# A queue's workers as DescribeTaskQueue saw them: each one's version (as a pinned execution
# names it, in either spelling; none unversioned) and its last poll; None: not known (the
# call failed, or an execution without its queue).
Pollers = list[tuple[frozenset[str], datetime]] | None
# What a listed execution says of its Worker Versioning (system search attributes).
_KEY_BEHAVIOR = SearchAttributeKey.for_keyword("TemporalWorkflowVersioningBehavior")
_KEY_VERSION = SearchAttributeKey.for_keyword("TemporalWorkerDeploymentVersion")


def _version(options: Any) -> frozenset[str]:
    if not options.build_id:
        return frozenset()
    return frozenset(f"{options.deployment_name}{sep}{options.build_id}" for sep in ":.")


class TaskQueueWorkers:
    """Which workers poll the pools' task queues: one DescribeTaskQueue a queue, kept for
    `WORKERS_FOR_SECONDS`; `get -w` asks one due queue a refresh instead of its List call
    (`due`, `ask`), the queue asked longest ago first."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._known: dict[str, tuple[float, Pollers]] = {}

    async def served(self, queues: Iterable[str | None]) -> dict[str | None, Pollers]:
        wanted = sorted(q for q in set(queues) if q)
        due = self.due(wanted)
        await asyncio.gather(*map(self.ask, due))
        return self.known(wanted)

    def due(self, queues: Iterable[str | None]) -> list[str]:
        """The queues whose workers are due to be asked, never asked ones first, then the
        one asked longest ago."""
        now = time.monotonic()
        wanted = sorted(q for q in set(queues) if q)
        due = [q for q in wanted if q not in self._known or self._known[q][0] <= now]
        return sorted(due, key=lambda q: self._known[q][0] if q in self._known else -math.inf)

    async def ask(self, queue: str) -> None:
        pollers = await self._pollers(queue)
        self._known[queue] = (time.monotonic() + WORKERS_FOR_SECONDS, pollers)

    def known(self, queues: Iterable[str | None]) -> dict[str | None, Pollers]:
        """What was last seen of each queue's workers (None: never asked)."""
        return {q: self._known[q][1] if q in self._known else None for q in set(queues) if q}

    async def _pollers(self, queue: str) -> Pollers:
        try:
            answer = await self._client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=self._client.namespace,
                    task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                ),
                timeout=QUERY_TIMEOUT,
            )
        except Exception:  # not allowed, not answered, a stand-in without it: not known
            return None
        return [
            (_version(p.deployment_options), p.last_access_time.ToDatetime(tzinfo=UTC))
            for p in answer.pollers
        ]


def is_served(pollers: Pollers, execution: Any) -> bool:
    """Whether a worker polled the execution's queue lately (one of its build, if the
    execution is pinned to one); not known counts as served."""
    if pollers is None:
        return True
    since = datetime.now(UTC) - POLLED_WITHIN
    build = _pinned_build(execution)
    return any(at >= since and (not build or build in of) for of, at in pollers)


def _pinned_build(execution: Any) -> str:
    """The Worker Versioning build ("deployment:build") a listed execution is pinned to, as
    its system search attributes say; "" for none (unversioned, auto-upgrade, not said)."""
    attrs = execution.typed_search_attributes
    if attrs.get(_KEY_BEHAVIOR) != "Pinned":
        return ""
    return str(attrs.get(_KEY_VERSION) or "")


async def summary_in_list(kind: str, name: str, execution: Any) -> PoolSummary | None:
    """`get`'s table row of a listed or described execution, from its memo row and search
    attributes (no query); None without a row (a build before it, or one too large)."""
    row = await row_of(execution)
    if row is None:
        return None
    side = side_of(kind)
    spec = side.stale_spec(execution.typed_search_attributes) or {}
    return PoolSummary(
        name=name,
        spec={k: v for k, v in spec.items() if v is not None},
        status=dict(row.status),
        created=row.created_at or execution.start_time,
        kind=side.kind.name,
        from_row=True,
    )


async def row_of(execution: Any) -> Row | None:
    """The pool's row in an execution's memo, if it has one a reader can trust."""
    try:
        value = await execution.memo_value(MEMO_POOL_ROW, None)
    except Exception:  # no memo API (a stand-in), a payload this client cannot decode
        return None
    return read_row(value)


async def describe_device_pool(pools: PoolClient, name: str) -> dict[str, Any]:
    """Spec, status, conditions, devices, the workflow and its recent events."""
    validate_name(name)
    handle = pools._client.get_workflow_handle(DEVICE_POOL.workflow_id(name))
    desc = await pools._describe_running(name, handle, DEVICE_POOL.name)
    summary = await summary_of(pools, DEVICE_POOL.name, name, desc)
    assert summary is not None  # a DevicePool's search attributes always make one
    view = await pools._try_query(handle, QUERY_DEVICES, result_type=DevicesView)
    devices = (
        [d.model_dump(mode="json", by_alias=True) for d in view.devices]
        if isinstance(view, DevicesView)
        else None
    )
    answer = await pools._try_query(handle, QUERY_EVENTS, result_type=PoolEvents)
    # None: no worker, or one from before the query (`describe` says so).
    events = (
        [e.model_dump(mode="json", by_alias=True) for e in answer.events[-RECENT_EVENTS:]]
        if isinstance(answer, PoolEvents)
        else None
    )
    resource = summary.to_resource()
    resource["devices"] = devices
    resource["workflow"] = {
        "id": desc.id,
        "runId": desc.run_id,
        "taskQueue": desc.task_queue,
        "status": desc.status.name if desc.status else "UNKNOWN",
        "startTime": iso(desc.start_time),
        "historyLength": desc.history_length,
    }
    resource["events"] = events
    resource["leases"] = await _leases_of(pools, handle, summary.status)
    if summary.stale:
        resource["note"] = "no worker answered; spec and status are from search attributes"
    return resource


async def describe_browser_pool(pools: PoolClient, name: str) -> dict[str, Any]:
    """Spec, status, conditions, profiles and the pool's own events."""
    got = await pools.summary(name, kind=BROWSER_POOL.name)
    handle = pools._client.get_workflow_handle(BROWSER_POOL.workflow_id(name))
    with pools._errors(name, kind=BROWSER_POOL.name):
        events = await handle.query(QUERY_EVENTS, rpc_timeout=QUERY_TIMEOUT)
    metadata: dict[str, Any] = {"name": name}
    if got.created is not None:
        metadata["creationTimestamp"] = iso(got.created)
    return {
        "kind": BROWSER_POOL.name,
        "metadata": metadata,
        "spec": got.spec,
        "status": got.status,
        "profiles": await pools.profiles(name),
        "events": list(events.get("events") or []),
        "leases": await _leases_of(pools, handle, got.status),
    }


async def _leases_of(
    pools: PoolClient, handle: WorkflowHandle[Any, Any], status: dict[str, Any]
) -> dict[str, Any] | None:
    """`describe`'s leases held and tickets waiting: the `leases` query, asked only when the
    status says there are some; None when no worker answered it."""
    if not (status.get("leasedDevices") or status.get("leasesQueued")):
        return {"leases": [], "tickets": []}
    answer = await pools._try_query(handle, QUERY_LEASES)  # a newer worker's fields: left out
    if not isinstance(answer, dict | LeasesView):
        return None
    view = read_view(answer)
    return view.model_dump(mode="json", by_alias=True, include={"leases", "tickets"})


async def costs(pools: PoolClient, name: str | None) -> list[tuple[str, PoolCost | None]]:
    """Each running DevicePool's `cost` answer (None where no worker answered); `name`'s."""
    if name is not None:
        validate_name(name)
        handle = await pools._running(name, DEVICE_POOL.name)
        return [(name, await pools._try_query(handle, QUERY_COST, result_type=PoolCost))]
    listed = await pools.list_pools(kind=DEVICE_POOL.name)

    async def one(pool: PoolSummary) -> tuple[str, PoolCost | None]:
        handle = pools._client.get_workflow_handle(DEVICE_POOL.workflow_id(pool.name))
        return pool.name, await pools._try_query(handle, QUERY_COST, result_type=PoolCost)

    return list(await asyncio.gather(*(one(p) for p in listed)))


async def account_window(
    pools: PoolClient, pool: WorkflowHandle[Any, Any]
) -> dict[str, Any] | None:
    """The pool's account window as its ledger counts it (`ledger` query), or None."""
    spec = await pools._try_query(pool, QUERY_SPEC)
    provider = stored_spec_json((spec or {}).get("spec") or {}).get("provider") or {}
    account = provider.get("account")
    if not account:
        return None
    ledger = pools._client.get_workflow_handle(ledger_workflow_id(str(account)))
    view = await pools._try_query(ledger, QUERY_LEDGER)
    return view if isinstance(view, dict) else None


async def retired_profiles(
    pools: PoolClient, handle: WorkflowHandle[Any, Any], status: WorkflowExecutionStatus
) -> int | None:
    """What a deleted pool kept at a provider with no delete (`profilesRetired`), or None
    when it cannot be told: the result of a run that ended COMPLETED (a teardown
    continued-as-new), else the CANCELED run's `status`, which a worker replays to answer."""
    final: Any = None
    try:
        if status == WorkflowExecutionStatus.COMPLETED:
            final = await handle.result(rpc_timeout=QUERY_TIMEOUT)
        else:
            final = await pools._try_query(handle, QUERY_STATUS)
    except Exception:  # the pool is deleted: only this count is unknown
        return None
    if not isinstance(final, dict):
        return None
    return int(final.get("profilesRetired") or 0)
