"""A template change rolled out pass by pass: what the pool decides (pure).

The issue's scenario, on a small world the passes act on (a device created in
one pass boots by the next; one terminated is gone by the next): osVersion
14 -> 15 on a pool of 10 with 3 busy devices under rollout {maxSurge: 2,
maxUnavailable: 0}. Never fewer than 10 serve, never more than 12 bill (one
terminating not counted, as Cluster API does not count one being deleted), the
busy ones are replaced only once their sessions end, 10 + 10 creates in all.
The world and its passes: `pool_world.py`. End to end: `test_pool_rollout_surge.py`.
"""

from __future__ import annotations

from devicepool.workflows.pool.lifecycle import Lifecycle, roll
from tests.workflows.pool_world import World
from tests.workflows.test_pool_in_flight import spec

ROLLOUT = {"maxSurge": 2, "maxUnavailable": 0}


def test_a_template_change_rolls_out_within_surge_busy_devices_last() -> None:
    world = World(spec(replicas=10, rollout=ROLLOUT))
    world.a_pass()
    world.settle()
    old = sorted(world.ids())
    assert len(old) == 10 and world.created == 10
    busy = old[:3]
    for device in busy:
        world.session(device, True)
    world.fewest_serving, world.most_billing = 10, 10
    new = spec(replicas=10, rollout=ROLLOUT, osVersion="15")
    world.state.respec(world.spec, new, body_changed=True, now=world.now)
    world.spec = new

    world.settle()
    # All but the busy ones rolled; the busy ones wait, their replacements beside them.
    assert sorted(world.ids() & set(old)) == busy
    assert len(world.devices) == 12
    drift = Lifecycle(world.spec, world.state, list(world.devices.values()), world.now).drift()
    assert sorted(drift) == busy

    for device in busy:
        world.session(device, False)
    world.settle()
    assert len(world.devices) == 10 and not world.ids() & set(old)
    assert world.fewest_serving >= 10, f"only {world.fewest_serving} serving during the rollout"
    assert world.most_billing <= 12, f"{world.most_billing} at once: more than maxSurge 2 above 10"
    assert world.created == 20  # 10 + 10, nothing extra


def test_a_device_picked_to_roll_that_turns_busy_gives_way_to_an_idle_one() -> None:
    """A drifted device picked while idle whose session starts before it goes: the idle
    drifted devices roll meanwhile (its replacement, beside it, serves for one of them), and
    it rolls once idle. Before, it kept its place in the rollout for its whole session and
    nothing else rolled (a loaded test run saw its pass decide on a listing from before the
    sessions started: the rollout stood still for minutes)."""
    world = World(spec(replicas=4, rollout=ROLLOUT))
    world.a_pass()
    world.settle()
    old = sorted(world.ids())
    world.fewest_serving, world.most_billing = 4, 4
    new = spec(replicas=4, rollout=ROLLOUT, osVersion="15")
    world.state.respec(world.spec, new, body_changed=True, now=world.now)
    world.spec = new
    world.a_pass()
    picked = sorted(world.state.rollout.rolling)
    assert picked == old[:2]  # the oldest idle ones, their replacements created beside them
    for device in picked:
        world.session(device, True)

    world.settle()
    assert sorted(world.ids() & set(old)) == picked  # the idle ones rolled meanwhile
    assert len(world.devices) == 6

    for device in picked:
        world.session(device, False)
    world.settle()
    assert len(world.devices) == 4 and not world.ids() & set(old)
    assert world.fewest_serving >= 4, f"only {world.fewest_serving} serving during the rollout"
    assert world.most_billing <= 6, f"{world.most_billing} at once: more than maxSurge 2 above 4"
    assert world.created == 8  # 4 + 4, nothing extra


def test_a_rolling_device_that_turns_busy_gives_way_to_an_idle_drifted_one() -> None:
    """`roll` itself: a device rolling (picked while idle) that is busy now gives way to an
    idle drifted one, as many as there are; with none idle it keeps its place."""
    drift = ["old-1", "old-2", "old-3"]  # oldest first
    # {maxSurge: 0, maxUnavailable: 1}: one at a time; its pass listed it idle, its
    # termination (only if still idle) found it busy.
    assert roll(["old-1"], drift, surge=0, unavailable=1, protected=(), busy={"old-1"}) == ["old-2"]
    # {maxSurge: 2}: both picked turned busy; the idle ones take their places.
    both = {"old-1", "old-2"}
    assert roll(["old-1", "old-2"], drift, surge=2, unavailable=0, protected=(), busy=both) == [
        "old-3",
        "old-1",
    ]
    # Nothing idle to roll instead: the busy one stays picked (its replacement beside it).
    assert roll(["old-1"], ["old-1"], surge=1, unavailable=0, protected=(), busy={"old-1"}) == [
        "old-1"
    ]
    # A budget's limit counts as before.
    assert roll(["old-1"], drift, surge=2, unavailable=0, protected=(), busy=(), limit=1) == [
        "old-1"
    ]


def test_a_busy_rolling_device_gives_way_only_within_the_disruption_budget() -> None:
    """R23 #1: the device that takes a busy one's place is a new disruption, so it counts
    against the budget's limit. With none left (a window that blocks drift, or another
    reason has spent a shared budget) the busy one keeps its place; with room, it gives way."""
    drift = ["old-1", "old-2"]
    busy = {"old-1"}
    assert roll(["old-1"], drift, surge=1, unavailable=0, protected=(), busy=busy, limit=0) == [
        "old-1"
    ]
    # Room for one at once: the idle one takes the busy one's place (one disrupted at once).
    assert roll(["old-1"], drift, surge=1, unavailable=0, protected=(), busy=busy, limit=1) == [
        "old-2"
    ]
    # Two rolling over a budget now of one: neither place goes to a new device.
    drift3 = ["old-1", "old-2", "old-3"]
    assert roll(
        ["old-1", "old-2"], drift3, surge=2, unavailable=0, protected=(), busy=busy, limit=1
    ) == ["old-1", "old-2"]


def test_a_drift_budget_window_holds_while_a_rolling_device_is_busy() -> None:
    """R23 #1 pass by pass: a device picked just before a window that blocks drift
    replacement turns busy; no other drifted device is terminated while the window lasts."""
    budget = {"devices": 0, "reasons": ["Drifted"], "schedule": "30 12 * * *", "duration": "1h"}
    shape = {"replicas": 3, "rollout": {"maxSurge": 1, "maxUnavailable": 0}}
    shape["disruption"] = {"budgets": [budget]}
    world = World(spec(**shape))
    world.a_pass()
    world.settle(3)
    old = set(world.ids())
    new = spec(**shape, osVersion="15")
    world.now = world.now.replace(minute=29, second=40)  # the window opens at 12:30
    world.state.respec(world.spec, new, body_changed=True, now=world.now)
    world.spec = new
    world.a_pass()
    picked = list(world.state.rollout.rolling)
    assert len(picked) == 1
    world.session(picked[0], True)
    world.now = world.now.replace(minute=31)
    for _ in range(20):  # 100 s, inside the window
        world.tick()
        world.a_pass()
        assert old <= world.ids(), f"{sorted(old - world.ids())} gone inside the blocked window"
