"""A template change rolled out pass by pass: what the pool decides (pure).

The issue's scenario, on a small world the passes act on (a device created in
one pass boots by the next; one terminated is gone by the next): osVersion
14 -> 15 on a pool of 10 with 3 busy devices under rollout {maxSurge: 2,
maxUnavailable: 0}. Never fewer than 10 serve, never more than 12 bill (one
terminating not counted, as Cluster API does not count one being deleted), the
busy ones are replaced only once their sessions end, 10 + 10 creates in all.
`Lifecycle.advance`, `decision_for` and `PoolState.take_listing` /
`take_terminations` are what a pass calls. End to end: `test_pool_rollout_surge.py`.
"""

from __future__ import annotations

from datetime import timedelta

from devicepool.activities.models import (
    BUSY,
    PROVISIONING,
    READY,
    TERMINATING,
    DeviceInfo,
    device_template,
    template_hash,
)
from devicepool.api.names import LABEL_SLOT, LABEL_TEMPLATE_HASH, slot_label
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.lifecycle import Lifecycle
from devicepool.workflows.pool.observed import Observed, decision_for
from devicepool.workflows.pool.state import PoolState
from tests.workflows.test_pool_in_flight import NOW, SETTINGS, spec

ROLLOUT = {"maxSurge": 2, "maxUnavailable": 0}


class World:
    """The provider's devices, as the passes leave them, and what was counted."""

    def __init__(self, pool: DevicePoolSpec) -> None:
        self.spec, self.state, self.now = pool, PoolState(), NOW
        self.devices: dict[str, DeviceInfo] = {}
        self.created = 0
        self.fewest_serving, self.most_billing = 10**6, 0

    def tick(self) -> None:
        """Time passes: what terminated is gone, what was created serves."""
        self.now += timedelta(seconds=5)
        for d in list(self.devices.values()):
            if d.status == TERMINATING:
                del self.devices[d.id]
            elif d.status == PROVISIONING:
                self.devices[d.id] = d.model_copy(update={"status": READY})
        self._count()

    def session(self, device: str, active: bool) -> None:
        status = BUSY if active else READY
        update = {"status": status, "session_active": active}
        self.devices[device] = self.devices[device].model_copy(update=update)

    def a_pass(self) -> None:
        s = self.state
        devices = s.take_listing(list(self.devices.values()), reported_gone=())
        Lifecycle(self.spec, s, devices, self.now).advance()
        seen = Observed(
            devices=devices, reported_leaving=[], settings=SETTINGS, price=0.0, now=self.now
        )
        decision = decision_for(seen, pool="p", spec=self.spec, state=s, incarnation="i", act=True)
        s.slots, s.replacements_owed = decision.slots, decision.replacements_owed
        busy = {d.id for d in devices if d.status == BUSY or d.session_active}
        skipped = {
            d: "busy" for d in decision.terminate if d in decision.only_if_idle and d in busy
        }
        s.take_terminations(
            decision.terminate,
            only_if_idle=decision.only_if_idle,
            failed={},
            skipped=skipped,
            devices=devices,
            reasons=decision.reasons,
            first=decision.first,
        )
        for device_id in decision.terminate:
            if device_id not in skipped:
                self.devices[device_id] = self.devices[device_id].model_copy(
                    update={"status": TERMINATING}
                )
        made = template_hash(device_template(self.spec))
        for order in decision.batches:
            for slot in order.slots:
                self.created += 1
                device_id = f"v{self.created}"
                labels = {LABEL_TEMPLATE_HASH: made, LABEL_SLOT: slot_label(slot, "i")}
                self.devices[device_id] = DeviceInfo(
                    id=device_id, status=PROVISIONING, created_at=self.now, labels=labels
                )
            s.slots.drop(order.child_id)  # landed: the listing shows its devices from now on
        self._count()

    def settle(self, passes: int = 30) -> None:
        for _ in range(passes):
            self.tick()
            self.a_pass()

    def ids(self) -> set[str]:
        return set(self.devices)

    def _count(self) -> None:
        statuses = [d.status for d in self.devices.values()]
        self.fewest_serving = min(self.fewest_serving, sum(s in (READY, BUSY) for s in statuses))
        self.most_billing = max(self.most_billing, sum(s != TERMINATING for s in statuses))


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
