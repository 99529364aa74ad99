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
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.node_definitions import (
        NodeActivityDefinitions,
        NodeRegistryActivityDefinitions,
    )
    from devicepool.activities.node_models import (
        NODE_OPEN_BUDGET_SECONDS,
        LiveNodesInput,
        LiveNodesResult,
        NodeCreateInput,
        NodeDeleteInput,
        NodeInfo,
        NodeListInput,
        NodeListResult,
        NodeOpenInput,
        NodeOpenResult,
        ProfileView,
    )
    from devicepool.activities.settings import PoolSettings
    from devicepool.api import names
    from devicepool.api.browserpool.v1beta1 import BrowserConditionType, BrowserPoolSpec
    from devicepool.api.errors import ErrorType
    from devicepool.api.labels import selector_matches
    from devicepool.api.v1alpha1 import ConditionStatus, Phase, resolve_max_unhealthy
    from devicepool.workflows.browserpool.accounts import (
        link,
        prune,
        remember,
        teardown_nodes,
        teardown_step,
    )
    from devicepool.workflows.browserpool.messages import (
        BrowserApplyRequest,
        BrowserPoolInput,
        BrowserPoolState,
        ProfileRow,
        ProfilesView,
    )
    from devicepool.workflows.browserpool.plan import (
        NodeProfile,
        Placement,
        forget_replacements,
        plan,
    )
    from devicepool.workflows.browserpool.publish import details, search_attribute_updates
    from devicepool.workflows.browserpool.status import (
        LOCAL_API_REFUSED,
        NODE_UNREACHABLE,
        ConfigProblem,
        NodeTrouble,
        pass_status,
        teardown_status,
    )
    from devicepool.workflows.pool import event_log
    from devicepool.workflows.pool.messages import Accepted, ApplyResult, ScaleRequest
    from devicepool.workflows.pool.status import ConditionUpdate, set_condition
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.cancellation import raise_if_cancelled

# A node call waits this long for its node worker to take it: a node that died
# costs one pass this much, and the next pass asks the registry again.
NODE_PICKUP = timedelta(seconds=15)
NODE_CALL = timedelta(seconds=90)
# An open outlasts the node's own budget for it (a queued `/browser/open`, a reset and one
# more), with a minute to spare: cut sooner, a slow open would count as the profile's
# failure. A node that died meanwhile is found by its heartbeat, not by this deadline.
NODE_OPEN = timedelta(seconds=NODE_OPEN_BUDGET_SECONDS + 60)
NODE_OPEN_HEARTBEAT = timedelta(seconds=30)
# Failures of an open that say nothing of the profile (the node's key, its budget).
# A desktop client that went away or did not answer in time is the node's trouble too.
NODE_TROUBLE_TYPES = {
    ErrorType.UNAUTHENTICATED.value,
    ErrorType.RATE_LIMITED.value,
    ErrorType.TIMEOUT.value,
    ErrorType.TRANSPORT.value,
    ErrorType.QUOTA_EXCEEDED.value,  # the account's balance: every open would meet it
}
# A listing is one or two Local API calls: a node that took one and went silent
# (frozen, its machine asleep) costs a pass this much, not NODE_CALL.
NODE_LISTING = timedelta(seconds=15)
ONCE = RetryPolicy(maximum_attempts=1)
WAIT_DONE = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
TRY_CANCEL = ActivityCancellationType.TRY_CANCEL
NODE = NodeActivityDefinitions
WAIT_WHEN_CANCELLED = {NODE.node_create_profile, NODE.node_open_profile}
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
        # A create refused for a node's configuration: (reason, message), and when the
        # next create may be tried (`CONFIG_RETRY`). Not carried: a new run tries at once.
        self._config_problem: tuple[str, str] | None = None
        # What the last event said of each troubled node (a new run says it again, once).
        self._troubles_said: dict[str, tuple[str, str, bool]] = {}
        self._config_retry_at: Any = None

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
        raise_if_cancelled()
        # What this pass plans from: a change that lands while it lists or acts (an open
        # may take minutes) is observed by the next pass, not reported done by this one.
        spec, generation = self._spec, self.s.generation
        nodes = await self._nodes()
        if mixed := _accounts(nodes.alive):
            self._hold_mixed(mixed)
            return
        self.s.account = next((n.account for n in nodes.alive if n.account), self.s.account)
        alive = {n.node for n in nodes.alive}
        lost = {n.node for n in nodes.lost}
        everywhere = {n.node: n.account for n in (await self._nodes(everywhere=True)).alive}
        # Live nodes the selector no longer picks: their profiles go (closed where they run).
        # A node naming another account lists none of them: it is not asked, unless it
        # showed or made some (the selector moved to another account's nodes: the old
        # account's profiles go too).
        unselected = {
            node
            for node, account in everywhere.items()
            if node in self.s.nodes
            or not (account and self.s.account and account != self.s.account)
        } - alive
        listed = sorted(alive | unselected)
        profiles, failed, answered = await self._list(listed)
        raise_if_cancelled()
        self.s.nodes = remember(
            self.s.nodes,
            live=everywhere,
            answered={n: len(saw) for n, saw in answered.items()},
            holders={p.node for p in profiles},
        )
        self.s.groups = link(self.s.groups, known=self.s.nodes, saw=answered)
        self.s.nodes = prune(
            self.s.nodes, self.s.groups, answered=set(answered), holders={p.node for p in profiles}
        )
        self.s.groups = {n: g for n, g in self.s.groups.items() if n in self.s.nodes}
        if answered:  # a listing shows every profile of the account
            self.s.replacements = forget_replacements(
                self.s.replacements, profiles, nodes=set(everywhere) | alive | lost
            )
        troubles = self._troubles(failed, nodes.alive)
        gone = {n for n, t in troubles.items() if t.lost}
        limit = self._failure_limit()
        max_unhealthy = resolve_max_unhealthy(spec.health.max_unhealthy, spec.replicas)
        placement = plan(
            replicas=spec.replicas,
            profiles=profiles,
            # A node whose Local API has not answered for nodeLostAfterSeconds is lost.
            alive=alive - gone,
            lost=lost | gone,
            open_wanted=spec.open,
            failures=self.s.failures,
            failure_limit=limit,
            max_unhealthy=max_unhealthy,
            unselected=unselected - set(failed),
            unreachable=set(troubles) - gone,
            replacements=self.s.replacements,  # oldest first
        )
        # Said before the act as well: an open may take minutes, and a node's trouble (or
        # any change) is not kept from the status, the search attributes, --wait, so long.
        self._publish(placement, profiles, alive, lost | gone, troubles, spec=spec)
        await self._act(placement)
        self._publish(
            placement, profiles, alive, lost | gone, troubles, spec=spec, generation=generation
        )

    def _troubles(
        self, failed: dict[str, tuple[str, str]], live: list[NodeInfo]
    ) -> dict[str, NodeTrouble]:
        """The live selected nodes whose listing failed, with since when (carried)."""
        now = workflow.now()
        beats = {n.node: n for n in live}
        for node in list(self.s.unreachable_since):
            if node not in failed:
                del self.s.unreachable_since[node]  # it answered, or it is no longer live
        lost_after = timedelta(seconds=self.settings.node_lost_after_seconds)
        troubles: dict[str, NodeTrouble] = {}
        for node, (reason, cause) in sorted(failed.items()):
            since = self.s.unreachable_since.setdefault(node, now)
            info = beats.get(node)
            if info is None:
                continue  # a node the selector no longer picks: only its profiles wait
            if info.api_healthy is False and info.api_error:
                cause = f"{cause}; its last beat: {info.api_error}"
            trouble = NodeTrouble(
                reason=reason, cause=cause, since=since, lost=now - since >= lost_after
            )
            troubles[node] = trouble
            said = (reason, cause, trouble.lost)
            if self._troubles_said.get(node) != said:  # once a change, not every pass
                self._troubles_said[node] = said
                self._event(
                    reason,
                    f"node {node}: {cause}"
                    + (" (counted lost: its profiles are held elsewhere)" if trouble.lost else ""),
                    warning=True,
                )
        for node in set(self._troubles_said) - set(troubles):
            del self._troubles_said[node]
        return troubles

    async def _nodes(self, *, everywhere: bool = False) -> LiveNodesResult:
        """The live and lost node workers the selector picks (`everywhere`: any)."""
        return await workflow.execute_activity_method(
            NodeRegistryActivityDefinitions.live_nodes,
            LiveNodesInput(
                selector={} if everywhere else dict(self._spec.node_selector),
                lost_after_seconds=self.settings.node_lost_after_seconds,
            ),
            start_to_close_timeout=timedelta(seconds=30),
            summary="which node workers are alive",
        )

    async def _list(
        self, alive: list[str]
    ) -> tuple[list[NodeProfile], dict[str, tuple[str, str]], dict[str, set[str]]]:
        """The pool's profiles, with `open` from the node each runs on; the nodes that did
        not answer, each with its reason and cause; for each of the others, the nodes
        that made the profiles it showed (empty: it showed none)."""

        async def one(node: str) -> NodeListResult | tuple[str, str]:
            try:
                answer: NodeListResult = await self._on(
                    node,
                    NODE.node_list_profiles,
                    NodeListInput(pool=self._name),
                    "list the pool's profiles",
                    within=NODE_LISTING,
                )
                return answer
            except ActivityError as err:
                return _node_failure(err)

        answers = await asyncio.gather(*(one(n) for n in alive))
        failed = {n: a for n, a in zip(alive, answers, strict=True) if isinstance(a, tuple)}
        counts = {
            n: {p.node for p in a.profiles}
            for n, a in zip(alive, answers, strict=True)
            if isinstance(a, NodeListResult)
        }
        seen: dict[str, NodeProfile] = {}
        for node, answer in zip(alive, answers, strict=True):
            for p in answer.profiles if isinstance(answer, NodeListResult) else []:
                slot = _slot(p.slot)
                if slot is None:
                    continue
                mine = p.node == node
                before = seen.get(p.id)
                if before is None or mine:
                    seen[p.id] = NodeProfile(id=p.id, slot=slot, node=p.node, open=p.open and mine)
        return sorted(seen.values(), key=lambda p: (p.slot, p.id)), failed, counts

    async def _on(
        self,
        node: str,
        activity: Callable[..., Awaitable[Any]],
        arg: Any,
        summary: str,
        *,
        within: timedelta = NODE_CALL,
        heartbeat: timedelta | None = None,
    ) -> Any:
        return await workflow.execute_activity_method(
            activity,
            arg,
            task_queue=names.node_task_queue(node),
            schedule_to_start_timeout=NODE_PICKUP,
            start_to_close_timeout=within,
            heartbeat_timeout=heartbeat,
            retry_policy=ONCE,
            # Cancelled (a delete), a create or an open ends on the node before teardown
            # lists and deletes: a profile made after its listing would be left behind, a
            # browser opening as its profile is deleted could come up.
            cancellation_type=WAIT_DONE if activity in WAIT_WHEN_CANCELLED else TRY_CANCEL,
            summary=f"{summary} on {node}",
        )

    async def _act(self, placement: Placement) -> None:
        # Whether anything was done: only then does the next pass come soon (2 s) to see
        # it. A held create, a create, delete or open that failed waits for the resync.
        done = False
        for pid, node in placement.delete:
            try:
                await self._on(
                    node,
                    NODE.node_delete_profile,
                    NodeDeleteInput(id=pid),
                    "close, confirm and delete a profile",
                )
                self.s.failures.pop(pid, None)
                done = True
                self._event("Deleted", f"profile {pid} on {node}: {placement.why[pid]}")
            except ActivityError as err:
                self._event("DeleteFailed", f"profile {pid} on {node}: {_cause(err)}", warning=True)
            raise_if_cancelled()  # a delete the awaited call absorbed: teardown, now
        spec = self._spec
        creates = placement.create
        if self._config_problem is not None:
            if workflow.now() < self._config_retry_at:
                creates = []  # held: the node's configuration refused the last one
            else:
                creates = creates[:1]  # one try: did someone fix it?
        # A slot held on a lost node: what is made for it is a replacement (the original
        # wins if its node comes back).
        replacing = {p.slot for p in placement.lost}
        for slot, node in creates:
            body = NodeCreateInput(
                pool=self._name,
                slot=str(slot),
                fingerprint=dict(spec.fingerprint),
                proxy_pool=spec.proxy.pool_ref if spec.proxy else None,
                session_ttl_seconds=spec.proxy.session_ttl if spec.proxy else 0,
                group_id=spec.group_id,
            )
            try:
                made: ProfileView | None = await self._on(
                    node, NODE.node_create_profile, body, "create a profile"
                )
                self.s.made_profiles = True
                self.s.nodes.setdefault(node, "")  # named by the next listing
                if made is not None and slot in replacing and made.id not in self.s.replacements:
                    self.s.replacements.append(made.id)  # oldest first (plan.py)
                self._config_problem = None
                done = True
                self._event("Created", f"slot {slot} on {node}" + (f": {made.id}" if made else ""))
            except ActivityError as err:
                self._event("CreateFailed", f"slot {slot} on {node}: {_cause(err)}", warning=True)
                reason = CONFIGURATION_ERRORS.get(_error_type(err) or "")
                if reason is not None and workflow.patched(CONFIG_HOLD_PATCH):
                    self._config_problem = (reason, f"node {node}: {_cause(err)}")
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

    async def _open(self, pid: str, node: str) -> bool:
        opened: NodeOpenResult | ActivityError
        try:
            opened = await self._on(
                node,
                NODE.node_open_profile,
                NodeOpenInput(id=pid),
                "open a browser",
                within=NODE_OPEN,
                heartbeat=NODE_OPEN_HEARTBEAT,
            )
        except ActivityError as err:
            opened = err
        if not isinstance(opened, NodeOpenResult) and workflow.cancellation_reason() is not None:
            return False  # cut by a delete: not the profile's failure, nor worth a warning
        ok, why, counted = _open_outcome(opened)
        if ok:
            self.s.failures.pop(pid, None)
            return True
        if counted:
            self.s.failures[pid] = self.s.failures.get(pid, 0) + 1
        self._event("OpenFailed", f"profile {pid} on {node}: {why}", warning=True)
        return False

    # ------------------------------------------------------------------ status

    def _publish(
        self,
        placement: Placement,
        profiles: list[NodeProfile],
        alive: set[str],
        lost: set[str],
        troubles: dict[str, NodeTrouble],
        *,
        spec: BrowserPoolSpec,
        generation: int | None = None,
    ) -> None:
        """The pass's status, from the spec it planned from (`generation`: the one that
        spec had, after its act; None before it: the generation observed stays the last
        pass's, `--wait` must not take a plan for its outcome)."""
        leaving = {pid for pid, _ in placement.delete}
        waiting = {p.id for p in placement.waiting}
        self._rows = [
            ProfileRow(
                id=p.id,
                slot=p.slot,
                node=p.node,
                open=p.open,
                state="leaving"
                if p.id in leaving
                else "lost"
                if p.node in lost
                else "waiting"
                if p.id in waiting
                else "held",
            )
            for p in profiles
        ]
        problem = self._config_problem
        self.s.status = pass_status(
            self.s.status,
            spec=spec,
            placement=placement,
            alive=alive,
            lost=lost,
            troubles=troubles,
            config_problem=ConfigProblem(problem[0], problem[1], CONFIG_RETRY.total_seconds())
            if problem is not None
            else None,
            failure_limit=self._failure_limit(),
            now=workflow.now(),
            generation=self.s.status.observed_generation if generation is None else generation,
        )
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

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
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
            nodes = await self._nodes(everywhere=True)
            live = {n.node: n.account for n in nodes.alive}
            selector = self._spec.node_selector
            selected = {n.node for n in nodes.alive if selector_matches(selector, n.labels)}
            # Profiles belong to the account: a node of another one lists none of the
            # pool's, and "none left" from it would end the pool with every profile kept.
            # Only the nodes that made or showed the pool's profiles (accounts.py) say so.
            listed = teardown_nodes(
                self.s.nodes, live=live, selected=selected, groups=self.s.groups
            )
            profiles, failed, _ = await self._list(sorted(listed))
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
                    await self._on(
                        node,
                        NODE.node_delete_profile,
                        NodeDeleteInput(id=pid),
                        "close, confirm and delete a profile",
                    )
                    return True
                except ActivityError as err:
                    self._event(
                        "DeleteFailed", f"profile {pid} on {node}: {_cause(err)}", warning=True
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


def _slot(text: Any) -> int | None:
    try:
        slot = int(text)
    except (TypeError, ValueError):
        return None
    return slot if slot >= 0 else None


def _accounts(alive: list[NodeInfo]) -> dict[str, str]:
    """Node -> account of the live nodes when they name more than one account ({} else).
    A node that names none (no `--node-account`) is not compared."""
    named = {n.node: n.account for n in alive if n.account}
    return named if len(set(named.values())) > 1 else {}


def _error_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _cause(err: ActivityError) -> str:
    cause = err.cause
    return str(cause.message if cause is not None and hasattr(cause, "message") else err)[:200]


def _node_failure(err: ActivityError) -> tuple[str, str]:
    """Why a node's listing failed: (condition reason, cause)."""
    cause = err.cause
    if isinstance(cause, ActivityTimeoutError):
        if cause.type == TimeoutType.SCHEDULE_TO_START:
            waited = NODE_PICKUP.total_seconds()
            return NODE_UNREACHABLE, f"its node worker took no call in {waited:g}s"
        return NODE_UNREACHABLE, f"no answer in {NODE_LISTING.total_seconds():g}s"
    if _error_type(err) == ErrorType.UNAUTHENTICATED.value:
        return LOCAL_API_REFUSED, _cause(err)
    return NODE_UNREACHABLE, _cause(err)


def _first_known(state: BrowserPoolState, started: datetime) -> datetime:
    """When the pool was created, as well as a run that was not told can say: this run's
    start, or the oldest event it carries if that is older."""
    times = [started, *(e.first_time or e.time for e in state.events)]
    return min(times)


def _open_outcome(opened: NodeOpenResult | ActivityError) -> tuple[bool, str, bool]:
    """An open's outcome: (open, why not, whether it counts toward the profile's streak)."""
    if isinstance(opened, ActivityError):
        return False, _cause(opened), _counts_against_profile(opened)
    return opened.open, opened.reason, not opened.node_trouble


def _counts_against_profile(err: ActivityError) -> bool:
    """Whether a failed open counts toward the profile's failure streak (whose end deletes
    it, cookies and all): not when the node, not the profile, is the trouble (the open
    timed out, its desktop client went away, the node's key or budget was refused)."""
    if isinstance(err.cause, ActivityTimeoutError):
        return False
    return _error_type(err) not in NODE_TROUBLE_TYPES
