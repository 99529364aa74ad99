"""The second review of issue 37's pool fixes (notes/review-pool2.md), pure.

The sequences: a device going first although the cap had room for its replacement
beside it; a spend cap below `replicas` keeping retiring devices for ever; a device
that left after its replacement served still holding repairs back as `left`; an
account-level cap (the ledger's) with no room beside a retiring device; the watch
told a listing without the devices the health check terminated (answered at once,
over and over); those devices left out of the billed cost.
"""

from __future__ import annotations

from datetime import timedelta

from devicepool.activities.models import PROVISIONING, TERMINATING, device_fingerprint
from devicepool.workflows.pool.lifecycle import Lifecycle
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState, billed_devices, watched_devices
from tests.workflows.test_pool_in_flight import NOW, created, dev, one_pass, spec

# ------------------------------------------------------------------ 1: room beside


def test_retiring_devices_are_replaced_first_while_the_cap_has_room_for_one() -> None:
    # replicas 3, spendCap 4, e1 and e2 expire together: there is room for one
    # replacement beside them. Before, e1 went first and one was created (2 of 3 served).
    devices = [dev("e1", age=7300), dev("e2", age=7200), dev("c")]
    decision = one_pass(devices, cap=4, retire=["e1", "e2"])
    assert (decision.terminate, created(decision)) == ([], 1)
    assert decision.first == set()
    # Its replacement boots: the cap is full now, but one is already beside them; e1
    # waits for it to serve (then leaves, making room for e2's), and goes not first.
    booting = [*devices, dev("n1", PROVISIONING, age=30)]
    again = one_pass(booting, cap=4, retire=["e1", "e2"])
    assert (again.terminate, created(again)) == ([], 0)
    served = [*devices, dev("n1", age=30)]
    assert one_pass(served, cap=4, retire=["e1", "e2"]).terminate == ["e1"]
    assert one_pass(served, cap=4, retire=["e1", "e2"]).first == set()
    # replicas 10, cap 12: none goes first (before, six did).
    many = [dev(f"e{i}", age=7200 + i) for i in range(10)]
    wide = one_pass(many, replicas=10, cap=12, retire=[d.id for d in many])
    assert (wide.terminate, created(wide)) == ([], 2)


def test_a_rollout_with_room_for_one_surge_under_the_cap_rolls_replacement_first() -> None:
    # rollout {maxSurge: 2, maxUnavailable: 0}, cap 4, replicas 3: before, d1 was rolled
    # first (2 serving, below replicas - maxUnavailable).
    devices = [dev("d1"), dev("d2"), dev("d3")]
    decision = one_pass(devices, cap=4, rolling=["d1", "d2"], surge=2, unavailable=0)
    assert (decision.terminate, created(decision)) == ([], 1)


# ------------------------------------------------------------------ 2: a cap below replicas


def test_a_cap_below_replicas_still_lets_an_expired_device_go_first() -> None:
    # replicas 3, spendCap 2: d1 and d2 serve, d1 expired. Before, it was kept for ever
    # (and the pool listed every 30 s for ever).
    devices = [dev("d1", age=7200), dev("d2")]
    decision = one_pass(devices, cap=2, retire=["d1"], reasons={"d1": "Expired"})
    assert decision.terminate == ["d1"]
    assert decision.first == {"d1"} and decision.reasons == {"d1": "Expired"}
    # One at a time: with d1 terminating, d2 (expired too) waits.
    leaving = [dev("d1", TERMINATING, age=7200), dev("d2", age=7100)]
    assert one_pass(leaving, cap=2, retire=["d2"], left=["d1"]).terminate == []


def test_a_cap_below_replicas_lets_a_drifted_device_roll() -> None:
    devices = [dev("d1"), dev("d2")]
    decision = one_pass(devices, cap=2, rolling=["d1"], surge=1, unavailable=0)
    assert decision.terminate == ["d1"]
    # rollout {maxSurge: 0, maxUnavailable: 1}, replicas 4, spendCap 3 (sim, seed 85):
    # three serve, d0 drifted. Before, 3 serving was at replicas - maxUnavailable: kept.
    held = [dev("d0"), dev("d1"), dev("d3")]
    rolled = one_pass(held, replicas=4, cap=3, rolling=["d0"], surge=0, unavailable=1)
    assert rolled.terminate == ["d0"]


# ------------------------------------------------------------------ 3: left, replaced


def test_a_device_that_left_after_its_replacement_served_holds_no_repair() -> None:
    # replicas 3, maxSurge 1: e1 was replaced first (n1 serves), then terminated; it
    # still terminates. The health check removed d2. Before, d2's repair waited for e1
    # to be gone (counted as the rollout's, held by maxSurge): 2 of 3 served until then.
    pool = spec(lifetime={"maxAge": "1h"}, rollout={"maxSurge": 1, "maxUnavailable": 0})
    state = PoolState()
    state.take_terminations(
        ["e1"],
        only_if_idle={"e1"},
        failed={},
        skipped={},
        devices=[dev("e1", age=7200)],
        reasons={"e1": "Expired"},
        first=set(),
    )
    members = [dev("n1", age=60), dev("d3"), dev("e1", TERMINATING, age=7200)]
    state.take_listing(members, reported_gone=())
    life = Lifecycle(pool, state, members, NOW)
    assert life.left() == []
    reported = dev("d2", TERMINATING)
    decision = one_pass([*members, reported], left=life.left(), surge=1, unavailable=0)
    assert created(decision) == 1
    # One that went first is still `left`: its replacement is the rollout's.
    state.take_terminations(
        ["d3"],
        only_if_idle={"d3"},
        failed={},
        skipped={},
        devices=members,
        reasons={"d3": "Expired"},
        first={"d3"},
    )
    gone_first = [dev("n1", age=60), dev("d3", TERMINATING), dev("e1", TERMINATING, age=7200)]
    state.take_listing(gone_first, reported_gone=())
    assert Lifecycle(pool, state, gone_first, NOW).left() == ["d3"]
    # Gone: forgotten.
    state.take_listing([dev("n1", age=60)], reported_gone=())
    assert state.rollout.left_first == []


# ------------------------------------------------------------------ 4: the account's cap


def test_the_accounts_cap_never_takes_retiring_devices_away_one_pass_after_another() -> None:
    # Review of f32d95a: with the account's spendCap holding the pool's creates, three
    # devices expired together went first one per pass (d1, then d2 once d1 was unlisted,
    # then d3) while their replacements waited for permits: none serving. A retiring
    # device whose replacement the account's cap holds is kept; only the pool's own cap
    # (which the pool counts itself) lets one go first.
    book = SlotBook()
    generation, slots = book.take(3, generation=1, observed_slots=set())
    book.open_batch("p-b1", generation, slots, NOW - timedelta(minutes=5))
    devices = [dev("d1", age=7200), dev("d2", age=7200), dev("d3", age=7200)]
    first = one_pass(devices, slots=book, retire=["d1", "d2", "d3"])
    assert first.terminate == [] and not first.first
    after_d1 = one_pass(devices[1:], slots=book, retire=["d2", "d3"])
    assert after_d1.terminate == []


# ------------------------------------------------------------------ 5, 6: reported devices


def test_the_watch_is_told_the_devices_the_health_check_terminated_still_listed() -> None:
    # The listing shows d2 terminating after the health check reported it: the pool goes
    # by [d1, d3]. Before, the watch was given that and answered at its first poll
    # (the provider still lists d2), round after round, for the whole termination.
    listing = [dev("d1"), dev("d2", TERMINATING), dev("d3")]
    state = PoolState()
    seen = state.take_listing(listing, reported_gone={"d2"})
    from devicepool.workflows.pool.state import leaving_by_report

    leaving = leaving_by_report(listing, {"d2"})
    watched = watched_devices(seen, leaving)
    assert device_fingerprint(watched) == device_fingerprint(listing)
    # Billed until gone: hourlyCost and costToDate count it.
    assert billed_devices(seen, leaving) == 3
