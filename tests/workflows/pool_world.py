"""A small world a DevicePool's passes act on, pure: decisions pass by pass.

A pass makes the calls the workflow's pass makes (`PoolState.take_listing`,
`Lifecycle.advance`, `decision_for`, `PoolState.take_terminations`) on the
devices the world lists; a create lands at once and boots by the next `tick`,
a termination is gone by it, and a device asked to go only if idle is kept
while busy (as the `terminate_devices` activity does).
"""

from __future__ import annotations

from collections.abc import Sequence
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
from devicepool.workflows.pool.decide import Decision, Observed, decision_for
from devicepool.workflows.pool.lifecycle import Lifecycle
from devicepool.workflows.pool.state import PoolState
from tests.workflows.test_pool_in_flight import NOW, SETTINGS


class World:
    """The provider's devices as the passes leave them, and what was counted."""

    def __init__(self, pool: DevicePoolSpec, devices: Sequence[DeviceInfo] = ()) -> None:
        self.spec, self.state, self.now = pool, PoolState(), NOW
        self.devices = {d.id: d for d in devices}
        self.created = 0
        self.fewest_serving, self.most_billing = 10**6, 0

    def tick(self, seconds: float = 5) -> None:
        """Time passes: what terminated is gone, what was created serves."""
        self.now += timedelta(seconds=seconds)
        for d in list(self.devices.values()):
            if d.status == TERMINATING:
                del self.devices[d.id]
            elif d.status == PROVISIONING:
                self.devices[d.id] = d.model_copy(update={"status": READY})
        self._count()

    def session(self, device: str, active: bool) -> None:
        update = {"status": BUSY if active else READY, "session_active": active}
        self.devices[device] = self.devices[device].model_copy(update=update)

    def a_pass(self) -> tuple[Decision, list[str]]:
        """One pass on a fresh listing: its decision, carried out, and what it said (as
        `reason/type`)."""
        s = self.state
        devices = s.take_listing(list(self.devices.values()), reported_gone=())
        said = Lifecycle(self.spec, s, devices, self.now).advance()
        seen = Observed(
            devices=devices, reported_leaving=[], settings=SETTINGS, price=0.0, now=self.now
        )
        decision = decision_for(seen, pool="p", spec=self.spec, state=s, incarnation="i", act=True)
        s.slots, s.replacements_owed = decision.slots, decision.replacements_owed
        busy = {d.id for d in devices if d.status == BUSY or d.session_active}
        only_if_idle = decision.only_if_idle
        skipped = {d: "busy" for d in decision.terminate if d in only_if_idle and d in busy}
        went = s.take_terminations(
            decision.terminate,
            only_if_idle=only_if_idle,
            failed={},
            skipped=skipped,
            devices=devices,
            reasons=decision.reasons,
            first=decision.first,
        )
        for device_id in decision.terminate:
            if device_id not in skipped:
                leaving = {"status": TERMINATING}
                self.devices[device_id] = self.devices[device_id].model_copy(update=leaving)
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
        happened = [*said, *went.events]
        return decision, [f"{h.reason}/{'Warning' if h.warning else 'Normal'}" for h in happened]

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
