"""`BrowserPool`: BitBrowser profiles kept on tagged node workers, id `browserpool/<name>`.

Each pass asks which node workers the selector picks are alive (`live_nodes`,
from the node registry), lists the pool's profiles on each live node (profiles
belong to the BitBrowser account, so any node lists them all; only the node a
browser runs on knows it is open), plans (`plan.py`: pure) and acts: deletes
surplus, creates what is missing on the least loaded node, opens what should
be open, one per node. Node calls go to the node's own task queue with a short
schedule-to-start, so a node that died costs a pass a few seconds, never a
hang. Cancelled (`devicepool delete`), it deletes every profile on its node;
a node that is down holds the pool in Deleting with `TeardownBlocked` naming it.

Updates `apply`, `scale_update`; queries `status`, `spec`, `devices`, `events`.
Continue-as-new when suggested, carrying `BrowserPoolState`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.node_models import (
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
    from devicepool.api.v1alpha1 import ConditionStatus, Phase, resolve_max_unhealthy
    from devicepool.workflows.browserpool.messages import (
        BrowserApplyRequest,
        BrowserPoolInput,
        BrowserPoolState,
        ProfileRow,
        ProfilesView,
    )
    from devicepool.workflows.browserpool.plan import NodeProfile, Placement, plan
    from devicepool.workflows.browserpool.publish import details, search_attribute_updates
    from devicepool.workflows.pool import event_log
    from devicepool.workflows.pool.messages import Accepted, ApplyResult, ScaleRequest
    from devicepool.workflows.pool.status import ConditionUpdate, set_condition
    from devicepool.workflows.shared import versions
    from devicepool.workflows.shared.cancellation import raise_if_cancelled

# A node call waits this long for its node worker to take it: a node that died
# costs one pass this much, and the next pass asks the registry again.
NODE_PICKUP = timedelta(seconds=15)
NODE_CALL = timedelta(seconds=90)
# A listing is one or two Local API calls: a node that took one and went silent
# (frozen, its machine asleep) costs a pass this much, not NODE_CALL.
NODE_LISTING = timedelta(seconds=15)
ONCE = RetryPolicy(maximum_attempts=1)
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
        self._rows: list[ProfileRow] = []
        self._dirty = False
        # The Web UI details last written (each run writes its own: they are not carried).
        self._details: str | None = None
        # A create refused for a node's configuration: (reason, message), and when the
        # next create may be tried (`CONFIG_RETRY`). Not carried: a new run tries at once.
        self._config_problem: tuple[str, str] | None = None
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
        nodes = await self._nodes()
        if mixed := _accounts(nodes.alive):
            self._hold_mixed(mixed)
            return
        alive = {n.node for n in nodes.alive}
        lost = {n.node for n in nodes.lost}
        # Live nodes the selector no longer picks: their profiles go (closed where they run).
        unselected = {n.node for n in (await self._nodes(everywhere=True)).alive} - alive
        profiles, unreachable = await self._list(sorted(alive | unselected))
        raise_if_cancelled()
        if unreachable:
            # A node that did not answer one listing is not lost (only the registry says
            # that): this pass changes nothing, rather than replace what may be fine.
            self._event(
                "ListingFailed",
                f"node(s) {', '.join(sorted(unreachable))} did not list the pool's profiles; "
                "nothing changed this pass",
                warning=True,
            )
            self._dirty = True
            return
        limit = self._failure_limit()
        max_unhealthy = resolve_max_unhealthy(self._spec.health.max_unhealthy, self._spec.replicas)
        placement = plan(
            replicas=self._spec.replicas,
            profiles=profiles,
            alive=alive,
            lost=lost,
            open_wanted=self._spec.open,
            failures=self.s.failures,
            failure_limit=limit,
            max_unhealthy=max_unhealthy,
            unselected=unselected,
        )
        await self._act(placement)
        self._publish(placement, profiles, alive, lost)

    async def _nodes(self, *, everywhere: bool = False) -> LiveNodesResult:
        """The live and lost node workers the selector picks (`everywhere`: any)."""
        return await workflow.execute_activity(
            "live_nodes",
            LiveNodesInput(
                selector={} if everywhere else dict(self._spec.node_selector),
                lost_after_seconds=self.settings.node_lost_after_seconds,
            ),
            result_type=LiveNodesResult,
            start_to_close_timeout=timedelta(seconds=30),
            summary="which node workers are alive",
        )

    async def _list(self, alive: list[str]) -> tuple[list[NodeProfile], set[str]]:
        """The pool's profiles, with `open` from the node each runs on; nodes that did not answer."""

        async def one(node: str) -> NodeListResult | None:
            try:
                return await self._on(
                    node,
                    "node_list_profiles",
                    NodeListInput(pool=self._name),
                    NodeListResult,
                    "list the pool's profiles",
                    within=NODE_LISTING,
                )
            except ActivityError:
                return None

        answers = await asyncio.gather(*(one(n) for n in alive))
        unreachable = {n for n, a in zip(alive, answers, strict=True) if a is None}
        seen: dict[str, NodeProfile] = {}
        for node, answer in zip(alive, answers, strict=True):
            for p in answer.profiles if answer else []:
                slot = _slot(p.slot)
                if slot is None:
                    continue
                mine = p.node == node
                before = seen.get(p.id)
                if before is None or mine:
                    seen[p.id] = NodeProfile(id=p.id, slot=slot, node=p.node, open=p.open and mine)
        return sorted(seen.values(), key=lambda p: (p.slot, p.id)), unreachable

    async def _on(
        self,
        node: str,
        activity: str,
        arg: Any,
        result_type: Any,
        summary: str,
        *,
        within: timedelta = NODE_CALL,
    ) -> Any:
        return await workflow.execute_activity(
            activity,
            arg,
            result_type=result_type,
            task_queue=names.node_task_queue(node),
            schedule_to_start_timeout=NODE_PICKUP,
            start_to_close_timeout=within,
            retry_policy=ONCE,
            summary=f"{summary} on {node}",
        )

    async def _act(self, placement: Placement) -> None:
        for pid, node in placement.delete:
            try:
                await self._on(
                    node,
                    "node_delete_profile",
                    NodeDeleteInput(id=pid),
                    None,
                    "close, confirm and delete a profile",
                )
                self.s.failures.pop(pid, None)
                self._event("Deleted", f"profile {pid} on {node}: {placement.why[pid]}")
            except ActivityError as err:
                self._event("DeleteFailed", f"profile {pid} on {node}: {_cause(err)}", warning=True)
        spec = self._spec
        creates = placement.create
        if self._config_problem is not None:
            if workflow.now() < self._config_retry_at:
                creates = []  # held: the node's configuration refused the last one
            else:
                creates = creates[:1]  # one try: did someone fix it?
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
                made = await self._on(
                    node, "node_create_profile", body, ProfileView, "create a profile"
                )
                self.s.made_profiles = True
                self._config_problem = None
                self._event("Created", f"slot {slot} on {node}" + (f": {made.id}" if made else ""))
            except ActivityError as err:
                self._event("CreateFailed", f"slot {slot} on {node}: {_cause(err)}", warning=True)
                reason = CONFIGURATION_ERRORS.get(_error_type(err) or "")
                if reason is not None and workflow.patched(CONFIG_HOLD_PATCH):
                    self._config_problem = (reason, f"node {node}: {_cause(err)}")
                    self._config_retry_at = workflow.now() + CONFIG_RETRY
                    break  # the next creates would meet the same refusal
        for pid, node in placement.open:
            try:
                opened = await self._on(
                    node,
                    "node_open_profile",
                    NodeOpenInput(id=pid),
                    NodeOpenResult,
                    "open a browser",
                )
                ok, why = opened.open, opened.reason
            except ActivityError as err:
                ok, why = False, _cause(err)
            if ok:
                self.s.failures.pop(pid, None)
            else:
                self.s.failures[pid] = self.s.failures.get(pid, 0) + 1
                self._event("OpenFailed", f"profile {pid} on {node}: {why}", warning=True)
        self._dirty = self._dirty or bool(placement.create or placement.delete or placement.open)

    # ------------------------------------------------------------------ status

    def _publish(
        self, placement: Placement, profiles: list[NodeProfile], alive: set[str], lost: set[str]
    ) -> None:
        now, spec = workflow.now(), self._spec
        held = placement.held
        open_ = sum(1 for p in held if p.open)
        ready = open_ if spec.open else len(held)
        leaving = {pid for pid, _ in placement.delete}
        self._rows = [
            ProfileRow(
                id=p.id,
                slot=p.slot,
                node=p.node,
                open=p.open,
                state="leaving" if p.id in leaving else ("lost" if p.node in lost else "held"),
            )
            for p in profiles
        ]
        working = bool(placement.create or placement.delete or placement.open)
        phase = (
            Phase.READY
            if ready >= spec.replicas and not placement.delete
            else Phase.SCALING_DOWN
            if placement.delete and ready >= spec.replicas
            else Phase.DEGRADED
            if not alive or placement.lost
            else Phase.PROVISIONING
        )
        status = self.s.status.model_copy(
            update={
                "phase": phase,
                "desired_replicas": spec.replicas,
                "ready_profiles": ready,
                "open_profiles": open_,
                "lost_profiles": len(placement.lost),
                "by_node": placement.by_node(),
                "profile_ids": sorted(p.id for p in held),
                "last_reconciled": now,
                "observed_generation": self.s.generation,
            }
        )
        selector = ", ".join(f"{k}={v}" for k, v in sorted(spec.node_selector.items())) or "any"
        conditions = [
            ConditionUpdate(BrowserConditionType.READY, TRUE, "Converged")
            if ready >= spec.replicas
            else ConditionUpdate(
                BrowserConditionType.READY,
                FALSE,
                self._config_problem[0],
                f"{self._config_problem[1]} — creating held, tried again every "
                f"{CONFIG_RETRY.total_seconds():g}s",
            )
            if self._config_problem is not None
            else ConditionUpdate(
                BrowserConditionType.READY,
                FALSE,
                "NoNodes" if not alive else "BelowDesired",
                f"{ready}/{spec.replicas} profiles ready" + (" (open)" if spec.open else ""),
            ),
            ConditionUpdate(
                BrowserConditionType.PROGRESSING,
                TRUE if working else FALSE,
                "Reconciling" if working else "Stable",
            ),
            ConditionUpdate(
                BrowserConditionType.NODES_AVAILABLE,
                TRUE,
                "NodesAlive",
                f"{len(alive)} live node(s) match nodeSelector ({selector})",
            )
            if alive and not lost
            else ConditionUpdate(
                BrowserConditionType.NODES_AVAILABLE,
                FALSE if not alive else TRUE,
                "NoLiveNode" if not alive else "NodesLost",
                (
                    f"no live node worker matches nodeSelector ({selector})"
                    if not alive
                    else f"{len(alive)} live node(s) match nodeSelector ({selector})"
                )
                + (
                    f"; lost: {', '.join(sorted(lost))} (its profiles are replaced elsewhere)"
                    if lost
                    else ""
                ),
            ),
        ]
        conditions.append(
            ConditionUpdate(
                BrowserConditionType.REMEDIATION_PAUSED,
                TRUE,
                "TooManyUnhealthy",
                f"{placement.paused} profiles failed to open {self._failure_limit()} times in a "
                f"row, more than maxUnhealthy ({spec.health.max_unhealthy}): none is deleted "
                "until fewer fail (a node or the account is likely the trouble)",
            )
            if placement.paused
            else ConditionUpdate(BrowserConditionType.REMEDIATION_PAUSED, FALSE, "Healthy")
        )
        for cond in conditions:
            status = set_condition(status, cond, now=now, generation=self.s.generation)
        self.s.status = status
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

        Any live node worker serves (a node the selector no longer picks too): profiles
        belong to the account, and each is closed on the node it runs on. Finished only
        when a listing shows none left; with no live node to list from, a pool that ever
        made a profile waits (`TeardownBlocked`). Continues as new while it waits long.
        """
        self._set_phase(Phase.DELETING)
        while True:
            nodes = await self._nodes(everywhere=True)
            alive = {n.node for n in nodes.alive}
            profiles, unreachable = await self._list(sorted(alive))
            reachable = [p for p in profiles if p.node in alive - unreachable]

            async def delete(p: NodeProfile) -> bool:
                try:
                    await self._on(
                        p.node,
                        "node_delete_profile",
                        NodeDeleteInput(id=p.id),
                        None,
                        "close, confirm and delete a profile",
                    )
                    return True
                except ActivityError as err:
                    self._event(
                        "DeleteFailed", f"profile {p.id} on {p.node}: {_cause(err)}", warning=True
                    )
                    return False

            # All at once: each node closes its own browsers side by side.
            deleted = await asyncio.gather(*(delete(p) for p in reachable))
            down = sorted({p.node for p in profiles if p.node not in alive} | unreachable)
            blind = not (alive - unreachable) and self.s.made_profiles
            if all(deleted) and len(reachable) == len(profiles) and not down and not blind:
                self._set_phase(Phase.DELETED)
                return
            if down:
                reason = "NodeDown"
                message = f"profiles on node(s) {', '.join(down)} wait for the node to come back"
            elif blind:
                reason = "NoLiveNode"
                message = (
                    "no live node worker to list the pool's profiles from; "
                    "they are deleted once one beats again"
                )
            else:
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

    def _set_phase(self, phase: Phase) -> None:
        self.s.status = self.s.status.model_copy(update={"phase": phase})
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
        return {"generation": self.s.generation, "spec": self._spec.to_json_dict()}

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
