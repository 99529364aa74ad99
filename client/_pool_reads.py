"""What `PoolClient` reads besides a query's answer: summaries, lists, `describe`, cost, an
account's window, the profiles a teardown retired. Each is called by the method of its name.
What `get -w` holds between refreshes: `_row_watch`; which workers poll a queue: `_queue_workers`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
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
    ledger_workflow_id,
)
from devicepool.client import _row_watch
from devicepool.client._kind_sides import Side, side_of
from devicepool.client._lease_watch import read_view
from devicepool.client._queue_workers import TaskQueueWorkers as TaskQueueWorkers
from devicepool.client._queue_workers import is_served
from devicepool.client._results import PoolSummary, iso, parse_time
from devicepool.client._row_watch import WATCH_MARGIN as WATCH_MARGIN
from devicepool.client._row_watch import RowWatch
from devicepool.client._temporal_errors import QUERY_TIMEOUT
from devicepool.client._validation import validate_name
from devicepool.workflows.pool.messages import DevicesView, PoolCost
from devicepool.workflows.reconciler.events import PoolEvents
from devicepool.workflows.reconciler.lease_messages import LeasesView
from devicepool.workflows.reconciler.row_memo import Row, read_row

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
            watch.resync_at = time.monotonic() + _row_watch.RESYNC_SECONDS
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
            page_size=_row_watch.RESYNC_PAGE,
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
