"""`BrowserKind`: a BrowserPool's core on the reconciler shell (`workflows/reconciler`).

What a pass does: docs/architecture.md, "How a BrowserPool converges".
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.connect_models import ConnectInfo
    from devicepool.activities.settings import PoolSettings
    from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
    from devicepool.api.labels import selector_matches
    from devicepool.api.v1beta1 import DEFAULT_LEASES, OnRelease
    from devicepool.workflows.browserpool import act as acting
    from devicepool.workflows.browserpool import calls, leasable
    from devicepool.workflows.browserpool.messages import (
        BrowserApplyRequest,
        BrowserPoolInput,
        BrowserPoolState,
        ProfileRow,
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
    from devicepool.workflows.browserpool.publish import details, search_attributes
    from devicepool.workflows.browserpool.status import ConfigProblem, mixed_status, publish
    from devicepool.workflows.browserpool.teardown import tear_down
    from devicepool.workflows.reconciler.events import Happened
    from devicepool.workflows.reconciler.kind import Host
    from devicepool.workflows.reconciler.lease_records import Candidate, Ended
    from devicepool.workflows.reconciler.messages import Accepted, ApplyResult
    from devicepool.workflows.shared.errors import raise_if_cancelled, wait_condition

__all__ = ["BrowserHost", "BrowserKind", "Outcome"]

# After work was done, the next pass comes this soon to see it.
SOON = 2.0


class BrowserHost(Host[BrowserPoolSpec, BrowserPoolState], Protocol):
    """The BrowserPool workflow as its core sees it: the shell's host, and the worker's
    intervals."""

    @property
    def settings(self) -> PoolSettings: ...


@dataclass(frozen=True)
class Outcome:
    """What a pass did: what it saw and planned (no plan: it held for mixed accounts), the
    generation it planned from, and whether work was done (the next pass comes soon)."""

    seen: Observed
    placement: Placement | None
    done: bool = False


class BrowserKind:
    """A BrowserPool's pass, teardown and answers to the shell (one per run)."""

    member = "profile"

    def __init__(self, host: BrowserHost) -> None:
        self.h = host
        self.rows: list[ProfileRow] = []
        # A create refused for a node's configuration, and when the next create may be
        # tried (`CONFIG_RETRY`). Not carried: a new run tries at once.
        self.config_problem: ConfigProblem | None = None
        self.config_retry_at: datetime | None = None
        # What the last event said of each troubled node (a new run says it again, once).
        self._troubles_said: dict[str, tuple[str, str, bool]] = {}
        # The last pass's look and placement (None: none yet, or held for mixed accounts),
        # and the selected live nodes' labels: what leases are granted from.
        self._last: Outcome | None = None
        # This pass's look, from its listing on (None: none yet, or held for mixed
        # accounts): what the autoscaler judges, before the plan drops slots on it.
        self._seeing: Observed | None = None
        self._node_labels: dict[str, dict[str, str]] = {}
        # The profiles the last event said were kept for their leases (a new run says so
        # again, once).
        self._kept_said: frozenset[str] = frozenset()
        # The candidates the leases last saw (`lease_candidates`, the pass's settle): one
        # this pass made leasable (a profile opened) is offered by the next pass, soon.
        self._candidates_seen: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ a pass

    async def observe(self) -> Observed:
        """What this pass sees. Its spec and generation are the pass's: a change that lands
        while it lists or acts (an open may take minutes) is the next pass's."""
        s, spec, generation = self.h.s, self.h.spec, self.h.s.generation
        lost_after = self.h.settings.node_lost_after_seconds
        # One read of the registry: of two, a beat landing between them made a selected
        # node lost in one and alive in the other, "unselected", its profiles deleted.
        nodes = await calls.live_nodes({}, lost_after_seconds=lost_after)
        now = workflow.now()
        selected = [n for n in nodes.alive if selector_matches(spec.node_selector, n.labels)]
        self._node_labels = {n.node: dict(n.labels) for n in selected}
        if mixed := mixed_accounts(selected):
            self._seeing = None
            return Observed(spec=spec, generation=generation, now=now, mixed=mixed)
        s.account = next((n.account for n in selected if n.account), s.account)
        alive = {n.node for n in selected}
        lost = {n.node for n in nodes.lost if selector_matches(spec.node_selector, n.labels)}
        everywhere = {n.node: n.account for n in nodes.alive}
        unselected, listed = listed_nodes(everywhere, alive=alive, known=s.nodes, account=s.account)
        profiles, failed, answered = merge_listings(await calls.list_on(listed, self.h.name))
        raise_if_cancelled()
        holders = {p.node for p in profiles}
        s.nodes, s.groups = known_nodes(
            s.nodes, s.groups, live=everywhere, answered=answered, holders=holders
        )
        if answered:  # a listing shows every profile of the account
            s.replacements = forget_replacements(
                s.replacements, profiles, nodes=set(everywhere) | alive | lost
            )
            if s.replace_after_use:
                s.replace_after_use = leasable.forget_used(s.replace_after_use, profiles)
        now = workflow.now()
        troubles, s.unreachable_since = node_troubles(
            failed,
            selected,
            s.unreachable_since,
            now=now,
            lost_after=timedelta(seconds=lost_after),
        )
        news, self._troubles_said = trouble_news(troubles, self._troubles_said)
        self.h.happened(*(Happened(reason, message, warning=True) for reason, message in news))
        self._seeing = Observed(
            spec=spec,
            generation=generation,
            now=now,
            profiles=tuple(profiles),
            alive=frozenset(alive),
            lost=frozenset(lost),
            unselected=frozenset(unselected),
            failed=frozenset(failed),
            troubles=troubles,
        )
        return self._seeing

    def _sized(self, seen: Observed) -> Observed:
        """`seen` with the `replicas` the autoscaler wrote after the look, in this pass
        (`Reconciler.autoscale`): its plan takes that size, not the next pass's. A spec
        applied since (another generation) is still the next pass's."""
        spec = self.h.spec
        if (
            spec.autoscale is None
            or seen.spec.autoscale is None
            or seen.generation != self.h.s.generation
            or seen.spec.replicas == spec.replicas
        ):
            return seen
        return dataclasses.replace(
            seen, spec=seen.spec.model_copy(update={"replicas": spec.replicas})
        )

    def decide(self, seen: Observed) -> Placement | None:
        if seen.mixed:
            return None  # held: nothing is created, opened or deleted
        seen = self._sized(seen)
        return decide(
            seen,
            failures=self.h.s.failures,
            failure_limit=self._failure_limit(),
            replacements=self.h.s.replacements,
            leased=self.h.s.leases.devices(),
            used=self.h.s.replace_after_use,
        )

    async def act(self, seen: Observed, placement: Placement | None) -> Outcome:
        if placement is None:
            return Outcome(seen, None)
        seen = self._sized(seen)  # as `decide` planned it
        # Said before the act as well: an open may take minutes, and a node's trouble (or
        # any change) is not kept from the status, the search attributes, --wait, so long.
        self.publish(Outcome(seen, placement), generation=self.h.s.status.observed_generation)
        # Whether anything was done: only then does the next pass come soon to see it. A
        # held create, a create, delete or open that failed waits for the resync.
        done = await acting.delete(self, placement)
        done = await acting.create(self, placement, seen) or done
        # A delete absorbed by the last call: no open starts (it may take minutes, on a
        # profile teardown deletes).
        raise_if_cancelled()
        # One open per node (plan.py), the nodes side by side: each may take minutes.
        opened = await asyncio.gather(
            *(acting.open_profile(self, pid, node) for pid, node in placement.open)
        )
        # A profile opened again right after an open that worked (its browser died at once)
        # is not news: the next pass waits for the resync.
        fresh = {pid for (pid, _), ok in zip(placement.open, opened, strict=True) if ok}
        done = done or bool(fresh - set(self.h.s.just_opened))
        self.h.s.just_opened = sorted(fresh)
        return Outcome(seen, placement, done=done)

    def publish(self, outcome: Outcome, *, generation: int | None = None) -> None:
        """The pass's status (`generation`: the one it planned from, once it acted)."""
        seen, now = outcome.seen, workflow.now()
        if outcome.placement is None:
            status, message = mixed_status(
                self.h.s.status, seen.mixed, now=now, generation=self.h.s.generation
            )
            self.warn("MixedAccounts", message)
        else:
            planned = seen.generation if generation is None else generation
            published = publish(
                self.h.s.status,
                seen,
                outcome.placement,
                config_problem=self.config_problem,
                failure_limit=self._failure_limit(),
                node_lost_after_seconds=self.h.settings.node_lost_after_seconds,
                now=now,
                generation=planned,
            )
            status, self.rows = published.status, published.rows
            kept = outcome.placement.kept
            status = leasable.kept_status(status, kept, now=now, generation=planned)
        self._last = outcome if outcome.placement is not None else None
        if outcome.placement is not None:
            self._say_kept(outcome.placement.kept)
        self.h.s.status = status
        self.h.show()

    async def wait(self, outcome: Outcome) -> None:
        """Until a change, or the resync (sooner after work was done)."""
        every = self.h.settings.resync_seconds
        # `replan`: an autoscaled pool's demand moved (`Reconciler.demand_moved`); no other
        # BrowserPool sets it, so their waits are as before.
        h = self.h
        if outcome.done or h.dirty or h.replan or self._offerable_since_settle():
            every = min(every, SOON)
        h.dirty = h.replan = False
        await wait_condition(
            lambda: h.dirty or h.replan, timeout=timedelta(seconds=every), summary="resync"
        )

    # ------------------------------------------------------------------ teardown

    async def tear_down(self) -> None:
        """Delete every profile of the pool on its node (`teardown.py`)."""
        await tear_down(self.h)

    # ------------------------------------------------------------------ the shell's asks

    def stop(self) -> None:
        """Nothing runs beside a BrowserPool's passes."""

    def quiet(self) -> bool:
        return True

    def carried(self) -> BrowserPoolInput:
        h = self.h
        return BrowserPoolInput(metadata=h.metadata, spec=h.spec, settings=h.settings, state=h.s)

    def search_attributes(self) -> dict[str, str | int]:
        return search_attributes(self.h.spec, self.h.s.status)

    def details(self) -> str:
        return details(self.h.name, self.h.spec, self.h.s.generation, self.h.s.status)

    def check_replicas(self, replicas: int) -> None:
        BrowserPoolSpec.model_validate({**self.h.spec.to_json_dict(), "replicas": replicas})

    def rescale(self, replicas: int) -> None:
        if replicas != self.h.spec.replicas:
            self.said("Scaled", f"replicas {self.h.spec.replicas} -> {replicas}")
            self.h.spec = self.h.spec.model_copy(update={"replicas": replicas})
            self.h.s.generation += 1
        self._clear_rejection()
        self.h.dirty = True

    def refuse_scale(self, message: str) -> None:
        self.h.reject(message)
        self.h.show()

    def _clear_rejection(self) -> None:
        if self.h.clear_rejection():
            self.h.show()

    # ------------------------------------------------------------------ its own messages

    def apply(self, request: BrowserApplyRequest) -> Accepted:
        """Update `apply`: the whole spec. A BrowserPool is started plainly
        (`PoolClient.apply`): an update never creates."""
        h = self.h
        # An autoscaled pool keeps the autoscaler's size.
        request = request.model_copy(update={"spec": h.autoscaled_spec(request.spec)})
        changed = request.spec != h.spec or request.metadata != h.metadata
        if request.spec != h.spec:
            h.s.generation += 1
            self.said("Configured", f"spec changed (generation {h.s.generation})")
            self.config_problem = None  # a new spec (another proxy pool?) is tried at once
        h.spec, h.metadata = request.spec, request.metadata
        self._clear_rejection()
        h.dirty = True
        return h.accepted(ApplyResult.CONFIGURED if changed else ApplyResult.UNCHANGED)

    # ------------------------------------------------------------------ leases

    def lease_candidates(self) -> list[Candidate]:
        candidates = self._candidates()
        self._candidates_seen = frozenset(c.id for c in candidates)
        return candidates

    def _candidates(self) -> list[Candidate]:
        last = self._last
        if last is None or last.placement is None:
            return []
        return leasable.candidates(
            self.h.spec,
            last.seen,
            last.placement,
            self._node_labels,
            used=self.h.s.replace_after_use,
        )

    def _offerable_since_settle(self) -> bool:
        """Tickets wait and this pass's look has a candidate their settle did not see (the
        pass offers from the last pass's look): without a pass soon, a quiet pool's ticket
        waits for the resync. Once seen, no second wake (no loop on an unmatched ticket)."""
        if not self.h.s.status.leases_queued:
            return False
        return bool({c.id for c in self._candidates()} - self._candidates_seen)

    def lease_members(self) -> set[str] | None:
        return None if self._last is None else leasable.members(self._last.seen)

    def grows_for(self, selector: Mapping[str, str]) -> bool:
        if self.lease_problem(selector) is not None:
            return False
        return leasable.grows_for(selector, node_labels=self._node_labels)

    def autoscale_members(self) -> set[str] | None:
        """This pass's members (`lease_members` stays the last pass's: the book's reap)."""
        return None if self._seeing is None else leasable.members(self._seeing)

    def scale_down_order(self) -> list[str] | None:
        """The highest slots first: the plan drops the profiles of slots past `replicas`.
        This pass's look: the plan drops them on it."""
        if self._seeing is None:
            return None
        profiles = self._seeing.profiles
        return [p.id for p in sorted(profiles, key=lambda p: (-p.slot, p.id))]

    def lease_problem(self, selector: Mapping[str, str]) -> str | None:
        seen = self._last.seen if self._last is not None else None
        return leasable.problem(
            selector, spec=self.h.spec, seen=seen, node_labels=self._node_labels
        )

    def history_encrypted(self) -> bool:
        return self.h.settings.history_encrypted

    async def lease_connect(self, member: str) -> ConnectInfo:
        """From the node the profile is placed on (its mark's), as the last pass listed it."""
        last = self._last
        profiles = last.seen.profiles if last is not None else ()
        node = next((p.node for p in profiles if p.id == member), None)
        if node is None:
            return ConnectInfo(message=f"profile {member}: on no node the pool listed")
        return await calls.connect_on(node, member)

    def leases_ended(self, ended: Sequence[Ended], *, replace: bool) -> None:
        """A pass is due only if the plan changes: a profile kept only for its lease goes,
        a used one is replaced (`leasable.after_leases`)."""
        last = self._last
        kept = last.placement.kept if last is not None and last.placement is not None else {}
        s = self.h.s
        # A fresh profile is a profile's reset: `onRelease: reset` replaces.
        reset = (self.h.spec.leases or DEFAULT_LEASES).on_release == OnRelease.RESET
        added, due = leasable.after_leases(
            ended, replace=replace or reset, kept=kept, used=s.replace_after_use
        )
        if added:
            s.replace_after_use = [*s.replace_after_use, *added]
            self.h.happened(
                leasable.replaced_after_use(added, reset=reset and not replace, events=s.events)
            )
        if due:
            self.h.dirty = True

    def _say_kept(self, kept: Mapping[str, str]) -> None:
        """Profiles kept for their leases, said once a change (not every pass)."""
        said = frozenset(kept)
        if said != self._kept_said and kept:
            self.said("KeptForLease", leasable.kept_message(kept))
        self._kept_said = said

    # ------------------------------------------------------------------ helpers

    def _failure_limit(self) -> int:
        limit = self.h.spec.health.failure_streak_limit
        return limit or self.h.settings.failure_streak_limit

    def said(self, reason: str, message: str) -> None:
        self.h.happened(Happened(reason, message))

    def warn(self, reason: str, message: str) -> None:
        self.h.happened(Happened(reason, message, warning=True))
