"""`AccountLedger`: one entity workflow per provider account, id `devicepool-account/<name>`.

The provider accepts at most C creates in any sliding window of W seconds per
account. The ledger hands out create permits so that every create of the
account, from any pool and any worker process, stays inside that window, and
the whole capacity of a window is usable at once (a 20-device scale-up goes
out in one burst instead of one create every 3 s). The first request after an
idle spell waits `margin` before anything is dealt, so pools that start growing
at the same moment share the very first window too.

Accounting (a sliding window, like the provider's):
- a permit is *outstanding* from its grant until the batch reports the create
  finished (`permits_used`); an outstanding permit always counts;
- a used permit counts until `done_at + W + margin`. `done_at` is the batch's
  workflow time after the create activity returned, so it is never earlier
  than the moment the provider accepted the create: the window can only be
  over-estimated, never under. `margin` covers clock skew with the provider.
- an outstanding permit whose batch never reports (terminated by hand) counts
  until its lease (the create's whole retry budget) ends, then for W more.

free = C − counted; the ledger grants all of it at once and sleeps on a durable
timer until the earliest counted permit expires.

Fairness: each round's free permits are dealt one at a time round-robin over
the requesting pools (replacement requests first, then growth), FIFO between
one pool's requests; the starting pool rotates, so no pool waits for another's
whole scale-up.

The first window too: a pool that is about to grow (just created, or its
replicas raised) says so at the start of its pass (`expect_request`), before
it has observed, planned and started a batch. Nothing is dealt while such an
announced request is still on its way (at most its `ttl_seconds`), so pools
applied together all take part in the first round, however long their first
passes take on a busy worker. A lone pool waits for nobody: its own request
settles its announcement.

Adapting: a create that still meets a 429 (another tool on the same account, a
real limit lower than configured) is reported by the activity
(`rate_limited`): the ledger stops granting until `Retry-After` has passed and
restarts slowly. Slow start (as Kubernetes' ReplicaSet controller): after a
429 or a create that failed for good, at most `allowance` permits may be
outstanding; the allowance starts at 1 and doubles with every report of only
successful creates, back up to C.

Messages: signals `configure` (`LedgerConfig`, from each worker at startup),
`expect_request` (`PermitIntent`), `request_permits` (`PermitRequest`),
`cancel_permits` (request id),
`permits_used` (`PermitsUsed`), `rate_limited` (`RateLimitedReport`); it sends
`permits_granted` (`PermitGrant`) to the requesting workflow. Query `ledger`.

Continue-as-new when Temporal suggests it, carrying `LedgerState`. Idle (no
request waiting, nothing counted) it sits in one `wait_condition` without a
timer: zero history events.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field
from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import LEDGER_HOLD
    from devicepool.activities.models import LedgerConfig, LedgerInput, RateLimitedReport
    from devicepool.api.base import CamelModel
    from devicepool.api.names import (
        QUERY_LEDGER,
        SIGNAL_LEDGER_CONFIGURE,
        SIGNAL_PERMIT_CANCEL,
        SIGNAL_PERMIT_INTENT,
        SIGNAL_PERMIT_REQUEST,
        SIGNAL_PERMITS_GRANTED,
        SIGNAL_PERMITS_USED,
        SIGNAL_RATE_LIMITED,
        WORKFLOW_ACCOUNT_LEDGER,
    )


class PermitRequest(CamelModel):
    """A batch asks for `count` create permits; grants come back by signal."""

    request_id: str
    requester: str  # workflow id to signal `permits_granted` to
    pool: str
    count: int = Field(ge=1)
    replacement: bool = False
    # How long one create may keep its permit without reporting (its retry budget).
    lease_seconds: float = Field(default=600.0, gt=0)


class PermitIntent(CamelModel):
    """A pool announces a permit request on its way (`expecting`), or withdraws it."""

    pool: str
    expecting: bool = True
    # How long the ledger holds the round for the announced request at most.
    ttl_seconds: float = Field(default=5.0, gt=0, le=60)


class PermitGrant(CamelModel):
    request_id: str
    grant_id: str
    count: int


class PermitsUsed(CamelModel):
    """Every permit of a grant is accounted for: when each create finished, and failures."""

    grant_id: str
    done_at: list[datetime] = Field(default_factory=list)
    failed: int = 0
    # Permits handed back without a create (more than the batch still needed,
    # or it was cancelled first): they leave the window at once.
    unused: int = 0


class Outstanding(CamelModel):
    request_id: str
    pool: str
    count: int
    lease_until: datetime


class LedgerStats(CamelModel):
    granted: int = 0
    used: int = 0
    failed: int = 0
    rate_limited_reports: int = 0


class LedgerState(CamelModel):
    config: LedgerConfig = Field(default_factory=LedgerConfig)
    queue: list[PermitRequest] = Field(default_factory=list)
    outstanding: dict[str, Outstanding] = Field(default_factory=dict)
    # Expiry time of every used permit still counted in the window.
    window: list[datetime] = Field(default_factory=list)
    paused_until: datetime | None = None
    # After an idle spell the first request waits `margin` so that requests of
    # pools growing at the same moment share the first window.
    hold_until: datetime | None = None
    # pool -> until when a request it announced is waited for
    intents: dict[str, datetime] = Field(default_factory=dict)
    allowance: int | None = None  # None: the full capacity (no slow start in progress)
    next_grant: int = 0
    last_pool: str | None = None
    stats: LedgerStats = Field(default_factory=LedgerStats)


@workflow.defn(name=WORKFLOW_ACCOUNT_LEDGER)
class AccountLedgerWorkflow:
    @workflow.init
    def __init__(self, input: LedgerInput) -> None:
        self._account = input.account
        self._s = LedgerState.model_validate(input.state) if input.state else LedgerState()
        if input.config is not None:
            self._s.config = input.config
        self._dirty = False
        self._details = ""

    @workflow.run
    async def run(self, input: LedgerInput) -> None:
        while True:
            hold = self._s.hold_until
            if hold is not None and hold > workflow.now() and self._s.queue:
                # Let pools that start growing at the same moment share the first
                # window. A local activity: a server timer would take ~1 s.
                await workflow.execute_local_activity(
                    LEDGER_HOLD,
                    (hold - workflow.now()).total_seconds(),
                    start_to_close_timeout=timedelta(seconds=10),
                    summary="gather simultaneous requests",
                )
                self._s.hold_until = None
            if self._s.queue and self._pending_intents():
                # A pool that said it is about to ask has not yet: deal it in.
                expires = min(self._s.intents.values())
                try:
                    await workflow.wait_condition(
                        lambda: not self._pending_intents(),
                        timeout=max(expires - workflow.now(), timedelta(milliseconds=1)),
                        timeout_summary="wait for announced requests",
                    )
                except TimeoutError:
                    pass
                continue
            await self._grant_round()
            self._publish_details()
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    LedgerInput(account=self._account, state=self._s.to_json_dict())
                )
            self._dirty = False
            wake = self._next_wake()
            if wake is None:
                await workflow.wait_condition(lambda: self._dirty)
            else:
                timeout = max(wake - workflow.now(), timedelta(milliseconds=1))
                try:
                    await workflow.wait_condition(
                        lambda: self._dirty, timeout=timeout, timeout_summary="next window"
                    )
                except TimeoutError:
                    pass

    # ------------------------------------------------------------------ accounting

    def _expire(self, now: datetime) -> None:
        s = self._s
        window = timedelta(seconds=s.config.window_seconds + s.config.margin_seconds)
        for grant_id, out in list(s.outstanding.items()):
            if out.lease_until <= now:
                # Never reported: count it as used at the end of its lease.
                s.window.extend([out.lease_until + window] * out.count)
                del s.outstanding[grant_id]
        s.window = sorted(t for t in s.window if t > now)
        if s.paused_until is not None and s.paused_until <= now:
            s.paused_until = None

    def _pending_intents(self) -> bool:
        """Whether an announced request is still due (expired announcements are dropped)."""
        now = workflow.now()
        s = self._s
        s.intents = {pool: until for pool, until in s.intents.items() if until > now}
        return bool(s.intents)

    def _counted(self) -> int:
        return len(self._s.window) + sum(o.count for o in self._s.outstanding.values())

    def _free(self, now: datetime) -> int:
        s = self._s
        if s.paused_until is not None and s.paused_until > now:
            return 0
        free = s.config.capacity - self._counted()
        if s.allowance is not None:
            in_flight = sum(o.count for o in s.outstanding.values())
            free = min(free, s.allowance - in_flight)
        return max(0, free)

    def _next_wake(self) -> datetime | None:
        s = self._s
        if not s.queue:
            # Nobody waits: nothing to compute until a message arrives.
            return None
        times: list[datetime] = []
        if s.paused_until is not None:
            times.append(s.paused_until)
        if s.window:
            times.append(s.window[0])
        times.extend(o.lease_until for o in s.outstanding.values())
        return min(times) if times else None

    def _deal(self, free: int) -> dict[str, int]:
        """Split `free` permits: replacements first, round-robin over pools, FIFO per pool."""
        s = self._s
        dealt: dict[str, int] = {}
        remaining = {r.request_id: r.count for r in s.queue}
        for replacement in (True, False):
            if free <= 0:
                break
            by_pool: dict[str, list[PermitRequest]] = {}
            for r in s.queue:
                if r.replacement == replacement:
                    by_pool.setdefault(r.pool, []).append(r)
            pools = list(by_pool)
            if not pools:
                continue
            # Start after the pool served last, so remainders rotate between rounds.
            if s.last_pool in pools:
                i = pools.index(s.last_pool) + 1
                pools = pools[i:] + pools[:i]
            while free > 0 and pools:
                for pool in list(pools):
                    if free <= 0:
                        break
                    waiting = [r for r in by_pool[pool] if remaining[r.request_id] > 0]
                    if not waiting:
                        pools.remove(pool)
                        continue
                    first = waiting[0]
                    remaining[first.request_id] -= 1
                    dealt[first.request_id] = dealt.get(first.request_id, 0) + 1
                    s.last_pool = pool
                    free -= 1
        return dealt

    async def _grant_round(self) -> None:
        now = workflow.now()
        self._expire(now)
        s = self._s
        free = self._free(now)
        if free <= 0 or not s.queue:
            return
        dealt = self._deal(free)
        requests = {r.request_id: r for r in s.queue}
        sends = []
        for request_id, count in dealt.items():
            request = requests[request_id]
            grant_id = f"{s.next_grant}"
            s.next_grant += 1
            s.outstanding[grant_id] = Outstanding(
                request_id=request_id,
                pool=request.pool,
                count=count,
                lease_until=now + timedelta(seconds=request.lease_seconds),
            )
            request.count -= count
            s.stats.granted += count
            sends.append((grant_id, request, count))
        s.queue = [r for r in s.queue if r.count > 0]

        async def send(grant_id: str, request: PermitRequest, count: int) -> None:
            try:
                await workflow.get_external_workflow_handle(request.requester).signal(
                    SIGNAL_PERMITS_GRANTED,
                    PermitGrant(request_id=request.request_id, grant_id=grant_id, count=count),
                )
            except FailureError as err:
                # The batch is gone: it never got these permits, and wants no more.
                workflow.logger.info("ledger %s: %s is gone: %s", self._account, request, err)
                s.outstanding.pop(grant_id, None)
                s.stats.granted -= count
                s.queue = [r for r in s.queue if r.requester != request.requester]

        await asyncio.gather(*(send(*args) for args in sends))

    # ------------------------------------------------------------------ messages

    @workflow.signal(name=SIGNAL_LEDGER_CONFIGURE)
    def configure(self, config: LedgerConfig) -> None:
        self._s.config = config
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMIT_INTENT)
    def expect_request(self, intent: PermitIntent) -> None:
        s = self._s
        asked = any(r.pool == intent.pool for r in s.queue) or any(
            o.pool == intent.pool for o in s.outstanding.values()
        )
        if intent.expecting and not asked:
            # (A request that overtook its announcement has settled it already.)
            s.intents[intent.pool] = workflow.now() + timedelta(seconds=intent.ttl_seconds)
        elif not intent.expecting:
            s.intents.pop(intent.pool, None)
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMIT_REQUEST)
    def request_permits(self, request: PermitRequest) -> None:
        s = self._s
        s.intents.pop(request.pool, None)
        # A re-sent request (the batch heard nothing for long) replaces the queued
        # one: its count is what the batch still needs. Surplus grants come back
        # as `unused`.
        if not s.queue and not s.outstanding and not s.window:
            s.hold_until = workflow.now() + timedelta(seconds=s.config.margin_seconds)
        s.queue = [r for r in s.queue if r.request_id != request.request_id]
        s.queue.append(request)
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMIT_CANCEL)
    def cancel_permits(self, request_id: str) -> None:
        self._s.queue = [r for r in self._s.queue if r.request_id != request_id]
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMITS_USED)
    def permits_used(self, used: PermitsUsed) -> None:
        s = self._s
        out = s.outstanding.pop(used.grant_id, None)
        if out is None:
            return  # already expired by its lease (and counted) or a duplicate report
        window = timedelta(seconds=s.config.window_seconds + s.config.margin_seconds)
        spent = max(0, out.count - used.unused)
        done = list(used.done_at)[:spent]
        # A create not accounted for by time counts from now (never too early).
        done += [workflow.now()] * (spent - len(done))
        s.window.extend(t + window for t in done)
        s.window.sort()
        s.stats.used += spent
        s.stats.failed += used.failed
        if used.failed:
            s.allowance = 1
        elif s.allowance is not None:
            s.allowance *= 2
            if s.allowance >= s.config.capacity:
                s.allowance = None
        self._dirty = True

    @workflow.signal(name=SIGNAL_RATE_LIMITED)
    def rate_limited(self, report: RateLimitedReport) -> None:
        s = self._s
        until = workflow.now() + timedelta(seconds=report.retry_after_seconds)
        if s.paused_until is None or until > s.paused_until:
            s.paused_until = until
        s.allowance = 1
        s.stats.rate_limited_reports += 1
        self._dirty = True

    @workflow.query(name=QUERY_LEDGER)
    def ledger(self) -> dict[str, Any]:
        s = self._s
        return {
            "account": self._account,
            **s.config.model_dump(by_alias=True),
            "counted": self._counted(),
            "outstanding": sum(o.count for o in s.outstanding.values()),
            "waiting": {r.request_id: r.count for r in s.queue},
            "expecting": sorted(s.intents),
            "pausedUntil": s.paused_until.isoformat() if s.paused_until else None,
            "allowance": s.allowance,
            "stats": s.stats.model_dump(by_alias=True),
        }

    def _publish_details(self) -> None:
        s = self._s
        c = s.config
        details = (
            f"account `{self._account}` · {c.capacity} creates per {c.window_seconds:g}s "
            f"(+{c.margin_seconds:g}s margin)\n\n"
            f"counted in window: {self._counted()} · waiting requests: {len(s.queue)} "
            f"({sum(r.count for r in s.queue)} permits) · granted so far: {s.stats.granted}"
            + (f" · paused until {s.paused_until.isoformat()}" if s.paused_until else "")
            + (f" · slow start: {s.allowance}" if s.allowance is not None else "")
        )
        if details != self._details:
            self._details = details
            workflow.set_current_details(details)
