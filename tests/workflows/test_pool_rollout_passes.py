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

from devicepool.workflows.pool.lifecycle import Lifecycle
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
