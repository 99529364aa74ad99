"""`AccountLedger`: the permit ledger of one provider account, id `devicepool-account/<name>`.

Every create of the account, from any pool and worker, waits for a permit from here.

Signals in: `configure` (`LedgerConfig`, each worker at start-up), `expect_request`
(`PermitIntent`), `request_permits` (`PermitRequest`), `cancel_permits` (request id),
`permits_used` (`PermitsUsed`), `rate_limited` (`RateLimitedReport`). Out, in the
background: `permits_granted` (`PermitGrant`) to requesters, `account_paused`
(`AccountPause`) and `account_capped` (`AccountCap`) to the pools a long pause or the
account's `spendCap` holds. Query `ledger`; local activity `ledger_hold`; activity
`count_devices` (a ledger with a spendCap). Continue-as-new when suggested, carrying
`LedgerState` whole. Pure parts: `state.py`, `dealing.py`; why: docs/scaling.md,
"Rate limits".
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import LEDGER_HOLD, OrphanActivityDefinitions
    from devicepool.activities.models import LedgerConfig, RateLimitedReport
    from devicepool.activities.orphan_models import CountDevicesInput
    from devicepool.api.names import (
        QUERY_LEDGER,
        SIGNAL_ACCOUNT_CAPPED,
        SIGNAL_ACCOUNT_PAUSED,
        SIGNAL_LEDGER_CONFIGURE,
        SIGNAL_PERMIT_CANCEL,
        SIGNAL_PERMIT_INTENT,
        SIGNAL_PERMIT_REQUEST,
        SIGNAL_PERMITS_GRANTED,
        SIGNAL_PERMITS_USED,
        SIGNAL_RATE_LIMITED,
        WORKFLOW_ACCOUNT_LEDGER,
        pool_workflow_id,
    )
    from devicepool.workflows.ledger.dealing import deal, due_announcements
    from devicepool.workflows.ledger.state import Issued, LedgerInput, LedgerState, LedgerView
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.errors import tell, wait_condition
    from devicepool.workflows.shared.placement import provider_queue
    from devicepool.workflows.shared.protocol import (
        AccountCap,
        AccountPause,
        PermitIntent,
        PermitRequest,
        PermitsUsed,
    )

# How long continue-as-new waits for grants still on their way.
DELIVERY_WAIT = timedelta(seconds=60)
# One listing of the account for its spendCap (`count_devices`), all attempts.
COUNT_TIMEOUT = timedelta(seconds=60)

__all__ = ["AccountLedgerWorkflow"]


@workflow.defn(name=WORKFLOW_ACCOUNT_LEDGER)
class AccountLedgerWorkflow:
    @workflow.init
    def __init__(self, input: LedgerInput) -> None:
        self._account = input.account
        self._s = input.state or LedgerState()
        if input.config is not None:
            self._s.config = input.config
        # Per run, never carried: a message arrived since the last round, and
        # the details last published (a new run publishes its own).
        self._dirty = False
        self._details = ""
        # Grant deliveries and pause news still on their way (continue-as-new waits).
        self._sending: set[asyncio.Future[Any]] = set()

    @workflow.run
    async def run(self, input: LedgerInput) -> None:
        while True:
            await self._hold_first_window()
            if await self._await_announced():
                continue
            await self._grant_round()
            self._tell_cap_news()
            self._publish_details()
            if versions.hand_over_due():
                await workflow.wait_condition(workflow.all_handlers_finished)
                await self._deliveries_settled()
                versions.continue_as_new(LedgerInput(account=self._account, state=self._s))
            await self._wait_for_change()

    async def _hold_first_window(self) -> None:
        """After an idle spell, let pools that start growing together share the first window."""
        hold = self._s.hold_until
        if hold is not None and hold > workflow.now() and self._s.queue:
            # Replacements are dealt ahead of growth whoever else asks: a
            # window that starts with them only is dealt at once.
            if all(r.replacement for r in self._s.queue):
                self._s.hold_until = None
                return
            # A local activity: a server timer would take ~1 s.
            await workflow.execute_local_activity(
                LEDGER_HOLD,
                (hold - workflow.now()).total_seconds(),
                start_to_close_timeout=timedelta(seconds=10),
                summary="gather simultaneous requests",
            )
            self._s.hold_until = None

    async def _await_announced(self) -> bool:
        """Wait while a pool that said it is about to ask has not yet; True if it waited."""
        until = self._s.announcement_hold(workflow.now())
        if until is None:
            return False
        await wait_condition(
            lambda: not self._pending_intents(),
            timeout=max(until - workflow.now(), timedelta(milliseconds=1)),
            summary="wait for announced requests",
        )
        return True

    def _pending_intents(self) -> bool:
        """Whether an announced request is still due (expired announcements are dropped)."""
        self._s.intents = due_announcements(self._s.intents, workflow.now())
        return bool(self._s.intents)

    async def _wait_for_change(self) -> None:
        """Until a message arrives, or the earliest counted permit expires."""
        self._dirty = False
        wake = self._s.next_wake()
        timeout = None if wake is None else max(wake - workflow.now(), timedelta(milliseconds=1))
        await wait_condition(lambda: self._dirty, timeout=timeout, summary="next window")

    async def _grant_round(self) -> None:
        s = self._s
        if s.recount_due(workflow.now()):
            await self._count_devices()
        now = workflow.now()
        s.expire(now)
        free = s.free(now)
        if free <= 0 or not s.queue:
            return
        dealt = deal(s.queue, free, s.last_pool)
        s.last_pool = dealt.last_pool
        # The next round does not wait for these: a requester that is gone
        # hands its permits back whenever its delivery fails (`_send`).
        for one in s.issue(dealt.counts, now):
            self._background(self._send(one))

    async def _count_devices(self) -> None:
        """List the account for its spendCap (only a ledger with a cap ever does)."""
        mark = self._s.begin_count(workflow.now())
        try:
            counted = await workflow.execute_activity_method(
                OrphanActivityDefinitions.count_devices,
                CountDevicesInput(account=self._account),
                start_to_close_timeout=COUNT_TIMEOUT,
                schedule_to_close_timeout=COUNT_TIMEOUT,
                summary="count the account's devices for its spendCap",
                **provider_queue(self._s.config.node),
            )
        except ActivityError as err:
            # The last count stands (none yet: nothing is granted); tried again in CAP_RECOUNT.
            workflow.logger.warning(
                "ledger %s: cannot count the account's devices for its spendCap: %s",
                self._account,
                err.cause or err,
            )
            return
        self._s.counted_devices(counted.devices, mark)

    def _tell_cap_news(self) -> None:
        """Tell pools the account's spendCap newly holds, or no longer holds."""
        for pool, message in self._s.cap_news(self._account).items():
            news = AccountCap(account=self._account, reached=bool(message), message=message)
            self._background(tell(pool_workflow_id(pool), SIGNAL_ACCOUNT_CAPPED, news))

    def _background(self, send: Coroutine[Any, Any, Any]) -> None:
        """A delivery the loop does not wait for (continue-as-new does: `_sending`)."""
        task = asyncio.ensure_future(send)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _deliveries_settled(self) -> None:
        """Before continue-as-new, let grants on their way land (their failures
        hand permits back in this run), but not for ever: a lost delivery's
        permits come back with its lease."""
        if not self._sending:
            return
        if not await wait_condition(
            lambda: not self._sending, timeout=DELIVERY_WAIT, summary="grants on their way"
        ):
            workflow.logger.warning(
                "ledger %s: continuing as new with %d grant(s) undelivered",
                self._account,
                len(self._sending),
            )

    async def _send(self, issued: Issued) -> None:
        try:
            await workflow.get_external_workflow_handle(issued.request.requester).signal(
                SIGNAL_PERMITS_GRANTED, issued.grant
            )
        except FailureError as err:
            # The batch is gone: it never got these permits, and wants no more.
            workflow.logger.info("ledger %s: %s is gone: %s", self._account, issued.request, err)
            self._s.undeliverable(issued)
            self._dirty = True  # its permits are free again

    # ------------------------------------------------------------------ messages

    @workflow.signal(name=SIGNAL_LEDGER_CONFIGURE)
    def configure(self, config: LedgerConfig) -> None:
        self._s.config = config
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMIT_INTENT)
    def expect_request(self, intent: PermitIntent) -> None:
        self._s.announce(intent, workflow.now())
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMIT_REQUEST)
    def request_permits(self, request: PermitRequest) -> None:
        self._s.enqueue(request, workflow.now())
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMIT_CANCEL)
    def cancel_permits(self, request_id: str) -> None:
        self._s.cancel(request_id)
        self._dirty = True

    @workflow.signal(name=SIGNAL_PERMITS_USED)
    def permits_used(self, used: PermitsUsed) -> None:
        if self._s.record_used(used, workflow.now()):
            self._dirty = True

    @workflow.signal(name=SIGNAL_RATE_LIMITED)
    def rate_limited(self, report: RateLimitedReport) -> None:
        now = workflow.now()
        self._s.record_rate_limited(report, now)
        self._dirty = True
        until = self._s.pause_news(now)
        if until is None:
            return
        # A pause longer than a window is said on the pools it holds (a condition).
        pause = AccountPause(account=self._account, until=until, reason=self._s.paused_reason or "")
        for pool in self._s.held_pools(also=report.pool):
            self._background(tell(pool_workflow_id(pool), SIGNAL_ACCOUNT_PAUSED, pause))

    @workflow.query(name=QUERY_LEDGER)
    def ledger(self) -> LedgerView:
        return LedgerView.of(self._account, self._s)

    def _publish_details(self) -> None:
        s = self._s
        c = s.config
        details = (
            f"account `{self._account}` · {c.capacity} creates per {c.window_seconds:g}s "
            f"(+{c.margin_seconds:g}s margin)\n\n"
            f"counted in window: {s.counted()} · waiting requests: {len(s.queue)} "
            f"({sum(r.count for r in s.queue)} permits) · granted so far: {s.stats.granted}"
            + (f" · paused until {s.paused_until.isoformat()}" if s.paused_until else "")
            + (f" · slow start: {s.allowance}" if s.allowance is not None else "")
        )
        if details != self._details:
            self._details = details
            workflow.set_current_details(details)
