"""Devices past `lifetime.maxAge`, pass by pass: what the pool decides (pure).

`Lifecycle.advance` and `decision_for` called as a pass calls them, on the
listings the emulator showed the dev-server tests these replace (a pool of 2,
`maxAge` 20 s, `gracePeriod` 10 s, one device busy): past `maxAge` both
devices are replaced, the idle one goes once the replacements serve (said
`Expired`, replacement first, not a scale-down) and the busy one waits; past
`maxAge + gracePeriod` it is forced out, busy or not, with a Warning.
One end-to-end case stays: `test_pool_replacement_first.py`.
"""

from __future__ import annotations

from devicepool.activities.models import BUSY, PROVISIONING, TERMINATING, DeviceInfo
from devicepool.workflows.pool.decide import Decision
from devicepool.workflows.pool.lifecycle import Lifecycle
from devicepool.workflows.pool.observed import Observed, decision_for
from devicepool.workflows.pool.state import PoolState
from tests.workflows.test_pool_in_flight import NOW, SETTINGS, created, dev, spec

LIFETIME = spec(replicas=2, lifetime={"maxAge": "20s", "gracePeriod": "10s"})


def a_pass(state: PoolState, devices: list[DeviceInfo]) -> tuple[Decision, list[str]]:
    """One pass on a fresh listing: what it decides, and the reasons of what it said."""
    said = Lifecycle(LIFETIME, state, devices, NOW).advance()
    seen = Observed(devices=devices, reported_leaving=[], settings=SETTINGS, price=0.0, now=NOW)
    decision = decision_for(seen, pool="p", spec=LIFETIME, state=state, incarnation="i", act=True)
    return decision, [f"{h.reason}/{'Warning' if h.warning else 'Normal'}" for h in said]


def went(state: PoolState, decision: Decision, devices: list[DeviceInfo]) -> list[str]:
    """Carry out the terminations as the activity does (a busy device asked to go only
    if idle is skipped); the events said, as reason/type."""
    busy = {d.id for d in devices if d.status == BUSY or d.session_active}
    skipped = {d: "busy" for d in decision.terminate if d in decision.only_if_idle and d in busy}
    said = state.take_terminations(
        decision.terminate,
        only_if_idle=decision.only_if_idle,
        failed={},
        skipped=skipped,
        devices=devices,
        reasons=decision.reasons,
        first=decision.first,
    )
    return [f"{e.reason}/{'Warning' if e.warning else 'Normal'}" for e in said.events]


def test_past_max_age_both_are_replaced_beside_them_and_none_goes_yet() -> None:
    state = PoolState()
    devices = [dev("busy", BUSY, age=21, session=True), dev("idle", age=21)]
    decision, said = a_pass(state, devices)
    # Both replaced, their replacements first: nothing leaves before they serve.
    assert (created(decision), decision.terminate) == (2, [])
    assert said == []


def test_once_the_replacements_serve_the_idle_one_goes_as_expired_and_the_busy_one_waits() -> None:
    state = PoolState()
    devices = [
        dev("busy", BUSY, age=25, session=True),
        dev("idle", age=25),
        dev("n1", age=3),
        dev("n2", age=3),
    ]
    decision, said = a_pass(state, devices)
    assert decision.terminate == ["idle"] and "idle" in decision.only_if_idle
    assert decision.reasons == {"idle": "Expired"} and decision.first == set()
    assert created(decision) == 0 and said == []
    # Said as an expiry, its replacement first: not a scale-down.
    assert went(state, decision, devices) == ["Expired/Normal"]
    # The busy one is still waited for: nothing more goes, nothing more is made.
    after = [dev("busy", BUSY, age=26, session=True), dev("idle", TERMINATING, age=26)]
    after += [dev("n1", age=4), dev("n2", age=4)]
    decision, said = a_pass(state, after)
    assert (decision.terminate, created(decision), said) == ([], 0, [])


def test_past_max_age_and_grace_a_busy_device_is_forced_out_with_a_warning() -> None:
    state = PoolState()
    devices = [dev("busy", BUSY, age=31, session=True), dev("n1", age=9), dev("n2", age=9)]
    decision, said = a_pass(state, devices)
    assert said == ["Expired/Warning"]
    assert state.doomed == ["busy"]
    # Forced: terminated busy or not (not only if idle), and no replacement for it now
    # (its replacements already serve).
    assert decision.terminate == ["busy"] and "busy" not in decision.only_if_idle
    assert created(decision) == 0
    # Said once: the next pass, still listed, does not warn again.
    assert a_pass(state, devices)[1] == []


def test_a_busy_expired_device_alone_past_its_grace_is_forced_and_replaced() -> None:
    # Nothing beside it yet (the replacement still boots): forced all the same.
    state = PoolState()
    devices = [dev("busy", BUSY, age=31, session=True), dev("new", PROVISIONING, age=2)]
    decision, said = a_pass(state, devices)
    assert said == ["Expired/Warning"] and "busy" in decision.terminate
    assert "busy" not in decision.only_if_idle
