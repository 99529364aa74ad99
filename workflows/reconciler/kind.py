"""What a pool kind brings to the reconciler shell: typed protocols, and the teardown's words.

Pure (no Temporal); how they fit: docs/architecture.md, 'The reconciler shell: how a kind plugs in'.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from devicepool.activities.connect_models import ConnectInfo
from devicepool.api.v1beta1 import ObjectMeta
from devicepool.workflows.reconciler.conditions import ConditionUpdate
from devicepool.workflows.reconciler.events import Happened, PoolEvent
from devicepool.workflows.reconciler.lease_records import Candidate, Ended
from devicepool.workflows.reconciler.leases import LeaseBook
from devicepool.workflows.reconciler.messages import Accepted, ApplyResult

__all__ = ["Carried", "Host", "Kind", "Spec", "TeardownBlocked", "TryAgain"]

SeenT = TypeVar("SeenT")
DecisionT = TypeVar("DecisionT")
OutcomeT = TypeVar("OutcomeT")
SpecT = TypeVar("SpecT", bound="Spec")
StateT = TypeVar("StateT", bound="Carried")


class Spec(Protocol):
    """The parts of a kind's spec the shell reads."""

    @property
    def replicas(self) -> int: ...

    def to_json_dict(self) -> dict[str, Any]: ...


class Carried(Protocol):
    """The parts of a kind's carried state the shell reads and writes."""

    generation: int
    deleting: bool
    created_at: datetime | None
    events: list[PoolEvent]
    # The kind's status model: `phase`, `conditions`, `to_json_dict()`, the lease counts.
    status: Any
    # Who holds which member, who waits (`reconciler/leases.py`).
    leases: LeaseBook


class Kind(Protocol[SeenT, DecisionT, OutcomeT]):
    """A kind's core: its pass, its teardown, and its answers to the shell."""

    # What the pool keeps, in its events ("removing every device of the pool").
    member: str

    async def observe(self) -> SeenT:
        """Look at the world; what this pass knows, frozen."""

    def decide(self, seen: SeenT) -> DecisionT: ...

    async def act(self, seen: SeenT, decision: DecisionT) -> OutcomeT:
        """Carry the decision out; what the status shows and the wait waits on."""

    def publish(self, outcome: OutcomeT) -> None:
        """Write the status (the shell's `show` writes what changed of it)."""

    async def wait(self, outcome: OutcomeT) -> None:
        """Until the next pass is due (a message sets the shell's `dirty`)."""

    def stop(self) -> None:
        """Drop what runs beside the passes (a watch): the pool is deleted or hands over."""

    async def tear_down(self) -> None:
        """Remove every member; it never gives up (`teardown.until_torn_down`)."""

    def quiet(self) -> bool:
        """Nothing of this run is under way that a hand-over would lose."""

    def carried(self) -> object:
        """The next run's input (continue-as-new)."""

    def search_attributes(self) -> Mapping[str, str | int]: ...

    def details(self) -> str:
        """The Web UI's Markdown (`set_current_details`)."""

    def check_replicas(self, replicas: int) -> None:
        """Raise `ValueError` if the kind refuses `replicas`."""

    def rescale(self, replicas: int) -> None:
        """An accepted scale (update or signal): the spec's replicas are these now."""

    def refuse_scale(self, message: str) -> None:
        """A `scale` signal refused (an update's validator refuses before history)."""

    def lease_candidates(self) -> Sequence[Candidate]:
        """Members ready to lease now (leased or not), in the order the kind prefers them;
        none while the kind does not know its members (a failed listing)."""

    def lease_members(self) -> Collection[str] | None:
        """Every member the pool has now (None: not known; no lease ends for it)."""

    def lease_problem(self, selector: Mapping[str, str]) -> str | None:
        """Why no member of the pool can ever match `selector` (None: one can)."""

    def grows_for(self, selector: Mapping[str, str]) -> bool:
        """Whether a member the pool makes could serve a ticket of `selector`: only such a
        ticket is demand to an autoscaled pool (one no new member can serve rents nothing)."""

    def autoscale_members(self) -> Collection[str] | None:
        """The members the autoscaler judges: those of the pass's own look (a BrowserPool's
        `lease_members` are the last pass's). None: not known (the size is held)."""

    def scale_down_order(self) -> Sequence[str] | None:
        """The members in the order the kind's scale-down takes them, when it cannot be told
        which to take (a BrowserPool drops its highest slots): an autoscaled pool then
        shrinks only while those first are idle long enough. None: the kind takes what it is
        allowed (a DevicePool keeps the others from its pick)."""

    def leases_ended(self, ended: Sequence[Ended], *, replace: bool) -> None:
        """Leases ended: their members are free again (`replace`: replace them)."""

    def history_encrypted(self) -> bool:
        """Whether the worker encrypts history (`PoolSettings.history_encrypted`): only then
        is connect info answered (update `lease_connect`)."""

    async def lease_connect(self, member: str) -> ConnectInfo:
        """A leased member's connect info, read now by the kind's activity."""


class Host(Protocol[SpecT, StateT]):
    """What the shell offers a kind's core: its resource and the shared writes."""

    metadata: ObjectMeta
    spec: SpecT
    s: StateT
    # A pass is due with a fresh look (`dirty`), or a new plan on what is known (`replan`).
    dirty: bool
    replan: bool

    @property
    def name(self) -> str: ...

    def happened(self, *happened: Happened) -> None: ...

    def accepted(self, result: ApplyResult | None = None) -> Accepted:
        """What an update answers: the generation and replicas now."""

    def set_condition(self, condition: ConditionUpdate) -> None: ...

    def reject(self, message: str) -> None: ...

    def clear_rejection(self) -> bool: ...

    def show(self) -> None: ...

    def show_details(self) -> None: ...

    async def hand_over_if_due(self) -> None: ...

    def autoscaled_spec(self, new: SpecT) -> SpecT:
        """An applied spec, its `replicas` the autoscaler's size while it sets `autoscale`."""


@dataclass(frozen=True)
class TeardownBlocked:
    """A teardown step that cannot finish until its cause is fixed: shown as
    `TeardownBlocked=True` with this reason; tried again, backing off."""

    reason: str
    message: str


@dataclass(frozen=True)
class TryAgain:
    """A teardown step not done, and no block (members still on their way out)."""

    after: timedelta
    summary: str = "try again"
