"""A pool's status tells the truth about its age and its end (issue 37, item 15).

- `creationTimestamp` (`get`, `describe`'s Created, AGE) is when the pool was
  created, not when its current run started: it used to restart at every
  continue-as-new (and so at every upgrade hand-over).
- A deleted pool's final status is `Deleted` all through: `Ready=False` reason
  `Deleted`, no hourly cost, no device desired — it used to keep the last pass's
  `Ready=True Converged`, `desiredReplicas` and `hourlyCost` beside phase Deleted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.v1beta1 import ConditionStatus, ConditionType, DevicePoolStatus, Phase
from devicepool.client import PoolClient
from devicepool.testing import eventually
from devicepool.workflows.pool import status as st
from devicepool.workflows.pool.state import PoolState
from tests.helpers.workflow_stack import start_pool
from tests.workflows.test_pool_continue_as_new import hand_over

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def converged(desired: int) -> DevicePoolStatus:
    status = DevicePoolStatus(
        phase=Phase.READY, desired_replicas=desired, ready_devices=desired, hourly_cost=0.8
    )
    for cond in (
        st.ConditionUpdate(ConditionType.READY, ConditionStatus.TRUE, "Converged"),
        st.ConditionUpdate(ConditionType.PROGRESSING, ConditionStatus.FALSE, "Converged"),
        st.ConditionUpdate(ConditionType.SCALE_DOWN_BLOCKED, ConditionStatus.TRUE, "Busy"),
    ):
        status = st.set_condition(status, cond, now=NOW, generation=1)
    return status


def test_a_deleted_pools_final_status_is_not_ready_and_bills_nothing() -> None:
    final = st.deleted(converged(8), NOW + timedelta(minutes=5))
    ready = final.condition(ConditionType.READY)
    assert final.phase == Phase.DELETED
    assert ready is not None and (ready.status, ready.reason) == (ConditionStatus.FALSE, "Deleted")
    assert ready.last_transition_time == NOW + timedelta(minutes=5)
    assert final.hourly_cost == 0
    # Nothing is wanted of a deleted pool: its spec still says what it had.
    assert final.desired_replicas == 0
    # What described the running pool is gone with it.
    assert final.condition(ConditionType.SCALE_DOWN_BLOCKED) is None


def test_the_end_of_a_pool_counts_what_its_devices_billed_through_the_teardown() -> None:
    state = PoolState(status=converged(8))
    state.cost.accrue(NOW, 8, 0.1)  # the last pass: 8 devices at $0.10/h
    state.deleted(NOW + timedelta(hours=1), profiles_retired=0)
    assert state.status.hourly_cost == 0 and state.cost.rate == 0
    assert state.status.cost_to_date == pytest.approx(0.8)  # billed until the teardown ended
    assert state.status.phase == Phase.DELETED


@pytest.mark.devserver
async def test_a_pool_keeps_its_creation_time_across_continue_as_new(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    pools = PoolClient(env.client)
    handle = await start_pool(env.client, pool_name, 1)

    async def ready() -> bool:
        return (await handle.query("status"))["readyDevices"] == 1

    await eventually(ready, what="1 ready", timeout=60)
    first = await env.client.get_workflow_handle(
        handle.id, run_id=handle.first_execution_run_id
    ).describe()
    created = (await pools.summary(pool_name)).created
    # The pool's start, as a BrowserPool's is: not its first workflow task's time, which a
    # loaded worker takes seconds later (CI once saw 2.27 s).
    assert created == first.start_time
    await hand_over(handle, replicas=1)

    async def new_run() -> bool:
        return (await handle.describe()).run_id != first.run_id

    await eventually(new_run, what="a continue-as-new", timeout=30, every=0.1)
    later = (await pools.summary(pool_name)).created
    assert later == created, f"created {later}, the new run's start; was {created}"
    shown = (await pools.describe(pool_name))["metadata"]["creationTimestamp"]
    assert abs(datetime.fromisoformat(shown) - created) < timedelta(seconds=1), shown
    await handle.cancel()
