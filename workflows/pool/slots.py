"""The slot book: which slots a pool creates, under which keys, and what is still in flight.

Pure; carried in `PoolState`. Why keys are per slot and reports wait for a later
listing (`inbox`): docs/pools.md, 'Converging, scaling, teardown'.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import Field

from devicepool.api.base import CamelModel
from devicepool.workflows.shared.protocol import BatchReport

__all__ = ["InFlightBatch", "Inbox", "SlotBook", "observed_slots"]


class InFlightBatch(CamelModel):
    """A provisioning child the pool is waiting on."""

    workflow_id: str
    generation: int
    # slots whose creates have not landed yet
    slots: list[int]
    started_at: datetime
    # when the pool last found it still running (it may wait for permits for long)
    checked_at: datetime | None = None
    # slots the pool asked the batch to drop (not counted while asked; the
    # batch's report says which it dropped, or they land like any other)
    withdrawing: list[int] = Field(default_factory=list)

    def check_due(self, every: timedelta) -> datetime:
        return (self.checked_at or self.started_at) + every


class Inbox(CamelModel):
    """Reports received and not yet applied; `mark()` says which ones an observation may apply."""

    created: list[BatchReport] = Field(default_factory=list)
    done: list[BatchReport] = Field(default_factory=list)

    def mark(self) -> tuple[int, int]:
        return len(self.created), len(self.done)


class SlotBook(CamelModel):
    next_slot: int = 0
    next_batch: int = 0
    # batches the pool waits on; their slots not landed yet count toward its size
    in_flight: list[InFlightBatch] = Field(default_factory=list)
    # (generation, slot) of creates that gave up: planned again under the same key.
    retry_slots: list[tuple[int, int]] = Field(default_factory=list)
    # the generation whose create body (osVersion, proxy) is still current
    body_generation: int = 1
    inbox: Inbox = Field(default_factory=Inbox)
    # Devices whose creates landed that no listing has shown yet: pending until a listing
    # shows them or their batch ends (a listing may lag its creates by seconds).
    unseen: list[str] = Field(default_factory=list)

    # ------------------------------------------------------------ reading

    def batch(self, workflow_id: str) -> InFlightBatch | None:
        return next((b for b in self.in_flight if b.workflow_id == workflow_id), None)

    def batch_ids(self) -> list[str]:
        return [b.workflow_id for b in self.in_flight]

    def pending(self, observed_slots: set[str]) -> int:
        """Creates still in flight whose devices the pool has not seen yet (and still wants);
        devices created that no listing has shown yet are `unseen`, apart."""
        return sum(
            1
            for b in self.in_flight
            for slot in b.slots
            if str(slot) not in observed_slots and slot not in b.withdrawing
        )

    def seen(self, listed: Iterable[str]) -> None:
        """A listing showed these devices: none of them is pending any more."""
        shown = set(listed)
        self.unseen = [d for d in self.unseen if d not in shown]

    def withdraw(self, count: int, observed_slots: set[str]) -> dict[str, list[int]]:
        """Ask to drop up to `count` creates that have not landed, newest first: batch id → slots."""
        asked: dict[str, list[int]] = {}
        for batch in reversed(self.in_flight):
            for slot in sorted(batch.slots, reverse=True):
                if count == 0:
                    return asked
                if str(slot) in observed_slots or slot in batch.withdrawing:
                    continue
                batch.withdrawing.append(slot)
                asked.setdefault(batch.workflow_id, []).append(slot)
                count -= 1
        return asked

    def creating(self) -> bool:
        """Whether a batch still has creates that have not landed (not only boots)."""
        return any(b.slots for b in self.in_flight)

    def unreported(self) -> set[str]:
        """Batches in flight that have not reported their end."""
        return set(self.batch_ids()) - self.reported()

    def reported(self) -> set[str]:
        """Batches whose end is reported (in the inbox, not applied yet)."""
        return {r.workflow_id for r in self.inbox.done}

    # ------------------------------------------------------------ planning

    def take(self, n: int, *, generation: int, observed_slots: set[str]) -> tuple[int, list[int]]:
        """Up to `n` slots for one batch, and the generation of their keys. Slots whose create
        gave up come first, under their old key (the provider may have accepted it); dropped
        once their device is seen, or when the create body changed (the key would be a 422)."""
        self.retry_slots = [
            (g, slot)
            for g, slot in self.retry_slots
            if g >= self.body_generation and str(slot) not in observed_slots
        ]
        if self.retry_slots:
            first = self.retry_slots[0][0]
            slots = [s for g, s in self.retry_slots if g == first][:n]
            self.retry_slots = [(g, s) for g, s in self.retry_slots if g != first or s not in slots]
            return first, slots
        slots = list(range(self.next_slot, self.next_slot + n))
        self.next_slot += n
        return generation, slots

    def open_batch(
        self, workflow_id: str, generation: int, slots: list[int], now: datetime
    ) -> None:
        self.in_flight.append(
            InFlightBatch(
                workflow_id=workflow_id, generation=generation, slots=slots, started_at=now
            )
        )

    def next_batch_number(self) -> int:
        number, self.next_batch = self.next_batch, self.next_batch + 1
        return number

    def drop(self, workflow_id: str) -> InFlightBatch | None:
        batch = self.batch(workflow_id)
        if batch is not None:
            self.in_flight.remove(batch)
        return batch

    def body_changed(self, generation: int) -> None:
        """A new create body from `generation` on: older keys are not retried."""
        self.body_generation = generation

    # ------------------------------------------------------------ reports

    def settle_created(self, count: int, listed: Iterable[str] = ()) -> None:
        """Apply the first `count` `batch_created` reports: their slots are observed from now on
        (the devices the last listing, `listed`, does not show yet stay pending: `unseen`)."""
        created, self.inbox.created = self.inbox.created[:count], self.inbox.created[count:]
        shown = set(listed)
        for report in created:
            batch = self.batch(report.workflow_id)
            if batch is not None:
                landed = [report.created[s] for s in batch.slots if s in report.created]
                self.unseen += [d for d in landed if d not in shown and d not in self.unseen]
                self._retry_failed(batch, report)
                settled = set(report.created) | set(report.failed_slots) | set(report.withdrawn)
                batch.slots = [slot for slot in batch.slots if slot not in settled]
                batch.withdrawing = [s for s in batch.withdrawing if s in batch.slots]

    def finish(self, count: int) -> list[BatchReport]:
        """Apply the first `count` `batch_done` reports: their batches leave the book."""
        done, self.inbox.done = self.inbox.done[:count], self.inbox.done[count:]
        for report in done:
            # Its devices booted (or failed, or vanished) by now: a listing that lags
            # that long is not waited for (a device removed unseen must not count forever).
            ended = set(report.created.values())
            self.unseen = [d for d in self.unseen if d not in ended]
            batch = self.drop(report.workflow_id)
            if batch is not None and not report.cancelled:
                self._retry_failed(batch, report)
        return done

    def due_for_check(self, *, now: datetime, every: timedelta) -> list[str]:
        """Batches not seen running for `every`, whose end has not been reported."""
        reported = self.reported()
        return [
            b.workflow_id
            for b in self.in_flight
            if b.check_due(every) <= now and b.workflow_id not in reported
        ]

    def next_check_at(self, every: timedelta) -> datetime | None:
        return min((b.check_due(every) for b in self.in_flight), default=None)

    def still_running(self, workflow_ids: Iterable[str], now: datetime) -> None:
        for workflow_id in workflow_ids:
            batch = self.batch(workflow_id)
            if batch is not None:
                batch.checked_at = now

    def lost(self, workflow_id: str) -> list[int]:
        """A batch ended without reporting: its creates are planned again under the same keys
        (one may have landed: its device is then found by its key)."""
        batch = self.drop(workflow_id)
        if batch is None:
            return []
        self.retry_slots += [(batch.generation, slot) for slot in batch.slots]
        return batch.slots

    def _retry_failed(self, batch: InFlightBatch, report: BatchReport) -> None:
        self.retry_slots += [
            (batch.generation, slot) for slot in batch.slots if slot in report.failed_slots
        ]


def observed_slots(labels: Iterable[dict[str, str]], key: str, incarnation: str = "") -> set[str]:
    """The slots (as strings) of the listed devices this incarnation created: labels are
    `<incarnation>-<slot>` (`api.names.slot_label`), so an adopted device shows none."""
    prefix = f"{incarnation}-" if incarnation else ""
    values = (lab.get(key) for lab in labels)
    return {v.removeprefix(prefix) for v in values if v is not None and v.startswith(prefix)}
