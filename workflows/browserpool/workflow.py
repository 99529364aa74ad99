"""`BrowserPool`: BitBrowser profiles kept on tagged node workers, id `browserpool/<name>`.

Each pass asks which node workers the selector picks are alive (`live_nodes`,
from the node registry), lists the pool's profiles on each live node (profiles
belong to the BitBrowser account, so any node lists them all; only the node a
browser runs on knows it is open), plans (`plan.py`: pure) and acts: deletes
surplus, creates what is missing on the least loaded node, opens what should
be open, one per node. Node calls go to the node's own task queue with a short
schedule-to-start, so a node that died costs a pass a few seconds, never a
hang. A live node whose listing fails (its Local API refuses the key or does
not answer) does not stop the pass: its profiles wait, the other nodes go on,
the status says which node and why (`status.py`), and past
`nodeLostAfterSeconds` without an answer it is counted lost. Cancelled
(`devicepool delete`), it deletes every profile through nodes of its
BitBrowser account (those that made or showed its profiles: `accounts.py`); a
node that is down holds the pool in Deleting with `TeardownBlocked` naming it.

Updates `apply`, `scale_update`; queries `status`, `spec`, `devices`, `events`.
Continue-as-new when suggested, carrying `BrowserPoolState`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.node_models import NodeCreateInput, NodeOpenResult
    from devicepool.activities.settings import PoolSettings
    from devicepool.api import names
    from devicepool.api.browserpool.v1beta1 import BrowserConditionType, BrowserPoolSpec
    from devicepool.api.errors import ErrorType
    from devicepool.api.labels import selector_matches
    from devicepool.api.v1alpha1 import ConditionStatus, Phase
    from devicepool.workflows.browserpool import calls
    from devicepool.workflows.browserpool.accounts import teardown_nodes, teardown_step
    from devicepool.workflows.browserpool.messages import (
        BrowserApplyRequest,
        BrowserPoolInput,
        BrowserPoolState,
        ProfileRow,
        ProfilesView,
    )
    from devicepool.workflows.browserpool.observe import (
        Observed,
        decide,
        known_nodes,
        listed_nodes,
        merge_listings,
        mixed_accounts,
        node_troubles,
        trouble_news,
    )
    from devicepool.workflows.browserpool.plan import Placement, forget_replacements
    from devicepool.workflows.browserpool.publish import details, search_attribute_updates
    from devicepool.workflows.browserpool.status import ConfigProblem, publish, teardown_status
    from devicepool.workflows.pool import event_log
    from devicepool.workflows.pool.messages import Accepted, ApplyResult, ScaleRequest
    from devicepool.workflows.pool.status import ConditionUpdate, set_condition
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.cancellation import raise_if_cancelled

# A create a node refuses for its configuration (a proxy pool it does not have): the pool
# says so (Ready=False with the reason) and tries one create this often, not every pass.
CONFIG_RETRY = timedelta(seconds=60)
# Errors of a node's configuration, not of the moment: their condition reason.
CONFIGURATION_ERRORS = {ErrorType.UNKNOWN_PROXY_POOL.value: "UnknownProxyPool"}
CONFIG_HOLD_PATCH = "browserpool-configuration-hold"
TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE


@workflow.defn(name=names.WORKFLOW_BROWSER_POOL)
class BrowserPoolWorkflow:
    @workflow.init
    def __init__(self, input: BrowserPoolInput) -> None:
        self._name = input.metadata.name
        self._metadata = input.metadata
        self._spec: BrowserPoolSpec = input.spec
        self._settings: PoolSettings | None = input.settings
        self.s = input.state or BrowserPoolState()
        if self.s.created is None:
            self.s.created = _first_known(self.s, workflow.info().workflow_start_time)
        self._rows: list[ProfileRow] = []
        self._dirty = False
        # The Web UI details last written (each run writes its own: they are not carried).
        self._details: str | None = None
        # A create refused for a node's configuration, and when the next create may be
        # tried (`CONFIG_RETRY`). Not carried: a new run tries at once.
        self._config_problem: ConfigProblem | None = None
        self._config_retry_at: datetime | None = None
        # What the last event said of each troubled node (a new run says it again, once).
        self._troubles_said: dict[str, tuple[str, str, bool]] = {}

    @workflow.run
    async def run(self, input: BrowserPoolInput) -> dict[str, Any]:
        if self._settings is None:
            self._settings = await workflow.execute_activity_method(
                DeviceActivityDefinitions.pool_settings,
                start_to_close_timeout=timedelta(seconds=10),
                summary="read the worker's intervals",
            )
        self._show()
        if not self.s.deleting:
            try:
                while True:
                    await self._pass()
                    raise_if_cancelled()  # a deletion an awaited activity absorbed
                    if versions.hand_over_due():
                        await workflow.wait_condition(workflow.all_handlers_finished)
                        raise_if_cancelled()  # never carry a deletion into a new run
                        versions.continue_as_new(self._input())
                    await self._wait()
            except (asyncio.CancelledError, ActivityError):
                if workflow.cancellation_reason() is None:
                    raise
        self.s.deleting = True
        await asyncio.shield(asyncio.ensure_future(self._teardown()))
        return self.s.status.to_json_dict()

    def _input(self) -> BrowserPoolInput:
        return BrowserPoolInput(
            metadata=self._metadata, spec=self._spec, settings=self._settings, state=self.s
        )

    @property
    def settings(self) -> PoolSettings:
        assert self._settings is not None
        return self._settings

    # ------------------------------------------------------------------ a pass

    async def _pass(self) -> None:
        """Observe, decide (`observe.decide`: pure), publish, act, publish.

        The spec and generation are the pass's: a change that lands while it lists or acts
        (an open may take minutes) is observed by the next pass, not reported done by this
        one. It publishes before its act as well, so a node's trouble (or any change) is
        not kept from the status, the search attributes, `--wait` while an open runs."""
        raise_if_cancelled()
        generation = self.s.generation
        seen = await self._observe()
        if seen is None:
            return
        placement = decide(
            seen,
            failures=self.s.failures,
            failure_limit=self._failure_limit(),
            replacements=self.s.replacements,
        )
        self._publish(seen, placement, generation=self.s.status.observed_generation)
        await self._act(placement, seen.spec)
        self._publish(seen, placement, generation=generation)

    async def _observe(self) -> Observed | None:
        """What this pass sees (None: the live nodes name two accounts, and it holds)."""
        spec = self._spec
        lost_after = self.settings.node_lost_after_seconds
        nodes = await calls.live_nodes(spec.node_selector, lost_after_seconds=lost_after)
        if mixed := mixed_accounts(nodes.alive):
            self._hold_mixed(mixed)
            return None
        self.s.account = next((n.account for n in nodes.alive if n.account), self.s.account)
        alive = {n.node for n in nodes.alive}
        lost = {n.node for n in nodes.lost}
        everywhere = {
            n.node: n.account
            for n in (await calls.live_nodes({}, lost_after_seconds=lost_after)).alive
        }
        unselected, listed = listed_nodes(
            everywhere, alive=alive, known=self.s.nodes, account=self.s.account
        )
        profiles, failed, answered = merge_listings(await calls.list_on(listed, self._name))
        raise_if_cancelled()
        holders = {p.node for p in profiles}
        self.s.nodes, self.s.groups = known_nodes(
            self.s.nodes, self.s.groups, live=everywhere, answered=answered, holders=holders
        )
        if answered:  # a listing shows every profile of the account
            self.s.replacements = forget_replacements(
                self.s.replacements, profiles, nodes=set(everywhere) | alive | lost
            )
        now = workflow.now()
        troubles, self.s.unreachable_since = node_troubles(
            failed,
            nodes.alive,
            self.s.unreachable_since,
            now=now,
            lost_after=timedelta(seconds=lost_after),
        )
        news, self._troubles_said = trouble_news(troubles, self._troubles_said)
        for reason, message in news:
            self._event(reason, message, warning=True)
        return Observed(
            spec=spec,
            now=now,
            profiles=tuple(profiles),
            alive=frozenset(alive),
            lost=frozenset(lost),
            unselected=frozenset(unselected),
            failed=frozenset(failed),
            troubles=troubles,
        )

    async def _act(self, placement: Placement, spec: BrowserPoolSpec) -> None:
        # Whether anything was done: only then does the next pass come soon (2 s) to see
        # it. A held create, a create, delete or open that failed waits for the resync.
        done = False
        for pid, node in placement.delete:
            try:
                await calls.delete_on(node, pid)
                self.s.failures.pop(pid, None)
                done = True
                self._event("Deleted", f"profile {pid} on {node}: {placement.why[pid]}")
            except ActivityError as err:
                self._event("DeleteFailed", f"profile {pid} on {node}: {calls.cause(err)}", True)
            raise_if_cancelled()  # a delete the awaited call absorbed: teardown, now
        # A slot held on a lost node: what is made for it is a replacement (the original
        # wins if its node comes back).
        replacing = {p.slot for p in placement.lost}
        for slot, node in self._creates(placement):
            try:
                made = await calls.create_on(node, self._create_input(spec, slot))
                self.s.made_profiles = True
                self.s.nodes.setdefault(node, "")  # named by the next listing
                if slot in replacing and made.id not in self.s.replacements:
                    self.s.replacements.append(made.id)  # oldest first (plan.py)
                self._config_problem = None
                done = True
                self._event("Created", f"slot {slot} on {node}: {made.id}")
            except ActivityError as err:
                self._event("CreateFailed", f"slot {slot} on {node}: {calls.cause(err)}", True)
                reason = CONFIGURATION_ERRORS.get(calls.error_type(err) or "")
                if reason is not None and workflow.patched(CONFIG_HOLD_PATCH):
                    message = f"node {node}: {calls.cause(err)}"
                    self._config_problem = ConfigProblem(
                        reason, message, CONFIG_RETRY.total_seconds()
                    )
                    self._config_retry_at = workflow.now() + CONFIG_RETRY
                    break  # the next creates would meet the same refusal
            finally:
                raise_if_cancelled()
        # A delete absorbed by the last call: no open starts (it may take minutes, on a
        # profile teardown deletes).
        raise_if_cancelled()
        # One open per node (plan.py), the nodes side by side: each may take minutes.
        opened = await asyncio.gather(*(self._open(pid, node) for pid, node in placement.open))
        # A profile opened again right after an open that worked (its browser died at once)
        # is not news: the next pass waits for the resync.
        fresh = {pid for (pid, _), ok in zip(placement.open, opened, strict=True) if ok}
        self._dirty = self._dirty or done or bool(fresh - set(self.s.just_opened))
        self.s.just_opened = sorted(fresh)

    def _creates(self, placement: Placement) -> list[tuple[int, str]]:
        """This pass's creates: none while a node's configuration refused the last one
        (`CONFIG_RETRY`), then one (did someone fix it?)."""
        if self._config_problem is None:
            return placement.create
        if self._config_retry_at is not None and workflow.now() < self._config_retry_at:
            return []
        return placement.create[:1]

    def _create_input(self, spec: BrowserPoolSpec, slot: int) -> NodeCreateInput:
        return NodeCreateInput(
            pool=self._name,
            slot=str(slot),
            fingerprint=dict(spec.fingerprint),
            proxy_pool=spec.proxy.pool_ref if spec.proxy else None,
            session_ttl_seconds=spec.proxy.session_ttl if spec.proxy else 0,
            group_id=spec.group_id,
        )

    async def _open(self, pid: str, node: str) -> bool:
        opened = await calls.open_on(node, pid)
        if not isinstance(opened, NodeOpenResult) and workflow.cancellation_reason() is not None:
            return False  # cut by a delete: not the profile's failure, nor worth a warning
        ok, why, counted = calls.open_outcome(opened)
        if ok:
            self.s.failures.pop(pid, None)
            return True
        if counted:
            self.s.failures[pid] = self.s.failures.get(pid, 0) + 1
        self._event("OpenFailed", f"profile {pid} on {node}: {why}", warning=True)
        return False

    # ------------------------------------------------------------------ status

    def _publish(self, seen: Observed, placement: Placement, *, generation: int) -> None:
        out = publish(
            self.s.status,
            seen,
            placement,
            config_problem=self._config_problem,
            failure_limit=self._failure_limit(),
            now=workflow.now(),
            generation=generation,
        )
        self.s.status, self._rows = out.status, out.rows
        self._show()

    def _show(self) -> None:
        """Search attributes and Web UI details, each written only when it changed."""
        current = workflow.info().typed_search_attributes
        updates = search_attribute_updates(self._spec, self.s.status, current)
        if updates:
            workflow.upsert_search_attributes(updates)
        text = details(self._name, self._spec, self.s.generation, self.s.status)
        if text != self._details:  # served by a built-in query: no history event
            self._details = text
            workflow.set_current_details(text)

    def _hold_mixed(self, accounts: dict[str, str]) -> None:
        """The live selected nodes name two BitBrowser accounts: hold, and say so.

        Profiles belong to the account, so a node of another account lists none of the
        pool's and the plan would make them again there (twice the profiles, nothing
        to find them by). Nothing is created, opened or deleted until `nodeSelector`
        picks one account's nodes (or only one account's are live)."""
        named = ", ".join(f"{node} ({account})" for node, account in sorted(accounts.items()))
        message = (
            f"the live nodes nodeSelector picks are logged into different BitBrowser "
            f"accounts: {named}; nothing is created or deleted until it picks one account's"
        )
        self._event("MixedAccounts", message, warning=True)
        now = workflow.now()
        status = self.s.status.model_copy(update={"phase": Phase.DEGRADED, "last_reconciled": now})
        for cond in (
            ConditionUpdate(BrowserConditionType.NODES_AVAILABLE, FALSE, "MixedAccounts", message),
            ConditionUpdate(BrowserConditionType.PROGRESSING, FALSE, "MixedAccounts", message),
        ):
            status = set_condition(status, cond, now=now, generation=self.s.generation)
        self.s.status = status
        self._show()

    def _failure_limit(self) -> int:
        return self._spec.health.failure_streak_limit or self.settings.failure_streak_limit

    def _event(self, reason: str, message: str, warning: bool = False) -> None:
        self.s.events = event_log.record(
            self.s.events, now=workflow.now(), reason=reason, message=message, warning=warning
        )

    # ------------------------------------------------------------------ waiting

    async def _wait(self) -> None:
        """Until a change, or the resync (sooner while work is under way)."""
        every = self.settings.resync_seconds
        if self._dirty:
            every = min(every, 2.0)
        self._dirty = False
        try:
            await workflow.wait_condition(
                lambda: self._dirty, timeout=timedelta(seconds=every), timeout_summary="resync"
            )
        except TimeoutError:
            pass

    # ------------------------------------------------------------------ teardown

    async def _teardown(self) -> None:
        """Delete every profile of the pool on its node; hold while one cannot be reached.

        Profiles belong to the account, and each is closed on the node it runs on.
        Finished only when, for each account the pool's nodes stand for (`accounts.py`:
        the nodes that made or showed its profiles), one of them answers with none left;
        a profile on a node that is down, or an account with no live node, holds the pool
        (`TeardownBlocked`). Continues as new while it waits long.
        """
        self._show_teardown(done=False)
        while True:
            lost_after = self.settings.node_lost_after_seconds
            nodes = await calls.live_nodes({}, lost_after_seconds=lost_after)
            live = {n.node: n.account for n in nodes.alive}
            selector = self._spec.node_selector
            selected = {n.node for n in nodes.alive if selector_matches(selector, n.labels)}
            # Profiles belong to the account: a node of another one lists none of the
            # pool's, and "none left" from it would end the pool with every profile kept.
            # Only the nodes that made or showed the pool's profiles (accounts.py) say so.
            listed = teardown_nodes(
                self.s.nodes, live=live, selected=selected, groups=self.s.groups
            )
            profiles, failed, _ = merge_listings(await calls.list_on(sorted(listed), self._name))
            step = teardown_step(
                self.s.nodes,
                live=live,
                listed=listed,
                failed={n: cause for n, (_, cause) in failed.items()},
                profiles=profiles,
                groups=self.s.groups,
            )

            async def delete(pid: str, node: str) -> bool:
                try:
                    await calls.delete_on(node, pid)
                    return True
                except ActivityError as err:
                    self._event(
                        "DeleteFailed", f"profile {pid} on {node}: {calls.cause(err)}", True
                    )
                    return False

            # All at once: each node closes its own browsers side by side.
            deleted = await asyncio.gather(*(delete(pid, node) for pid, node in step.delete))
            if not step.reason and all(deleted):
                self._show_teardown(done=True)
                return
            reason, message = step.reason, step.message
            if not reason:
                reason, message = "DeleteFailed", "a profile could not be deleted; trying again"
            self.s.status = set_condition(
                self.s.status,
                ConditionUpdate(BrowserConditionType.TEARDOWN_BLOCKED, TRUE, reason, message),
                now=workflow.now(),
                generation=self.s.generation,
            )
            self._show()
            if versions.hand_over_due():
                await workflow.wait_condition(workflow.all_handlers_finished)
                versions.continue_as_new(self._input())  # `deleting` carried: it goes on
            await workflow.sleep(timedelta(seconds=min(self.settings.resync_seconds, 10)))

    def _show_teardown(self, *, done: bool) -> None:
        self.s.status = teardown_status(
            self.s.status, done=done, now=workflow.now(), generation=self.s.generation
        )
        self._show()

    # ------------------------------------------------------------------ messages

    @workflow.update(name=names.UPDATE_APPLY)
    def apply(self, request: BrowserApplyRequest) -> Accepted:
        # A BrowserPool is started plainly (`BrowserPoolClient.apply`): an update never creates.
        changed = request.spec != self._spec or request.metadata != self._metadata
        if request.spec != self._spec:
            self.s.generation += 1
            self._event("Configured", f"spec changed (generation {self.s.generation})")
            self._config_problem = None  # a new spec (another proxy pool?) is tried at once
        self._spec, self._metadata = request.spec, request.metadata
        self._dirty = True
        result = ApplyResult.CONFIGURED if changed else ApplyResult.UNCHANGED
        return Accepted(generation=self.s.generation, replicas=self._spec.replicas, result=result)

    @apply.validator
    def _validate_apply(self, request: BrowserApplyRequest) -> None:
        if self.s.deleting:
            raise ValueError(f"browserpool {self._name!r} is being deleted")
        if request.metadata.name != self._name:
            raise ValueError(
                f"metadata.name: this pool is {self._name!r}, got {request.metadata.name!r}"
            )

    @workflow.update(name=names.UPDATE_SCALE)
    def scale_update(self, request: ScaleRequest) -> Accepted:
        if request.replicas != self._spec.replicas:
            self._event("Scaled", f"replicas {self._spec.replicas} -> {request.replicas}")
            self._spec = self._spec.model_copy(update={"replicas": request.replicas})
            self.s.generation += 1
        self._dirty = True
        return Accepted(generation=self.s.generation, replicas=self._spec.replicas)

    @scale_update.validator
    def _validate_scale(self, request: ScaleRequest) -> None:
        if self.s.deleting:
            raise ValueError(f"browserpool {self._name!r} is being deleted")
        BrowserPoolSpec.model_validate({**self._spec.to_json_dict(), "replicas": request.replicas})

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> dict[str, Any]:
        return self.s.status.to_json_dict()

    @workflow.query(name=names.QUERY_SPEC)
    def spec(self) -> dict[str, Any]:
        created = self.s.created
        return {
            "generation": self.s.generation,
            "spec": self._spec.to_json_dict(),
            # The pool's age, kept across continue-as-new (a run's own start is not it).
            "creationTimestamp": created.isoformat() if created else None,
        }

    @workflow.query(name=names.QUERY_DEVICES)
    def devices(self) -> ProfilesView:
        return ProfilesView(profiles=list(self._rows))

    @workflow.query(name=names.QUERY_EVENTS)
    def events(self) -> event_log.PoolEvents:
        return event_log.PoolEvents(events=list(self.s.events))


def _first_known(state: BrowserPoolState, started: datetime) -> datetime:
    """When the pool was created, as well as a run that was not told can say: this run's
    start, or the oldest event it carries if that is older."""
    times = [started, *(e.first_time or e.time for e in state.events)]
    return min(times)
