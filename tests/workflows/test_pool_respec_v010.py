"""A spec change while a pass awaits its terminations, on a run from v0.1.0 (issue 37).

v0.1.0 took a pass's creates from its slot book once the terminations returned
(`_act`, then `_start_batch` until the plan's creates were handed out), under
the generation the spec had by then and with the book as it was then: a new
create body (`osVersion`, proxy) had already dropped the retries of older
keys. This build decides the batches before the terminations. When the spec
changed in between, the old branch of `respec-during-terminations-holds-batches`
must start what v0.1.0 started: the same child ids (a replay compares them) and
the same generation in each create's idempotency key (a replay does not compare
inputs: under another generation a create that timed out is not found again, and
a second device is rented for its slot).

The oracle is v0.1.0's loop (`git show 8a87418:workflows/pool.py`, `_act` and
`_start_batch`), ported below; `SlotBook.take` is the same code in v0.1.0
(`git show 8a87418:workflows/slots.py`). `act.carry_out` (the pass's act) runs here
without a server: its terminations are a stand-in during which the spec changes
(and a health report may land), and `workflow.patched` answers False, as it does
replaying a history without the marker.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from devicepool.activities.models import PoolSettings
from devicepool.api import names
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool import act
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.kind import DevicePoolKind
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.shared.protocol import HealthReport
from tests.helpers.decisions import decide_pass

NOW = datetime(2026, 12, 5, 4, 0, tzinfo=UTC)
SETTINGS = PoolSettings(provision_batch_size=4)
Started = tuple[str, int, list[int], bool]  # child id, generation of its keys, slots, replacement


def spec(**changes: object) -> DevicePoolSpec:
    base = {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": 1}
    return DevicePoolSpec.model_validate({**base, **changes})


def v0_1_0_started(
    book: SlotBook, *, count: int, owed: int, generation: int, observed: set[str]
) -> tuple[list[Started], SlotBook, int]:
    """v0.1.0's `_act` after its terminations, on a copy of `book` (the pool's book as it
    was then): `while count > 0: count -= self._start_batch(count)`. Returns what it
    started, its book afterwards and what it still owed."""
    slots = book.model_copy(deep=True)
    started: list[Started] = []
    while count > 0:
        # _start_batch(count)
        n = min(SETTINGS.provision_batch_size, count, owed or count)
        taken_generation, taken = slots.take(n, generation=generation, observed_slots=observed)
        replacement = owed > 0
        owed -= len(taken) if owed else 0
        child_id = names.provision_workflow_id("p", generation, slots.next_batch_number())
        slots.open_batch(child_id, taken_generation, taken, NOW)
        started.append((child_id, taken_generation, taken, replacement))
        count -= len(taken)
    return started, slots, owed


def a_pass(
    monkeypatch: pytest.MonkeyPatch,
    *,
    book: SlotBook,
    generation: int,
    replicas: int,
    changed: DevicePoolSpec,
    owed: int = 0,
    reported: int = 0,
) -> None:
    """One pass of a v0.1.0 run (no patch marker): doomed device `x` is terminated, and
    while it is, the spec becomes `changed` (and a health report removes `reported`
    devices). Asserts the pass started what v0.1.0 started and left the book as it did."""
    monkeypatch.setattr(act.workflow, "now", lambda: NOW)
    monkeypatch.setattr(act.workflow, "patched", lambda patch_id: False)
    monkeypatch.setattr(act.children, "batch_input", lambda **kw: kw)
    monkeypatch.setattr(act.children, "incarnation", lambda: "")
    before = spec(replicas=replicas)
    state = PoolState(
        generation=generation, slots=book.model_copy(deep=True), replacements_owed=owed
    )
    state.fates.set(["x"], Fate.DOOMED)
    pool: Any = DevicePoolKind.__new__(DevicePoolKind)
    pool.h = SimpleNamespace(
        metadata=ObjectMeta(name="p"), name="p", spec=before, s=state, dirty=False
    )
    pool.h.happened = lambda *_: None
    pool.worker_settings, pool.devices, pool.reported_leaving = SETTINGS, [], []
    pool.reported_gone = set()
    started: list[Started] = []
    pool.neighbours = SimpleNamespace(withdraw=lambda *_: None, later=started.append)

    def start_child(k: Any, child_id: str, input: dict[str, Any]) -> Started:
        return child_id, input["generation"], input["slots"], input["replacement"]

    monkeypatch.setattr(act, "start_child", start_child)

    async def terminate(k: Any, device_ids: list[str], **_: object) -> None:
        assert device_ids == ["x"]
        pool.respec(changed, said=False)
        if reported:
            gone = {f"r{i}": "offline for 30s" for i in range(reported)}
            report = HealthReport(
                checked_at=NOW,
                devices=3,
                unhealthy=reported,
                max_unhealthy=3,
                paused=False,
                terminated=gone,
            )
            state.take_health(report, max_unhealthy="3")

    monkeypatch.setattr(act, "terminate", terminate)
    decision = decide_pass(
        [],
        replicas=replicas,
        generation=generation,
        doomed=state.doomed,
        slots=state.slots,
        replacements_owed=owed,
        settings=SETTINGS,
        now=NOW,
    )
    assert decision.terminate == ["x"] and decision.batches, decision

    asyncio.run(act.carry_out(pool, decision))

    # v0.1.0: the book as it was before the pass, changed by the spec change alone.
    old = book.model_copy(deep=True)
    if changed.os_version != before.os_version:
        old.body_changed(generation + 1)
    want, want_book, want_owed = v0_1_0_started(
        old,
        count=decision.plan.create,
        owed=owed + reported,
        generation=generation + 1,
        observed=set(),
    )
    assert started == want
    live = pool.s.slots
    assert [(b.workflow_id, b.generation, b.slots) for b in live.in_flight] == [
        (b.workflow_id, b.generation, b.slots) for b in want_book.in_flight
    ]
    assert (live.next_slot, live.next_batch, live.retry_slots) == (
        want_book.next_slot,
        want_book.next_batch,
        want_book.retry_slots,
    )
    assert pool.s.replacements_owed == want_owed


def test_a_scale_keeps_a_retried_slot_under_the_key_v0_1_0_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Case A: a retry slot of generation 1, a scale during the terminations (generation 2,
    same body). v0.1.0 retried slot 0 under generation 1's key (`provision/2-0`)."""
    book = SlotBook(next_slot=1, next_batch=1, retry_slots=[(1, 0)], body_generation=1)
    a_pass(monkeypatch, book=book, generation=1, replicas=2, changed=spec(replicas=5))


def test_a_new_os_version_drops_the_retry_as_v0_1_0_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """Case B: a retry slot and 2 fresh planned; the osVersion changes during the
    terminations. v0.1.0's book no longer retried the old key: one batch of 3 fresh slots."""
    book = SlotBook(next_slot=1, next_batch=1, retry_slots=[(1, 0)], body_generation=1)
    a_pass(
        monkeypatch, book=book, generation=1, replicas=3, changed=spec(replicas=3, osVersion="15")
    )


def test_a_new_os_version_without_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    book = SlotBook(next_slot=2, next_batch=1)
    a_pass(
        monkeypatch, book=book, generation=1, replicas=3, changed=spec(replicas=3, osVersion="15")
    )


def test_retries_of_two_generations_and_a_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries of generations 1 and 2, generation 3 while terminating: each retried under its own."""
    book = SlotBook(next_slot=6, next_batch=4, retry_slots=[(1, 0), (2, 4), (2, 5)])
    a_pass(monkeypatch, book=book, generation=2, replicas=4, changed=spec(replicas=6))


def test_retries_of_two_generations_and_a_new_body_of_the_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The body changed at generation 2 already (its retries stand), and again now."""
    book = SlotBook(next_slot=6, next_batch=4, retry_slots=[(2, 4), (2, 5)], body_generation=2)
    a_pass(
        monkeypatch, book=book, generation=2, replicas=4, changed=spec(replicas=4, osVersion="15")
    )


@pytest.mark.parametrize(
    "changed",
    [{"replicas": 6}, {"replicas": 4, "osVersion": "15"}],
    ids=["scale", "new-os-version"],
)
def test_a_health_report_and_a_respec_during_the_terminations(
    monkeypatch: pytest.MonkeyPatch, changed: dict[str, Any]
) -> None:
    """Owed 1 when deciding, 2 more reported while terminating, and a scale or a new OS
    version: v0.1.0 split the creates by what was owed then (replacement batches first),
    under generation 2."""
    book = SlotBook(next_slot=3, next_batch=2, retry_slots=[(1, 1)], body_generation=1)
    a_pass(
        monkeypatch,
        book=book,
        generation=1,
        replicas=4,
        owed=1,
        reported=2,
        changed=spec(**changed),
    )
