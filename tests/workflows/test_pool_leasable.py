"""What a DevicePool tells its lease book, pure: candidates, selectors that can never
match, the leased devices busy to the plan, and which ended leases replace a device."""

from __future__ import annotations

from datetime import timedelta

from devicepool.activities import models as am
from devicepool.api.names import (
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_SLOT,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
)
from devicepool.workflows.pool import leasable
from devicepool.workflows.pool.fates import Fate
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.reconciler.autoscaling import queued_demand
from devicepool.workflows.reconciler.lease_records import EndReason, Ticket
from tests.helpers.leases import POOL_SPEC, T0, ended

SPEC = POOL_SPEC


def device(i: str, status: str = am.READY, *, session: bool = False, age: int = 0) -> am.DeviceInfo:
    return am.DeviceInfo(
        id=i,
        status=status,
        region="us-west",
        created_at=T0 - timedelta(minutes=age),
        session_active=session,
        labels={"pool": "p", "gpu": "yes" if i == "c" else "no"},
    )


def test_candidates_are_ready_idle_staying_devices_current_template_first():
    state = PoolState()
    state.fates.set(["d"], Fate.DOOMED)
    state.control.retiring = ["e"]
    devices = [
        device("a", age=5),
        device("b", age=9),
        device("c", am.PROVISIONING),
        device("d"),
        device("e"),
        device("f", session=True),
        device("g", age=1),
    ]
    found = leasable.candidates(devices, spec=SPEC, state=state, leaving={"g"}, drifted={"b"})
    assert [c.id for c in found] == ["a", "b"]
    assert found[0].labels["region"] == "us-west" and found[0].labels["device"] == "a"


def test_a_selector_that_can_never_match_says_why():
    devices = [device("a"), device("c")]
    never = leasable.problem({"region": "eu"}, spec=SPEC, devices=devices)
    assert never is not None and "region us-west" in never
    assert "not a device of the pool" in (
        leasable.problem({"device": "z"}, spec=SPEC, devices=devices) or ""
    )
    assert "no such label" in (leasable.problem({"color": "red"}, spec=SPEC, devices=devices) or "")
    assert (
        leasable.problem({"gpu": "yes", "platform": "android"}, spec=SPEC, devices=devices) is None
    )
    # No device listed yet: a label cannot be known to be missing (the provider may add it).
    assert leasable.problem({"color": "red"}, spec=SPEC, devices=[]) is None
    assert leasable.problem({"region": "eu"}, spec=SPEC, devices=[]) is not None


def test_leased_devices_are_busy_to_the_plan_and_others_unchanged():
    devices = [device("a"), device("b")]
    busy = leasable.leased_busy(devices, {"b"})
    assert [d.session_active for d in busy] == [False, True]
    assert leasable.leased_busy(devices, set()) == devices


def test_only_a_used_device_is_replaced_after_its_lease():
    state = PoolState()
    said = leasable.replace_used(
        state,
        [
            ended("a", EndReason.RELEASED),
            ended("b", EndReason.IDLE),
            # Never used (an offer nobody claimed), gone, or replaced already: kept.
            ended("c", EndReason.UNCLAIMED),
            ended("d", EndReason.DEVICE_LOST),
            ended("e", EndReason.REPLACED),
            ended("f", EndReason.CANCELLED),  # an offer given up before it was claimed
        ],
        listed={"a", "b", "c", "d", "e", "f"},
        now=T0,
    )
    assert sorted(state.doomed) == ["a", "b"] and said[0].reason == "ReplaceRequested"


def test_tickets_no_device_like_the_pools_can_serve_are_no_demand():
    """Devices labelled `model: galaxy`: a new one, made from the same template, would be
    too. 30 tickets for `model=pixel` grow the autoscaled pool by none (each would rent a
    device nobody can lease)."""
    galaxies = [
        device("a").model_copy(update={"labels": {"model": "galaxy"}}),
        device("b").model_copy(update={"labels": {"model": "galaxy"}}),
    ]
    tickets = [
        Ticket(
            id=str(i),
            holder="h",
            selector={"model": "pixel"},
            duration=60,
            created_at=T0,
            deadline=T0,
        )
        for i in range(30)
    ]

    def grows(selector):
        return leasable.grows_for(selector, pool="p", spec=SPEC, devices=galaxies)

    assert queued_demand(tickets, grows) == 0
    # What one like them carries, or what every new device is made with, is demand.
    assert grows({"model": "galaxy", "region": "us-west"})
    assert grows({"platform": "android"}) and grows({})


def _tickets(selector: dict[str, str], n: int = 30) -> list[Ticket]:
    return [
        Ticket(id=str(i), holder="h", selector=selector, duration=60, created_at=T0, deadline=T0)
        for i in range(n)
    ]


def test_a_pool_at_zero_grows_only_for_tickets_a_new_device_can_serve():
    """At zero nothing is listed: a new device carries only what the pool writes (its
    region, platform, pool, managed-by and template-hash labels), so 30 tickets for
    `model=pixel` rent nothing, while 30 for the region rent 30."""

    def grows(selector):
        return leasable.grows_for(selector, pool="p", spec=SPEC, devices=[])

    assert queued_demand(_tickets({"model": "pixel"}), grows) == 0
    assert queued_demand(_tickets({"region": "us-west"}), grows) == 30
    assert queued_demand(_tickets({"region": "us-west", "platform": "android"}), grows) == 30
    assert queued_demand(_tickets({}), grows) == 30
    # A label every device is made with counts; another pool's, or another value, does not.
    current = am.template_hash(am.device_template(SPEC))
    assert grows({LABEL_TEMPLATE_HASH: current, LABEL_POOL: "p", LABEL_MANAGED_BY: MANAGED_BY})
    assert not grows({LABEL_POOL: "other"})
    assert not grows({LABEL_TEMPLATE_HASH: "0123456789ab"})
    assert not grows({"region": "us-west", "model": "pixel"})


def test_during_a_rollout_a_ticket_counts_for_the_new_template_only():
    """Listed devices of an older template: a ticket for the current template's hash counts
    (every device made now carries it); one for the old hash, or for a listed device's slot,
    does not (no new device carries them)."""
    old = [
        device("a").model_copy(
            update={"labels": {"pool": "p", LABEL_TEMPLATE_HASH: "0ld0ld0ld0ld", LABEL_SLOT: "3"}}
        )
    ]
    current = am.template_hash(am.device_template(SPEC))

    def grows(selector):
        return leasable.grows_for(selector, pool="p", spec=SPEC, devices=old)

    assert queued_demand(_tickets({LABEL_TEMPLATE_HASH: current}), grows) == 30
    assert queued_demand(_tickets({LABEL_TEMPLATE_HASH: "0ld0ld0ld0ld"}), grows) == 0
    assert queued_demand(_tickets({LABEL_SLOT: "3"}), grows) == 0


def test_a_provider_label_counts_only_on_devices_of_the_current_template():
    """R18: a provider that labels devices from their template (`android=13`) would make a
    ticket for an old device's label demand for new devices that cannot serve it. Only the
    devices made from the current template (or carrying no hash) say what a new one carries."""
    current = am.template_hash(am.device_template(SPEC))
    listed = [
        device("a").model_copy(
            update={"labels": {"pool": "p", LABEL_TEMPLATE_HASH: "0ld0ld0ld0ld", "android": "13"}}
        ),
        device("b").model_copy(
            update={"labels": {"pool": "p", LABEL_TEMPLATE_HASH: current, "android": "14"}}
        ),
        device("c").model_copy(update={"labels": {"pool": "p", "model": "galaxy"}}),
    ]

    def grows(selector):
        return leasable.grows_for(selector, pool="p", spec=SPEC, devices=listed)

    assert not grows({"android": "13"})
    assert grows({"android": "14"})
    assert grows({"model": "galaxy"})  # no hash said: taken as it is
