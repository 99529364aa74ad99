"""The slot book and the planner under random interleavings (a hypothesis state machine).

A model provider keeps devices by idempotency key `(generation, slot)`; batches
land their creates (or give up on them) in any order, report late or never,
and the pool's passes list, apply the reports that arrived before the listing,
plan and start batches, while the desired size changes. Invariants: the
provider never holds more live devices than the largest desired size seen, and
no slot ever has two devices (a create planned again under a new key while the
old one could still land would break both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from devicepool.activities.models import DeviceInfo
from devicepool.workflows.pool.plan import plan_pool
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.shared.protocol import BatchReport

NOW = datetime(2026, 12, 1, tzinfo=UTC)
BATCH = 4


@dataclass
class Batch:
    id: str
    generation: int
    pending: list[int]
    created: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    ended: bool = False


class Pool(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book = SlotBook()
        self.generation, self.replicas, self.most = 1, 0, 0
        # key -> (device id, slot, alive)
        self.provider: dict[tuple[int, int], tuple[str, int, bool]] = {}
        self.batches: list[Batch] = []
        self.n = 0

    # ------------------------------------------------------------ the world

    @rule(replicas=st.integers(0, 12))
    def scale(self, replicas: int) -> None:
        self.replicas, self.generation = replicas, self.generation + 1
        self.most = max(self.most, replicas)

    @precondition(lambda self: any(b.pending for b in self.batches))
    @rule(data=st.data(), lands=st.booleans())
    def create_finishes(self, data: st.DataObject, lands: bool) -> None:
        self._finish_create(
            data.draw(st.sampled_from([b for b in self.batches if b.pending])), lands
        )

    def _finish_create(self, batch: Batch, lands: bool) -> None:
        slot = batch.pending.pop(0)
        key = (batch.generation, slot)
        if lands or key in self.provider:
            if key not in self.provider:
                self.n += 1
                self.provider[key] = (f"d{self.n}", slot, True)
            if not batch.ended:
                batch.created[slot] = self.provider[key][0]
        elif not batch.ended:
            batch.failed[slot] = "lost with a worker"

    @precondition(lambda self: any(b.created and not b.ended for b in self.batches))
    @rule(data=st.data())
    def batch_reports_created(self, data: st.DataObject) -> None:
        batch = data.draw(st.sampled_from([b for b in self.batches if b.created and not b.ended]))
        self.book.inbox.created.append(self._report(batch))

    @precondition(lambda self: any(not b.pending and not b.ended for b in self.batches))
    @rule(data=st.data())
    def batch_reports_its_end(self, data: st.DataObject) -> None:
        batch = data.draw(
            st.sampled_from([b for b in self.batches if not b.pending and not b.ended])
        )
        batch.ended = True
        self.book.inbox.done.append(self._report(batch))

    @precondition(lambda self: any(not b.ended for b in self.batches))
    @rule(data=st.data())
    def batch_is_terminated_by_hand(self, data: st.DataObject) -> None:
        """It ends without a report, creates possibly still on their way; the pool finds out."""
        batch = data.draw(st.sampled_from([b for b in self.batches if not b.ended]))
        batch.ended = True
        if self.book.batch(batch.id) is not None:
            self.book.lost(batch.id)

    @precondition(lambda self: any(b.ended and b.pending for b in self.batches))
    @rule(data=st.data())
    def a_lost_batchs_create_lands_late(self, data: st.DataObject) -> None:
        # A create already sent when the batch's run was terminated still reaches the provider.
        self._finish_create(
            data.draw(st.sampled_from([b for b in self.batches if b.ended and b.pending])), True
        )

    # ------------------------------------------------------------ the pool's pass

    @rule()
    def reconcile(self) -> None:
        created_mark, done_mark = self.book.inbox.mark()
        devices = [
            DeviceInfo(id=d, status="ready", created_at=NOW, labels={"devicepool-slot": str(s)})
            for d, s, alive in self.provider.values()
            if alive
        ]
        observed = {d.labels["devicepool-slot"] for d in devices}
        self.book.settle_created(created_mark)
        self.book.finish(done_mark)
        plan = plan_pool(
            replicas=self.replicas,
            devices=devices,
            in_flight=self.book.pending(observed),
            now=NOW,
            idle_grace=timedelta(0),
        )
        for key, (device, slot, _alive) in list(self.provider.items()):
            if device in plan.terminate:
                self.provider[key] = (device, slot, False)
        count = plan.create
        while count > 0:
            generation, slots = self.book.take(
                min(BATCH, count), generation=self.generation, observed_slots=observed
            )
            batch_id = f"b{self.book.next_batch_number()}"
            self.book.open_batch(batch_id, generation, slots, NOW)
            self.batches.append(Batch(batch_id, generation, list(slots)))
            count -= len(slots)

    def _report(self, batch: Batch) -> BatchReport:
        return BatchReport(
            workflow_id=batch.id,
            slots=[*batch.created, *batch.failed, *batch.pending],
            created=dict(batch.created),
            failed_slots=dict(batch.failed),
            unanswered_slots=list(batch.failed),
        )

    # ------------------------------------------------------------ invariants

    @invariant()
    def never_more_than_the_largest_size_asked(self) -> None:
        assert sum(alive for _, _, alive in self.provider.values()) <= self.most

    @invariant()
    def no_slot_has_two_devices(self) -> None:
        slots = [slot for _, slot, _ in self.provider.values()]
        assert len(slots) == len(set(slots)), self.provider


Pool.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
TestSlotBook = Pool.TestCase
