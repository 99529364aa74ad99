"""Status counts and Progressing say what is true (issue 15, item 5): pure, no Temporal.

`provisioningDevices` counts devices that exist at the provider and boot;
`pendingDevices` the creates planned or on their way whose devices the provider
does not show yet. Progressing is True while anything is created or booting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.models import PROVISIONING, READY, DeviceInfo
from devicepool.api.v1beta1 import (
    ConditionStatus,
    ConditionType,
    DevicePoolSpec,
    DevicePoolStatus,
    Phase,
)
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.plan import plan_pool

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def spec(replicas: int) -> DevicePoolSpec:
    return DevicePoolSpec.model_validate(
        {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": replicas}
    )


def devices(status: str, n: int, prefix: str) -> list[DeviceInfo]:
    return [DeviceInfo(id=f"{prefix}{i}", status=status, created_at=NOW) for i in range(n)]


def publish(
    replicas: int, seen: list[DeviceInfo], *, in_flight: int, creating: bool
) -> DevicePoolStatus:
    plan = plan_pool(
        replicas=replicas, devices=seen, in_flight=in_flight, now=NOW, idle_grace=timedelta(0)
    )
    view = st.PoolView(
        spec=spec(replicas),
        generation=1,
        plan=plan,
        creating=creating or plan.create > 0,
        device_ids=sorted(d.id for d in seen),
        refs_problems=None,
        backoff=Backoff(),
        health=None,
        now=NOW,
    )
    return st.published(DevicePoolStatus(), view)


def test_provisioning_counts_devices_at_the_provider_and_pending_the_rest() -> None:
    # The numbers: 15 devices existed, 80 more creates were waiting.
    status = publish(95, devices(PROVISIONING, 15, "p"), in_flight=80, creating=True)
    assert status.provisioning_devices == 15
    assert status.pending_devices == 80
    assert status.phase == Phase.PROVISIONING


def test_creates_planned_this_pass_are_pending_too() -> None:
    status = publish(5, devices(READY, 2, "r"), in_flight=0, creating=False)
    assert (status.provisioning_devices, status.pending_devices) == (0, 3)
    assert status.to_json_dict()["pendingDevices"] == 3


def test_progressing_is_true_while_created_devices_still_boot() -> None:
    # First start: every create landed (no batch is creating), all five boot.
    status = publish(5, devices(PROVISIONING, 5, "p"), in_flight=0, creating=False)
    progressing = status.condition(ConditionType.PROGRESSING)
    assert progressing is not None
    assert (progressing.status, progressing.reason) == (ConditionStatus.TRUE, "Provisioning")
    assert progressing.message == "5 device(s) provisioning"
    assert status.pending_devices == 0


def test_progressing_names_pending_creates_and_is_stable_once_all_serve() -> None:
    mixed = publish(6, devices(PROVISIONING, 2, "p"), in_flight=4, creating=True)
    progressing = mixed.condition(ConditionType.PROGRESSING)
    assert progressing and progressing.message == "2 device(s) provisioning, 4 pending"
    done = publish(3, devices(READY, 3, "r"), in_flight=0, creating=False)
    stable = done.condition(ConditionType.PROGRESSING)
    assert stable and (stable.status, stable.reason) == (ConditionStatus.FALSE, "Stable")
    assert (done.provisioning_devices, done.pending_devices, done.phase) == (0, 0, Phase.READY)


def test_a_deleted_pool_has_nothing_pending() -> None:
    status = publish(4, [], in_flight=4, creating=True)
    assert st.deleted(status, NOW).pending_devices == 0
