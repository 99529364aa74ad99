"""`DevicePool`: one long-running workflow per pool, id `devicepool/<name>`.

One pass reads observe → decide → act → publish → wait (`_pass`). Observe lists
the pool's devices and applies the news to the carried `PoolState` through its
reducers (`state.py`); decide is pure (`decide.py`); act carries the commands
out; publish writes status, search attributes and UI details when they changed
(`status.py`); wait is the watch (`watch.py`) or a timer when a deadline exists.
Messages (updates, signals, queries) are in `handlers.py`; deletion is the
finalizer (`finalizer.py`). Continue-as-new hands `PoolState` on whole when
Temporal suggests it, after handlers finished and child starts resolved;
children are abandoned at the hand-over and report to the next run.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    # Scheduled disruption budgets read their cron with it, lazily: loaded with the
    # workflow, or the sandbox refuses it as an import after the initial load.
    import cronsim  # noqa: F401

    from devicepool.activities import models as am
    from devicepool.api import names
    from devicepool.api.errors import ErrorType
    from devicepool.api.v1beta1 import DevicePoolStatus, Phase
    from devicepool.workflows.pool import calls, children, finalizer
    from devicepool.workflows.pool import events as say
    from devicepool.workflows.pool import status as st
    from devicepool.workflows.pool.decide import BatchOrder, Decision, decide, wake_after
    from devicepool.workflows.pool.device_control import DeviceControl
    from devicepool.workflows.pool.fates import Fate
    from devicepool.workflows.pool.handlers import PoolMessages
    from devicepool.workflows.pool.lifecycle import Lifecycle, protected_now
    from devicepool.workflows.pool.messages import PoolInput
    from devicepool.workflows.pool.plan import COUNTED_STATUSES, Plan
    from devicepool.workflows.pool.slots import SlotBook, observed_slots
    from devicepool.workflows.pool.state import (
        PoolState,
        Said,
        billed_devices,
        leaving_by_report,
        watched_devices,
    )
    from devicepool.workflows.pool.watch import DeviceWatch, Observations
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.cancellation import raise_if_cancelled
    from devicepool.workflows.shared.errors import error_message, problem
    from devicepool.workflows.shared.placement import REREAD_NODES_PATCH, misplaced, node_problem
    from devicepool.workflows.shared.protocol import HealthConfig, ProvisionBatchInput


# Since the provider calls of an account served by a node worker go to that node:
# a run reads the worker's settings before its first provider call.
SETTINGS_FIRST_PATCH = "settings-before-provider-calls"
# The health check is told the pool's `spec.reserve.keep` (its replacements honour it).
HEALTH_RESERVE_PATCH = "health-reserve-keep"
# The devices a pass terminated leave its view at once, and its status is the plan made
# after them. v0.1.0 kept them as members until a listing said otherwise: a pass with no
# listing in between terminated them again, and the next listing upserted the counts.
TERMINATED_LEAVE_PATCH = "terminated-devices-leave-the-pass"
# A spec change while a pass awaits its terminations leaves the decided batches to the
# next pass (same keys); v0.1.0 took the creates from its book once the terminations
# returned: under the new generation's child ids and keys (retries under their own, none
# of an older create body).
RESPEC_HOLDS_BATCHES_PATCH = "respec-during-terminations-holds-batches"
# A pass's creates are split into batches (replacements first, in batches of their own) as
# decided, before its terminations; v0.1.0 split them once the terminations returned, with
# what was owed then: a health report in between made it start a replacement batch more.
OWED_SPLIT_AS_DECIDED_PATCH = "batches-split-as-decided"


@workflow.defn(name=names.WORKFLOW_DEVICE_POOL)
class DevicePoolWorkflow(PoolMessages, DeviceControl):
    """The loop: observe → decide → act → publish → wait; deletion runs the finalizer."""

    @workflow.init
    def __init__(self, input: PoolInput) -> None:
        self._metadata, self._spec = input.metadata, input.spec
        self.s = input.state or PoolState(
            status=DevicePoolStatus(desired_replicas=input.spec.replicas), announce=True
        )
        # Settings given in the input (tests, a caller overriding the worker) are
        # kept across continue-as-new; otherwise each run re-reads the worker's.
        self._settings, self._settings_pinned = input.settings, input.settings is not None
        # The listing the last run handed over stands until this run's first one lands.
        self._devices = am.devices_from_rows(self.s.listing, pool=input.metadata.name)
        self.s.listing = []
        # Whether the health check is told `spec.reserve.keep` (`HEALTH_RESERVE_PATCH`).
        self._tell_reserve = False
        self.s.health_told = self.s.health_told or self._health_config()
        self._observations = Observations()
        self._watch = DeviceWatch(self._observations)
        # What this run knows and the next looks up again: the listing's error
        # (None: it worked), unknown references (None: not checked yet).
        self._observe_problem: str | None = None
        self._refs_problems: list[str] | None = None
        # Their check failed (a node worker took no call): no create until it works.
        self._refs_unchecked = False
        self._neighbours = children.Neighbours(pool=self._name, account=self._account)
        self._need_observe = True
        # Why the next pass is due: a message that needs a fresh listing
        # (`_dirty`), one that does not (`_replan`: a health report).
        self._dirty = self._replan = False
        self._deleting = self.s.deleting
        self._reported_gone: set[str] = set()  # terminated, by the health check's word
        # Of those, the ones still listed: they bill until gone (a cap or surge counts them).
        self._reported_leaving: list[am.DeviceInfo] = []
        self._retry_terminations = False  # a scale-down's termination failed
        self._details = ""
        self._announced = False  # told the ledger in this pass (`PoolState.announce`)

    @workflow.run
    async def run(self, input: PoolInput) -> dict[str, Any]:
        if self.s.created_at is None:
            self._happened(say.created(self._spec.replicas))
            self.s.created_at = workflow.now()
        if self.s.deleting:
            # Continued-as-new while deleting: finish the finalizer, then end.
            if self._settings is None:
                await self._read_settings()
            await self._delete()
            return self.s.status.to_json_dict()
        try:
            while True:
                await self._pass()
        except (asyncio.CancelledError, ActivityError):
            # A deletion can also surface as the failure of an activity it cancelled.
            if workflow.cancellation_reason() is None:
                raise
            await self._delete()
            raise

    async def _pass(self) -> None:
        raise_if_cancelled()  # a deletion an awaited activity absorbed
        # Reports apply only against an observation that started after they arrived.
        created_mark, done_mark = self.s.slots.inbox.mark()
        if self.s.announce:
            self.s.announce, self._announced = False, True
            self._neighbours.tell_ledger(expecting=True)
        await self._observe_all()
        if not self._tell_reserve and self._spec.reserve is not None:
            # Runs from before told the health check no reserve: they replay as they were.
            self._tell_reserve = workflow.patched(HEALTH_RESERVE_PATCH)
        self._neighbours.ensure_health(self.s, self.settings, self._health_config())
        self._take_reports(created_mark, done_mark)
        await children.check_batches(self.s.slots, pool=self._name, every=self._check_every)
        await self._neighbours.sync_health(self.s, self._health_config())
        await self._probe_region()
        raise_if_cancelled()
        self._expire()
        decision = self._decide()
        await self._act(decision)
        # What the status shows is the pool after its terminations (runs from v0.1.0: before).
        plan = decision.plan
        if decision.terminate and workflow.patched(TERMINATED_LEAVE_PATCH):
            plan = self._decide(act=False).plan
        if self._announced:
            self._announced = False
            if self._observe_problem is not None or not decision.plan.create:
                self._neighbours.tell_ledger(expecting=False)
        raise_if_cancelled()
        self._publish(plan)
        if versions.hand_over_due():
            await self._continue_as_new()
        self._need_observe = await self._wait(plan)

    # ------------------------------------------------------------------ observe

    async def _observe_all(self) -> None:
        """One round trip for everything the pass must know, not one each."""
        looks = []
        if self._settings is None:
            # The settings say which node worker serves the account (`account_nodes`),
            # so the provider calls wait for them; runs from before read all at once.
            if workflow.patched(SETTINGS_FIRST_PATCH):
                await self._read_settings()
            else:
                looks.append(self._read_settings())
        if self._refs_problems is None:
            looks.append(self._check_refs())
        if self._need_observe:
            looks.append(self._observe())
        await asyncio.gather(*looks)

    async def _read_settings(self) -> None:
        self._settings = await calls.read_settings()

    async def _check_refs(self) -> None:
        proxy = self._spec.proxy
        try:
            self._refs_problems = await calls.check_refs(
                self._account,
                proxy.pool_ref if proxy else None,
                self._spec.region,
                platform=self._spec.platform.value,
                node=self._node,
            )
        except ActivityError as err:
            # Only a node worker that takes no call gets here (a node's calls are the
            # only ones bounded): not checked, so no create, checked again next pass.
            self._refs_problems, self._refs_unchecked = None, True
            workflow.logger.warning("pool %s: references not checked: %s", self._name, err)
            return
        self._refs_unchecked = False
        if self._refs_problems:  # said each time it is checked again (repeats are counted)
            reason, message = st.refs_problem(self._refs_problems)
            self._happened(say.Happened(reason, message, warning=True))

    async def _observe(self) -> None:
        number = self._observations.begin()
        try:
            devices = await calls.list_devices(self._account, self._name, node=self._node)
        except ActivityError as err:
            # Keep the last observation; never create or terminate on a guess.
            workflow.logger.warning("pool %s: cannot list devices: %s", self._name, err)
            said = node_problem(err, self._node) or problem(err)
            if self._observe_problem != said:
                self._happened(say.Happened("ListFailed", said, warning=True))
            self._observe_problem = said
            if (
                misplaced(err)
                and not self._settings_pinned
                and workflow.patched(REREAD_NODES_PATCH)
            ):
                self._settings = None  # the next pass reads where the account's calls go now
            return
        if self._observe_problem is not None:
            self._happened(say.Happened("Listed", "the pool's devices are listed again"))
        self._observe_problem = None
        if self._observations.accept(number):
            self._take_listing(devices)

    def _take_listing(self, devices: list[am.DeviceInfo]) -> None:
        self._devices = self.s.take_listing(devices, reported_gone=self._reported_gone)
        self._reported_leaving = leaving_by_report(devices, self._reported_gone)

    def _take_reports(self, created_mark: int, done_mark: int) -> None:
        created = self.s.slots.inbox.created[:created_mark]
        self._happened(*say.batches_settled(self.s.slots, created))
        self.s.slots.settle_created(created_mark, listed=(d.id for d in self._devices))
        for report in self.s.slots.finish(done_mark):
            self._said(
                self.s.take_report(
                    report, region=self._spec.region, settings=self.settings, now=workflow.now()
                )
            )

    async def _probe_region(self) -> None:
        """When a back-off ends, ask the provider about the region before creating again."""
        backoff, now = self.s.backoff, workflow.now()
        if not backoff.probe_due(now):
            return
        try:
            answer = await calls.region_status(self._account, self._spec.region, node=self._node)
            failed = False
        except ActivityError as err:
            answer, failed = error_message(err), True
        region, settings = self._spec.region, self.settings
        if backoff.probed(answer, failed=failed, region=region, settings=settings, now=now):
            self._happened(say.backed_off(backoff))
        else:
            self._happened(say.region_up(region, answer))

    # ------------------------------------------------------------------ decide / act

    def _decide(self, *, act: bool = True) -> Decision:
        """This pass's decision (`act` False: only the plan, as the status shows it)."""
        life = self._life()
        return decide(
            pool=self._name,
            replicas=self._spec.replicas,
            generation=self.s.generation,
            devices=[*self._devices, *self._reported_leaving],
            doomed=self.s.doomed,
            slots=self.s.slots,
            observed_slots=observed_slots(
                (d.labels for d in self._devices), names.LABEL_SLOT, children.incarnation()
            ),
            replacements_owed=self.s.replacements_owed,
            settings=self.settings,
            now=workflow.now(),
            allow_create=not self._refs_problems
            and not self._refs_unchecked
            and not self.s.backoff.active(workflow.now()),
            act=act and self._observe_problem is None,
            cap=self._spec.spend_cap.devices_allowed(self._price) if self._spec.spend_cap else None,
            retire=life.retire(),
            protected=life.protected(),
            rolling=self.s.rolling,
            unavailable=life.limits()[1],
            scale_down_limit=life.scale_down_limit(),
            surge=life.surge(),
            reasons=life.reasons(),
            left=life.left(),
        )

    def _life(self) -> Lifecycle:
        return Lifecycle(self._spec, self.s, self._devices, workflow.now())

    def _expire(self) -> None:
        if self._observe_problem is None:  # on a fresh listing only
            self._happened(*self._life().advance())

    async def _act(self, decision: Decision) -> None:
        """Withdrawals, then terminations, then batches: the decision's order."""
        book, owed = self.s.slots, self.s.replacements_owed  # what the decision was made on
        self.s.slots, self.s.replacements_owed = decision.slots, decision.replacements_owed
        for batch_id, slots in decision.withdraw.items():
            self._neighbours.withdraw(batch_id, slots)
        if decision.terminate:
            await self._terminate(
                decision.terminate,
                only_if_idle=decision.only_if_idle,
                reasons=decision.reasons,
                first=decision.first,
            )
            removed = [d for d in decision.plan.remove_failed if d not in self.s.doomed]
            self.s.fates.set(removed, Fate.REMOVED_FAILED)
        batches = decision.batches
        # What a v0.1.0 run owed as it took these creates: once the terminations returned.
        owed_then = owed + self.s.replacements_owed - decision.replacements_owed
        if batches and self.s.replacements_owed != decision.replacements_owed:
            # Owed more since the decision (a health report during the terminations):
            # this pass's batches stand as decided, the next pass serves the rest.
            batches = self._split_as_v0_1_0(decision, book, owed_then)
        if batches and self.s.generation != decision.generation:
            if workflow.patched(RESPEC_HOLDS_BATCHES_PATCH):
                # The spec changed while terminating: these batches' keys and body would
                # disagree. Their slots are planned again (same keys) by the next pass.
                for order in batches:
                    self.s.slots.lost(order.child_id)
                    self.s.replacements_owed += len(order.slots) if order.replacement else 0
                self._dirty, batches = True, []
            else:
                batches = self._as_v0_1_0_started(decision, book, owed_then, batches)
        for order in batches:
            self._happened(say.batch_started(len(order.slots), replacement=order.replacement))
            input = children.batch_input(
                pool=self._name,
                spec=self._spec,
                settings=self.settings,
                generation=order.generation,
                slots=order.slots,
                replacement=order.replacement,
            )
            # Not awaited: the child reports through signals, to this run or the next.
            self._neighbours.later(self._start_child(order.child_id, input))

    def _split_as_v0_1_0(self, decision: Decision, book: SlotBook, owed: int) -> list[BatchOrder]:
        """The decision's batches, or those a v0.1.0 run started instead (`book`: what the
        decision was made on; `owed`: what was owed once the terminations returned).
        v0.1.0 split the creates then, with what was owed then and the listing as it stood."""
        orders, taken, left = self._taken_as_v0_1_0(decision, book, owed, decision.generation)
        live = self.s.slots
        if (
            orders == decision.batches
            and left == self.s.replacements_owed
            and taken.retry_slots == live.retry_slots
        ) or workflow.patched(OWED_SPLIT_AS_DECIDED_PATCH):
            return decision.batches
        return self._adopt_as_v0_1_0(decision.batches, orders, taken, left)

    def _as_v0_1_0_started(
        self, decision: Decision, book: SlotBook, owed: int, batches: list[BatchOrder]
    ) -> list[BatchOrder]:
        """The batches a v0.1.0 run started after a spec change during the terminations, in
        place of `batches` (`book`: what the decision was made on; `owed`: what was owed
        once the terminations returned): taken then, under the new generation's child ids,
        fresh slots under its keys and retried ones under their own, from a book whose new
        create body no longer retries older keys."""
        orders, taken, left = self._taken_as_v0_1_0(decision, book, owed, self.s.generation)
        return self._adopt_as_v0_1_0(batches, orders, taken, left)

    def _taken_as_v0_1_0(
        self, decision: Decision, book: SlotBook, owed: int, generation: int
    ) -> tuple[list[BatchOrder], SlotBook, int]:
        """v0.1.0's `_start_batch` loop once the terminations returned, on a copy of `book`
        as v0.1.0 had it then (its withdrawals asked, the create body of now): the batches,
        the book after them, and what is still owed."""
        book = book.model_copy(deep=True)
        book.body_generation = self.s.slots.body_generation
        for batch_id, slots in decision.withdraw.items():
            withdrawn = book.batch(batch_id)
            if withdrawn is not None:
                withdrawn.withdrawing += slots
        observed = observed_slots(
            (d.labels for d in self._devices), names.LABEL_SLOT, children.incarnation()
        )
        orders: list[BatchOrder] = []
        count = decision.plan.create
        while count > 0:
            n = min(self.settings.provision_batch_size, count, owed or count)
            taken_generation, taken = book.take(n, generation=generation, observed_slots=observed)
            child_id = names.provision_workflow_id(self._name, generation, book.next_batch_number())
            book.open_batch(child_id, taken_generation, taken, workflow.now())
            orders.append(BatchOrder(child_id, taken_generation, taken, owed > 0))
            owed -= len(taken) if owed else 0
            count -= len(taken)
        return orders, book, owed

    def _adopt_as_v0_1_0(
        self, batches: list[BatchOrder], orders: list[BatchOrder], book: SlotBook, owed: int
    ) -> list[BatchOrder]:
        """The live book holds `orders` (taken into `book`) instead of `batches`."""
        live, replaced = self.s.slots, {order.child_id for order in batches}
        started = [b for b in book.in_flight if b.workflow_id in {o.child_id for o in orders}]
        live.in_flight = [b for b in live.in_flight if b.workflow_id not in replaced] + started
        live.next_slot, live.next_batch = book.next_slot, book.next_batch
        live.retry_slots = book.retry_slots
        self.s.replacements_owed = owed
        return orders

    async def _start_child(self, child_id: str, input: ProvisionBatchInput) -> None:
        if not await children.start_batch(child_id, input):
            self.s.slots.drop(child_id)  # planned again on the next pass
            self._dirty = True

    async def _terminate(
        self,
        device_ids: list[str],
        *,
        only_if_idle: set[str],
        reasons: dict[str, str],
        first: set[str] | None = None,
    ) -> None:
        seen = {d.id: d.idle_since for d in self._devices if d.id in only_if_idle}
        reserve = self._spec.reserve
        done = await calls.terminate_devices(
            self._account,
            device_ids,
            only_if_idle=only_if_idle,
            idle_since=seen,
            reserve_keep=reserve.keep if reserve is not None else None,
            node=self._node,
        )
        self._said(
            self.s.take_terminations(
                device_ids,
                only_if_idle=only_if_idle,
                failed=done.failed,
                skipped=done.skipped,
                devices=self._devices,
                reasons=reasons,
                first=first or set(),
            )
        )
        # What went is leaving, as the next listing will say: not counted any more.
        if workflow.patched(TERMINATED_LEAVE_PATCH):
            gone = set(device_ids) - set(done.failed) - set(done.skipped)
            self._devices = [
                d.model_copy(update={"status": am.TERMINATING}) if d.id in gone else d
                for d in self._devices
            ]
        for device_id, err in done.failed.items():
            workflow.logger.warning("terminate %s failed: %s", device_id, err)
        for device_id, why in done.skipped.items():
            workflow.logger.info("pool %s: kept %s (%s)", self._name, device_id, why)
        # A failed scale-down is planned again after a resync; a device found busy
        # since the listing is kept, and a fresh look decides again.
        self._retry_terminations = any(d in only_if_idle for d in done.failed)
        self._dirty = self._dirty or bool(done.skipped)

    # ------------------------------------------------------------------ publish / wait

    def _publish(self, plan: Plan) -> None:
        pause, now = self.s.account_pause, workflow.now()
        if pause is not None and pause.until <= now:
            self.s.account_pause = None  # over: said by the condition going back to True
        drift = self._life().drift()
        view = st.PoolView(
            spec=self._spec,
            generation=self.s.generation,
            plan=plan,
            # A batch whose creates all landed only waits for boots: its devices
            # are counted by observation (as provisioning), not as creates.
            creating=self.s.slots.creating() or plan.create > 0,
            # Members: not those on their way out (doomed, or terminating at the provider).
            device_ids=sorted(
                d.id
                for d in self._devices
                if d.id not in self.s.doomed and d.status != am.TERMINATING
            ),
            refs_problems=self._refs_problems,
            backoff=self.s.backoff,
            health=self.s.health,
            now=now,
            observe_problem=self._observe_problem,
            account_pause=self.s.account_pause,
            account_cap=self.s.account_cap,
            price_per_hour=self._price,
            paused_by_user=self.s.remediation_paused,
            protected=sorted(protected_now(self.s.protected, now)),
            drifted=len(drift) if self._spec.rollout is not None else None,
            updated=sum(
                1
                for d in self._devices
                if d.status in COUNTED_STATUSES and d.id not in self.s.doomed and d.id not in drift
            ),
        )
        billing = billed_devices(self._devices, self._reported_leaving)
        self.s.accrue(now, billing, self._price)
        self._said(self.s.publish(st.published(self.s.status, view)))
        self._show()

    async def _wait(self, plan: Plan) -> bool:
        """Wait for something worth a pass; return whether devices must be listed again."""
        if self._observe_problem is None:
            self._watch.ensure(self._watch_devices)
        now, pause, life = workflow.now(), self.s.account_pause, self._life()
        timeout = wake_after(
            now=now,
            plan=plan,
            settings=self.settings,
            deadlines=(
                self.s.backoff.until,
                pause.until if pause else None,
                life.expiry().next_at,
                life.next_window_check(
                    pending=bool(
                        self.s.rolling
                        or (self._spec.rollout is not None and life.drift())
                        or life.expiry().retire
                        or plan.blocked_surplus
                    )
                ),
                life.next_protection_end(),
            ),
            resync=bool(
                self._refs_problems
                or self.s.doomed
                or self._observe_problem is not None
                or self._retry_terminations
                or self.s.retiring
                or self.s.rolling
                # Retiring now (within the budgets): an expired device a budget holds waits
                # for the window's end (a deadline above), not for a resync.
                or life.retire()
            ),
            next_batch_check=self.s.slots.next_check_at(self._check_every),
        )
        try:
            await workflow.wait_condition(
                lambda: (
                    self._dirty or self._replan or self._watch.answered() or versions.upgrade_due()
                ),
                timeout=timeout,
                timeout_summary="next check",
            )
            timed_out = False
        except TimeoutError:
            timed_out = True
        need_observe = timed_out or self._dirty
        self._dirty = self._replan = False
        try:
            answered = self._watch.answer()
        except ActivityError as err:
            workflow.logger.warning("watch failed: %s", err)
            answered, need_observe = None, True
        if answered is not None:
            answer, news = answered
            if answer.health_ended:
                workflow.logger.warning("pool %s: health check ended; started again", self._name)
                self._happened(
                    say.Happened("HealthCheckRestarted", "the health check had ended", True)
                )
                self._neighbours.health_running = False
            if news:
                self._take_listing(answer.devices)
            else:
                workflow.logger.info("pool %s: an older watch answer dropped", self._name)
        if timed_out and self._refs_problems:
            self._refs_problems = None  # look again: the worker config may be fixed
        return need_observe

    async def _watch_devices(self) -> am.WatchDevicesResult:
        # Only once this run started (or found) the health check may it be missed.
        health = names.health_workflow_id(self._name) if self._neighbours.health_running else None
        return await calls.watch_devices(
            self._account,
            self._name,
            watched_devices(self._devices, self._reported_leaving),
            self.settings,
            health_workflow_id=health,
        )

    # ------------------------------------------------------------------ delete / hand over

    async def _delete(self) -> None:
        """The finalizer: stop provisioning, remove every device, then end."""
        if not self.s.deleting:
            self._happened(say.Happened("Deleting", "removing every device of the pool"))
        self._deleting = self.s.deleting = True
        self.s.status = self.s.status.model_copy(update={"phase": Phase.DELETING})
        self._show()
        self._watch.drop()
        teardown = asyncio.ensure_future(self._teardown())
        while not teardown.done():
            try:
                await asyncio.shield(teardown)
            except asyncio.CancelledError:
                # A second delete must not abort the finalizer halfway.
                workflow.logger.info("pool %s: already deleting", self._name)
        swept = teardown.result()
        retired = swept.retired if swept is not None else 0
        if retired:
            self._happened(say.profiles_retired(retired))
        self._happened(say.Happened("Deleted", "no device of the pool is left"))
        self.s.deleted(workflow.now(), profiles_retired=retired)
        self._show()

    async def _teardown(self) -> am.TerminatePoolResult | None:
        await workflow.wait_condition(self._neighbours.quiet)
        return await finalizer.tear_down(
            self.s.slots,
            pool=self._name,
            account=self._account,
            health_id=names.health_workflow_id(self._name),
            settings=self.settings,
            rented_anything=self.s.slots.next_slot > 0 or bool(self._devices),
            blocked=self._blocked,
            hand_over=self._hand_over_while_deleting,
        )

    def _blocked(self, reason: str, message: str) -> None:
        unknown = reason == finalizer.condition_reason(ErrorType.UNKNOWN_ACCOUNT)
        for condition in st.teardown_blocked(reason, message, unknown_account=unknown):
            self._set_condition(condition)
        self._happened(say.Happened("TeardownBlocked", f"{reason}: {message}", True))
        self._show_details()

    async def _hand_over_while_deleting(self) -> None:
        """Keep a long teardown's history bounded: continue-as-new, still deleting."""
        if versions.hand_over_due():
            await self._quiet()
            self._hand_over()

    async def _continue_as_new(self) -> None:
        await self._quiet()
        raise_if_cancelled()  # never carry a deletion into a new run
        self._watch.drop()
        self._hand_over()

    async def _quiet(self) -> None:
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() and self._neighbours.quiet()
        )

    def _hand_over(self) -> NoReturn:
        """Continue as new with the whole state and the last listing (`PoolState.listing`)."""
        settings = self._settings if self._settings_pinned else None
        self.s.listing = am.device_rows(self._devices, pool=self._name)
        versions.continue_as_new(
            PoolInput(metadata=self._metadata, spec=self._spec, settings=settings, state=self.s)
        )

    # ------------------------------------------------------------------ neighbours

    def _health_config(self) -> HealthConfig:
        health = self._spec.health
        return HealthConfig(
            max_unhealthy=health.max_unhealthy,
            replicas=self._spec.replicas,
            offline_after_seconds=health.offline_after,
            startup_timeout_seconds=health.startup_timeout,
            paused=self.s.remediation_paused,
            reserve_keep=(
                self._spec.reserve.keep
                if self._tell_reserve and self._spec.reserve is not None
                else None
            ),
        )

    def _said(self, said: Said) -> None:
        if said.warning:
            workflow.logger.warning("pool %s: %s", self._name, said.warning)
        self._happened(*said.events)

    @property
    def _check_every(self) -> timedelta:
        """How long a batch may stay quiet before the pool asks whether it still runs."""
        settings = self.settings
        return timedelta(
            seconds=2 * settings.startup_timeout_seconds + settings.batch_check_grace_seconds
        )

    @property
    def _node(self) -> str:
        """The node worker that serves the pool's account ("" for none: this queue's workers)."""
        return self.settings.node_of(self._account)

    @property
    def _price(self) -> float:
        """What one of the pool's devices costs an hour (its account's `pricePerHour`)."""
        return self.settings.price_per_hour(self._account)

    @property
    def settings(self) -> am.PoolSettings:
        """The worker's settings, with what the pool's spec sets itself (v1beta1 `health`, `scaleDown`)."""
        worker = self._settings or am.PoolSettings()
        return worker.model_copy(update=self._spec.setting_overrides())
