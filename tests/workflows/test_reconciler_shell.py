"""The reconciler shell with a toy kind: the pass, scale (update and signal), wake, the
shared queries, refuse-while-deleting, and the teardown loop with `TeardownBlocked`.

The toy keeps `have` members: each pass makes `replicas - have` of them. Its teardown is
blocked once (shown as `TeardownBlocked=True`), then done.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import Field
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from devicepool.api.base import CamelModel
from devicepool.api.v1beta1 import (
    ConditionStatus,
    ConditionType,
    DevicePoolStatus,
    ObjectMeta,
    Phase,
)
from devicepool.testing import eventually
from devicepool.workflows.reconciler import lease_checks, leasing
from devicepool.workflows.reconciler.conditions import ConditionUpdate
from devicepool.workflows.reconciler.events import Happened, PoolEvent
from devicepool.workflows.reconciler.kind import Host, TeardownBlocked
from devicepool.workflows.reconciler.lease_messages import (
    LeaseAnswer,
    LeaseRequest,
    LeasesView,
    ReleaseAnswer,
    ReleaseRequest,
    RenewRequest,
    TicketRef,
)
from devicepool.workflows.reconciler.lease_records import Candidate, Ended
from devicepool.workflows.reconciler.leases import LeaseBook
from devicepool.workflows.reconciler.messages import Accepted, ScaleRequest
from devicepool.workflows.reconciler.shell import Reconciler
from devicepool.workflows.reconciler.teardown import until_torn_down
from tests.helpers.workflow_stack import stand_in_worker


class ToySpec(CamelModel):
    replicas: int = 0


class ToyState(CamelModel):
    generation: int = 1
    deleting: bool = False
    created_at: datetime | None = None
    events: list[PoolEvent] = Field(default_factory=list)
    status: DevicePoolStatus = Field(default_factory=DevicePoolStatus)
    have: int = 0
    passes: int = 0
    sweeps: int = 0
    leases: LeaseBook = Field(default_factory=LeaseBook)
    ended: int = 0


class ToyInput(CamelModel):
    metadata: ObjectMeta
    spec: ToySpec
    state: ToyState | None = None


@dataclass(frozen=True)
class Seen:
    replicas: int
    have: int


class ToyKind:
    member = "toy"

    def __init__(self, host: Host[ToySpec, ToyState]) -> None:
        self.h = host

    async def observe(self) -> Seen:
        self.h.s.passes += 1
        return Seen(replicas=self.h.spec.replicas, have=self.h.s.have)

    def decide(self, seen: Seen) -> int:
        return seen.replicas - seen.have

    async def act(self, seen: Seen, decision: int) -> int:
        self.h.s.have += decision
        return self.h.s.have

    def publish(self, outcome: int) -> None:
        self.h.s.status = self.h.s.status.model_copy(
            update={
                "desired_replicas": self.h.spec.replicas,
                "ready_devices": outcome,
                "phase": Phase.READY,
                "observed_generation": self.h.s.generation,
            }
        )
        self.h.show()

    async def wait(self, outcome: int) -> None:
        await workflow.wait_condition(lambda: self.h.dirty)
        self.h.dirty = False

    def stop(self) -> None:
        pass

    async def tear_down(self) -> None:
        async def step() -> TeardownBlocked | int:
            self.h.s.sweeps += 1
            if self.h.s.sweeps <= 1:
                return TeardownBlocked("Stuck", "the first sweep is refused")
            return self.h.s.sweeps

        def blocked(block: TeardownBlocked) -> None:
            self.h.set_condition(
                ConditionUpdate(
                    ConditionType.TEARDOWN_BLOCKED,
                    ConditionStatus.TRUE,
                    block.reason,
                    block.message,
                )
            )

        await until_torn_down(
            step,
            blocked=blocked,
            hand_over=self.h.hand_over_if_due,
            first=timedelta(milliseconds=100),
            most=timedelta(seconds=1),
            summary="sweep again",
        )
        self.h.happened(Happened("Deleted", "no toy is left"))

    def quiet(self) -> bool:
        return True

    def carried(self) -> ToyInput:
        return ToyInput(metadata=self.h.metadata, spec=self.h.spec, state=self.h.s)

    def search_attributes(self) -> dict[str, str | int]:
        return {}

    def details(self) -> str:
        return f"have {self.h.s.have}"

    def check_replicas(self, replicas: int) -> None:
        if replicas < 0:
            raise ValueError("replicas must be 0 or more")

    def rescale(self, replicas: int) -> None:
        self.h.spec = self.h.spec.model_copy(update={"replicas": replicas})
        self.h.s.generation += 1
        self.h.dirty = True

    def refuse_scale(self, message: str) -> None:
        self.h.happened(Happened("SpecRejected", message, warning=True))

    # Its toys are its members: `toy-0`.. `toy-{have-1}`, each leasable; "color" never matches.
    def lease_candidates(self) -> list[Candidate]:
        return [Candidate(f"toy-{i}", {"toy": str(i)}) for i in range(self.h.s.have)]

    def lease_members(self) -> set[str] | None:
        return {f"toy-{i}" for i in range(self.h.s.have)}

    def lease_problem(self, selector: Mapping[str, str]) -> str | None:
        return "toys have no color" if "color" in selector else None

    def leases_ended(self, ended: Sequence[Ended], *, replace: bool) -> None:
        self.h.s.ended += len(ended)


@workflow.defn(name="ToyPool")
class ToyPoolWorkflow(Reconciler[ToySpec, ToyState]):
    @workflow.init
    def __init__(self, input: ToyInput) -> None:
        Reconciler.__init__(
            self, metadata=input.metadata, spec=input.spec, state=input.state or ToyState()
        )
        self.kind = ToyKind(self)

    @workflow.run
    async def run(self, input: ToyInput) -> dict[str, Any]:
        if self.s.created_at is None:
            self.s.created_at = workflow.now()
        await self.reconcile()
        return self.s.status.to_json_dict()


@asynccontextmanager
async def toy(env: WorkflowEnvironment, state: ToyState | None = None) -> AsyncIterator[Any]:
    """A toy pool of 2 on a worker of its own; its handle."""
    client, queue = env.client, f"toy-{uuid.uuid4().hex[:8]}"
    async with stand_in_worker(client, queue, ToyPoolWorkflow):
        yield await client.start_workflow(
            ToyPoolWorkflow.run,
            ToyInput(metadata=ObjectMeta(name="toy"), spec=ToySpec(replicas=2), state=state),
            id=f"toy/{queue}",
            task_queue=queue,
        )


async def test_a_toy_kind_on_the_shell(env: WorkflowEnvironment) -> None:
    async with toy(env) as handle:

        async def ready(n: int) -> bool:
            status = await handle.query("status")
            return bool(status.get("readyDevices") == n)

        await eventually(lambda: ready(2), what="two toys", timeout=20)
        accepted = await handle.execute_update(
            "scale_update", ScaleRequest(replicas=4), result_type=Accepted
        )
        assert (accepted.generation, accepted.replicas) == (2, 4)
        await eventually(lambda: ready(4), what="four toys", timeout=20)

        # The signal's plain JSON is checked: refused, said as an event, never applied.
        await handle.signal("scale", {"replicas": -1})
        await handle.signal("scale", {"replicas": 5})
        await eventually(lambda: ready(5), what="five toys", timeout=20)
        events = (await handle.query("events"))["events"]
        assert [e["reason"] for e in events] == ["SpecRejected"]

        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("scale_update", ScaleRequest(replicas=-2))
        spec = await handle.query("spec")
        assert (spec["spec"], spec["generation"]) == ({"replicas": 5}, 3)
        assert "createdAt" in spec

        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        status = await handle.query("status")
        events = (await handle.query("events"))["events"]
    assert [e["reason"] for e in events] == ["SpecRejected", "Deleting", "Deleted"]
    assert events[1]["message"] == "removing every toy of the pool"
    assert status["phase"] == Phase.DELETING.value
    blocked = [c for c in status["conditions"] if c["type"] == "TeardownBlocked"]
    assert blocked and blocked[0]["reason"] == "Stuck"


async def test_a_scale_while_deleting_is_refused(env: WorkflowEnvironment) -> None:
    """A toy whose teardown never ends stays deleting: its scale update is refused."""
    state = ToyState(deleting=True, sweeps=-10_000)  # handed over while deleting
    async with toy(env, state) as handle:
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("scale_update", ScaleRequest(replicas=3))
        assert "being deleted" in str(refused.value.cause)
        await handle.terminate("test over")


async def test_leases_on_a_toy_kind(env: WorkflowEnvironment) -> None:
    """The shell's lease updates on a kind of 2 toys: granted, refused before history,
    queued, offered on a release, and an offered ticket released by its own id."""

    async def refused(request: LeaseRequest) -> str:
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update("lease", request, result_type=LeaseAnswer)
        assert isinstance(failed.value.cause, ApplicationError)
        return str(failed.value.cause.type)

    async with toy(env) as handle:

        async def two() -> bool:
            return bool((await handle.query("status")).get("readyDevices") == 2)

        await eventually(two, what="two toys", timeout=20)
        first = await handle.execute_update(
            "lease", LeaseRequest(holder="a", selector={"toy": "0"}), result_type=LeaseAnswer
        )
        assert first.granted is not None and first.granted.device == "toy-0"
        second = await handle.execute_update("lease", LeaseRequest(), result_type=LeaseAnswer)
        assert second.granted is not None and second.granted.device == "toy-1"
        length = (await handle.describe()).raw_description.workflow_execution_info.history_length
        assert await refused(LeaseRequest(selector={"color": "red"})) == "LeaseRefused"
        assert await refused(LeaseRequest()) == "LeaseNotGranted"  # none free, no wait
        after = (await handle.describe()).raw_description.workflow_execution_info.history_length
        assert after == length  # refused by the validators: nothing in history

        queued = await handle.execute_update(
            "lease", LeaseRequest(holder="b", wait=timedelta(minutes=1)), result_type=LeaseAnswer
        )
        assert queued.ticket is not None and queued.position == 1
        back = await handle.execute_update(
            "release", ReleaseRequest(lease=first.granted.lease), result_type=ReleaseAnswer
        )
        assert (back.reason, back.released_now) == ("Released", True)
        again = await handle.execute_update(
            "release", ReleaseRequest(lease=first.granted.lease), result_type=ReleaseAnswer
        )
        assert (again.reason, again.released_now) == ("Released", False)  # idempotent
        offered = await handle.query(
            "lease_ticket", TicketRef(ticket=queued.ticket), result_type=LeaseAnswer
        )
        assert offered.granted is not None and offered.granted.device == "toy-0"
        # Its holder gives up: the ticket's id releases the lease offered to it.
        dropped = await handle.execute_update(
            "release", ReleaseRequest(lease=queued.ticket), result_type=ReleaseAnswer
        )
        # ...ended as given up, not used (`onRelease: replace` replaces no device for it).
        assert (dropped.reason, dropped.released_now) == ("Cancelled", True)
        twice = await handle.execute_update(
            "release", ReleaseRequest(lease=queued.ticket), result_type=ReleaseAnswer
        )
        assert (twice.reason, twice.released_now) == ("Cancelled", False)  # idempotent too
        view = await handle.query("leases", result_type=LeasesView)
        assert [x.device for x in view.leases] == ["toy-1"] and view.tickets == []
        status = await handle.query("status")
        assert (status["leasedDevices"], status["leasesQueued"]) == (1, 0)

        # An offer not yet claimed when the pool is deleted is withdrawn, not claimable.
        third = await handle.execute_update("lease", LeaseRequest(), result_type=LeaseAnswer)
        assert third.granted is not None and third.granted.device == "toy-0"
        late = await handle.execute_update(
            "lease", LeaseRequest(wait=timedelta(minutes=1)), result_type=LeaseAnswer
        )
        assert late.ticket is not None
        await handle.execute_update(
            "release", ReleaseRequest(lease=third.granted.lease), result_type=ReleaseAnswer
        )
        await handle.cancel()

        async def deleting() -> bool:
            return bool((await handle.query("status"))["phase"] == Phase.DELETING.value)

        await eventually(deleting, what="the cancel taken", timeout=20)
        with pytest.raises(WorkflowUpdateFailedError) as claim:
            await handle.execute_update(
                "lease_claim", TicketRef(ticket=late.ticket), result_type=LeaseAnswer
            )
        assert isinstance(claim.value.cause, ApplicationError)
        assert claim.value.cause.type == "LeaseRefused"
        # Deleted with a lease held: the teardown waits for it (`delete --force` ends it).
        # It ends cancelled, or completed by a run it handed over to (the session server
        # suggests hand-overs early).
        await handle.execute_update("end_leases", result_type=str)
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
        events = (await handle.query("events"))["events"]
    counts = {e["reason"]: e["count"] for e in events}
    # Leases are combined as Kubernetes combines similar events: one each, counted.
    assert counts["Leased"] == 5 and counts["LeaseReleased"] == 5  # the last: PoolDeleted
    assert "WaitingForLeases" in counts


async def test_a_claimed_ticket_s_id_releases_its_lease(env: WorkflowEnvironment) -> None:
    """A script that only knows the ticket it queued with (the stock `temporal` CLI) gives
    back the lease that ticket was granted and claimed: said released, and it is."""
    async with toy(env) as handle:

        async def two() -> bool:
            return bool((await handle.query("status")).get("readyDevices") == 2)

        await eventually(two, what="two toys", timeout=20)
        held = [
            await handle.execute_update("lease", LeaseRequest(), result_type=LeaseAnswer)
            for _ in range(2)
        ]
        queued = await handle.execute_update(
            "lease", LeaseRequest(wait=timedelta(minutes=1)), result_type=LeaseAnswer
        )
        assert held[0].granted is not None and queued.ticket is not None
        await handle.execute_update(
            "release", ReleaseRequest(lease=held[0].granted.lease), result_type=ReleaseAnswer
        )
        claimed = await handle.execute_update(
            "lease_claim", TicketRef(ticket=queued.ticket), result_type=LeaseAnswer
        )
        assert claimed.granted is not None
        back = await handle.execute_update(
            "release", ReleaseRequest(lease=queued.ticket), result_type=ReleaseAnswer
        )
        assert (back.reason, back.released_now) == ("Released", True)
        view = await handle.query("leases", result_type=LeasesView)
        assert claimed.granted.lease not in [x.id for x in view.leases]


async def test_lease_updates_past_the_runs_budget_are_turned_away(
    env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a run's hand-over waits for its pass, lease updates past the budget are refused
    (`LeaseBusy`, sent again by clients) before Temporal's 2,000 a run refuses them all."""
    monkeypatch.setattr(lease_checks, "UPDATE_BUDGET", 3)
    monkeypatch.setattr(leasing, "UPDATES_PER_RUN", 1000)  # no hand-over in this test
    async with toy(env) as handle:

        async def two() -> bool:
            return bool((await handle.query("status")).get("readyDevices") == 2)

        await eventually(two, what="two toys", timeout=20)
        held = await handle.execute_update("lease", LeaseRequest(), result_type=LeaseAnswer)
        assert held.granted is not None
        for _ in range(2):
            await handle.execute_update(
                "renew", RenewRequest(lease=held.granted.lease), result_type=LeaseAnswer
            )
        with pytest.raises(WorkflowUpdateFailedError) as busy:
            await handle.execute_update(
                "renew", RenewRequest(lease=held.granted.lease), result_type=LeaseAnswer
            )
        assert isinstance(busy.value.cause, ApplicationError)
        assert busy.value.cause.type == "LeaseBusy"
        # The pool itself still takes its other updates.
        await handle.execute_update("scale_update", ScaleRequest(replicas=3), result_type=Accepted)
