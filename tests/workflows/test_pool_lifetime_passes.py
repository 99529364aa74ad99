"""Devices past `lifetime.maxAge`, pass by pass: what the pool decides (pure).

The passes of `pool_world.py` on the listings the emulator showed the
dev-server test these replace (a pool of 2, `maxAge` 20 s, `gracePeriod` 10 s,
one device busy): past `maxAge` both devices are replaced, the idle one goes
once the replacements serve (said `Expired`, replacement first, not a
scale-down) and the busy one waits; past `maxAge + gracePeriod` it is forced
out, busy or not, with a Warning. End to end: `test_pool_replacement_first.py`.
"""

from __future__ import annotations

from devicepool.activities.models import BUSY, PROVISIONING, TERMINATING, DeviceInfo
from tests.workflows.pool_world import World
from tests.workflows.test_pool_in_flight import created, dev, spec

LIFETIME = spec(replicas=2, lifetime={"maxAge": "20s", "gracePeriod": "10s"})


def world(*devices: DeviceInfo) -> World:
    return World(LIFETIME, devices)


def test_past_max_age_both_are_replaced_beside_them_and_none_goes_yet() -> None:
    decision, said = world(dev("busy", BUSY, age=21, session=True), dev("idle", age=21)).a_pass()
    # Both replaced, their replacements first: nothing leaves before they serve.
    assert (created(decision), decision.terminate, said) == (2, [], [])


def test_once_the_replacements_serve_the_idle_one_goes_as_expired_and_the_busy_one_waits() -> None:
    w = world(
        dev("busy", BUSY, age=25, session=True),
        dev("idle", age=25),
        dev("n1", age=3),
        dev("n2", age=3),
    )
    decision, said = w.a_pass()
    assert decision.terminate == ["idle"] and "idle" in decision.only_if_idle
    assert decision.reasons == {"idle": "Expired"} and decision.first == set()
    # Said as an expiry, its replacement first: not a scale-down.
    assert created(decision) == 0 and said == ["Expired/Normal"]
    assert w.devices["idle"].status == TERMINATING
    # The busy one is still waited for: nothing more goes, nothing more is made.
    decision, said = w.a_pass()
    assert (decision.terminate, created(decision), said) == ([], 0, [])


def test_past_max_age_and_grace_a_busy_device_is_forced_out_with_a_warning() -> None:
    w = world(dev("busy", BUSY, age=31, session=True), dev("n1", age=9), dev("n2", age=9))
    decision, said = w.a_pass()
    # Warned as it is doomed; said as it goes ("terminated busy, busy or not").
    assert said == ["Expired/Warning", "Expired/Normal"]
    # Forced: terminated busy or not (not only if idle), and no replacement for it now
    # (its replacements already serve).
    assert decision.terminate == ["busy"] and "busy" not in decision.only_if_idle
    assert created(decision) == 0 and w.devices["busy"].status == TERMINATING
    # Said once: the next pass, while it terminates, does not warn again.
    assert "Expired/Warning" not in w.a_pass()[1]


def test_a_busy_expired_device_alone_past_its_grace_is_forced_and_replaced() -> None:
    # Nothing beside it yet (the replacement still boots): forced all the same.
    w = world(dev("busy", BUSY, age=31, session=True), dev("new", PROVISIONING, age=2))
    decision, said = w.a_pass()
    assert said[0] == "Expired/Warning" and "busy" in decision.terminate
    assert "busy" not in decision.only_if_idle
