"""What a pool's status says in words and figures a person checks (issue 43, items 10 and 11):
rollout figures that add up, and the intervals the pool goes by. Pure, no Temporal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.models import READY, DeviceInfo
from devicepool.activities.settings import PoolSettings
from devicepool.api.v1beta1 import ConditionType, DevicePoolSpec, DevicePoolStatus
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.backoff import Backoff
from devicepool.workflows.pool.plan import plan_pool

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def spec(**more: object) -> DevicePoolSpec:
    return DevicePoolSpec.model_validate(
        {"platform": "android", "region": "us-west", "replicas": 4} | more
    )


def view(pool: DevicePoolSpec, *, members: int, **more: object) -> st.PoolView:
    seen = [DeviceInfo(id=f"d{i}", status=READY, created_at=NOW) for i in range(members)]
    plan = plan_pool(
        replicas=pool.replicas, devices=seen, in_flight=0, now=NOW, idle_grace=timedelta(0)
    )
    return st.PoolView(
        spec=pool,
        generation=1,
        plan=plan,
        creating=False,
        device_ids=[d.id for d in seen],
        refs_problems=None,
        backoff=Backoff(),
        health=None,
        now=NOW,
        **more,  # type: ignore[arg-type]
    )


def test_the_rollout_condition_counts_the_devices_it_speaks_of() -> None:
    # A surge of 1 over 4: five devices, two made from the current template, three to
    # replace. "2 of 4 on the current template; 3 to replace" did not add up.
    pool = spec(rollout={"maxSurge": 1, "maxUnavailable": 0})
    status = st.published(DevicePoolStatus(), view(pool, members=5, drifted=3, updated=2))
    rolling = status.condition(ConditionType.ROLLING_OUT)
    assert rolling is not None
    assert rolling.message.startswith(
        "3 of 5 devices from an older template to replace, 2 on the current one (4 desired"
    ), rolling.message


def test_status_says_the_intervals_the_pool_goes_by() -> None:
    # The spec sets offlineAfter; the rest is the worker's, published as numbers so
    # that `describe` can show them (not "worker's setting").
    pool = spec(health={"offlineAfter": "2m"})
    worker = PoolSettings(startup_timeout_seconds=240, idle_grace_seconds=30)
    effective = worker.model_copy(update=pool.setting_overrides())
    status = st.published(DevicePoolStatus(), view(pool, members=4, settings=effective))
    said = status.to_json_dict()
    assert (said["offlineAfterSeconds"], said["startupTimeoutSeconds"]) == (120, 240)
    assert said["idleGraceSeconds"] == 30
    # A status from a build before them reads without them.
    assert DevicePoolStatus.model_validate({"phase": "Ready"}).offline_after_seconds is None
