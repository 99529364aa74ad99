"""The DevicePool workflow against the dev server and the emulator (ground truth: its stats)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import (
    LABEL_SLOT,
    SIGNAL_BATCH_CREATED,
    SIGNAL_SCALE,
    UPDATE_APPLY,
    UPDATE_SCALE,
    provision_workflow_id,
)
from devicepool.api.v1beta1 import DevicePoolSpec, ObjectMeta
from devicepool.connect import DATA_CONVERTER
from devicepool.testing import eventually, stats
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.pool.messages import Accepted, ApplyRequest, ScaleRequest
from tests.helpers.histories import history_digest, run_histories
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import (
    ACCOUNTS,
    PROXY_PASSWORD,
    condition,
    pool_counts,
    pool_devices,
    start_pool,
)

pytestmark = pytest.mark.devserver

# Most waits below last seconds (boots, passes) and each check is a status query or a
# provider listing (~5 ms of the test's and the server's CPU): twice a second is enough.
POLL = 0.5


async def status_of(handle: Any) -> dict[str, Any]:
    return await handle.query("status")


def ready_count(name: str, wanted: int, control: httpx.AsyncClient):
    async def check() -> bool:
        devices = await pool_devices(control, name)
        return len(devices) == wanted and all(d["status"] == "ready" for d in devices)

    return check


async def delete_and_wait(handle: Any) -> None:
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    desc = await handle.describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED


async def test_converge_scale_up_down_and_delete(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 2)
    await eventually(ready_count(pool_name, 2, control), what="2 ready devices", every=POLL)
    status = await eventually(
        lambda: _status_when(handle, lambda s: s["readyDevices"] == 2 and s["phase"] == "Ready"),
        what="status Ready 2",
        every=POLL,
    )
    assert status["desiredReplicas"] == 2
    assert len(status["deviceIds"]) == 2
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])

    accepted = await handle.execute_update(
        UPDATE_SCALE, ScaleRequest(replicas=4), result_type=Accepted
    )
    assert accepted.replicas == 4 and accepted.generation == 2
    await eventually(ready_count(pool_name, 4, control), what="4 ready devices", every=POLL)

    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
    await eventually(ready_count(pool_name, 1, control), what="scale down to 1", every=POLL)

    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=0), result_type=Accepted)
    await eventually(ready_count(pool_name, 0, control), what="scale down to 0", every=POLL)

    await delete_and_wait(handle)
    after = await stats(control)
    assert after["devices"]["byPool"].get(pool_name, 0) == 0

    # The whole lifecycle replays deterministically against today's code (the
    # release corpus is recorded by tests/replay/record.py).
    history = await handle.fetch_history()
    await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(history)


async def _status_when(handle: Any, predicate: Any) -> dict[str, Any] | None:
    status = await status_of(handle)
    return status if predicate(status) else None


async def test_a_pool_deleted_and_applied_again_rents_new_devices(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Same name, same generation and slot numbers: only the pool's incarnation in
    # the idempotency key keeps the provider from replaying the deleted devices.
    before = await stats(control)
    first = await start_pool(env.client, pool_name, 2)
    await eventually(ready_count(pool_name, 2, control), what="2 ready devices", every=POLL)
    old = {d["id"] for d in await pool_devices(control, pool_name)}
    await delete_and_wait(first)
    again = await start_pool(env.client, pool_name, 2)
    await eventually(
        ready_count(pool_name, 2, control), what="2 ready devices again", timeout=30, every=POLL
    )
    assert not {d["id"] for d in await pool_devices(control, pool_name)} & old
    # This pool's own creates (both incarnations, the deleted one's devices listed
    # terminated): another test's teardown moves the session-wide count.
    assert (await pool_counts(control, pool_name))["created"] == 4
    after = await stats(control)
    assert after["creates"]["idempotentReplays"] == before["creates"]["idempotentReplays"]
    await delete_and_wait(again)


async def test_a_refused_scale_signal_is_said_until_an_accepted_change(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 0)

    async def refused(payload: object) -> dict[str, Any]:
        # Said as a manifest's mistake is: the JSON as sent, one line (pure: test_pool_parts).
        said = f"signal scale {json.dumps(payload)} refused: "

        async def this_one() -> dict[str, Any] | None:
            cond = await condition(handle, "SpecRejected")
            return cond if cond and cond["message"].startswith(said) else None

        await handle.signal(SIGNAL_SCALE, payload)
        cond: dict[str, Any] = await eventually(
            this_one, what=f"SpecRejected for {payload!r}", every=POLL
        )
        assert cond["status"] == "True" and cond["reason"] == "InvalidScaleSignal", cond
        return cond

    for bad in ({"replicas": 501}, {"replicas": -1}, {"replicas": "ten"}, 7):
        await refused(bad)
    cond = await refused({"replica": 4})
    assert cond["message"] == (
        "signal scale {\"replica\": 4} refused: replica: unknown field (did you mean 'replicas'?)"
    )
    spec = await handle.query("spec")
    assert spec["spec"]["replicas"] == 0 and spec["generation"] == 1

    # The CLI's scale (update `scale_update`) is an accepted change: the rejection goes.
    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
    assert await condition(handle, "SpecRejected") is None

    # So is `apply`.
    await refused({"replicas": "ten"})
    current = await handle.query("spec")
    spec = DevicePoolSpec.model_validate({**current["spec"], "replicas": 0})
    await handle.execute_update(
        UPDATE_APPLY,
        ApplyRequest(metadata=ObjectMeta(name=pool_name), spec=spec),
        result_type=Accepted,
    )
    assert await condition(handle, "SpecRejected") is None

    # And a valid signal, which is applied.
    await refused({"replicas": "ten"})
    await handle.signal(SIGNAL_SCALE, {"replicas": 1})
    await eventually(ready_count(pool_name, 1, control), what="1 ready device", every=POLL)
    assert await condition(handle, "SpecRejected") is None
    await delete_and_wait(handle)


async def test_scale_down_spares_busy_devices_and_delete_removes_them(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 3)
    await eventually(ready_count(pool_name, 3, control), what="3 ready devices", every=POLL)
    devices = await pool_devices(control, pool_name)
    busy = sorted(d["id"] for d in devices)[:2]
    for device_id in busy:
        r = await control.post(f"/_emulator/devices/{device_id}/session", json={"active": True})
        r.raise_for_status()

    await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=1), result_type=Accepted)
    # Only the one idle device may go; two busy ones stay and the pool says so.
    await eventually(
        lambda: _len_is(pool_devices(control, pool_name), 2),
        what="idle device removed",
        every=POLL,
    )
    left = await pool_devices(control, pool_name)
    assert sorted(d["id"] for d in left) == busy
    cond = await eventually(lambda: condition(handle, "ScaleDownBlocked"), what="ScaleDownBlocked")
    assert cond["status"] == "True" and "busy" in cond["message"]

    # A session ends: that device is now idle and goes.
    await control.post(f"/_emulator/devices/{busy[0]}/session", json={"active": False})
    await eventually(
        lambda: _len_is(pool_devices(control, pool_name), 1),
        what="one freed device removed",
        every=POLL,
    )

    await delete_and_wait(handle)
    assert (await stats(control))["devices"]["byPool"].get(pool_name, 0) == 0


async def _len_is(coro: Any, n: int) -> bool:
    return len(await coro) == n


async def test_delete_while_provisioning_leaves_nothing(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    before = await pool_counts(control, pool_name)
    # Every boot stalls, so the devices are certainly still booting when the
    # cancel lands (a 1.5-s boot could finish first and leave only ready ones).
    await control.post("/_emulator/faults", json={"provisionStallRate": 1})
    try:
        handle = await start_pool(env.client, pool_name, 8)
        await eventually(
            lambda: _len_is(pool_devices(control, pool_name), 8),
            what="8 devices created",
            timeout=20,
            every=POLL,
        )
        await handle.cancel()
        await handle.cancel()  # twice: the finalizer must still finish
        booting = [
            d for d in await pool_devices(control, pool_name) if d["status"] == "provisioning"
        ]
        assert len(booting) == 8, booting  # still booting once the cancel was accepted
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    finally:
        await control.post("/_emulator/faults", json={})
    after = await stats(control)
    own = await pool_counts(control, pool_name)
    assert after["devices"]["byPool"].get(pool_name, 0) == 0
    assert await pool_devices(control, pool_name) == []
    assert own["created"] - before["created"] == 8


async def test_create_retried_after_a_lost_response_rents_one_device(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    before = await stats(control)
    # Every create is processed and its answer withheld longer than the client waits.
    # The provider makes both devices, but both answers are lost:
    # the activity retries with the same idempotency key and gets a replay.
    TimedASGITransport.lose_create_answers = 2
    handle = await start_pool(env.client, pool_name, 2)
    await eventually(
        lambda: _replays_since(control, before, 2),
        what="two idempotent replays",
        timeout=20,
        every=POLL,
    )
    await eventually(
        ready_count(pool_name, 2, control), what="2 ready devices", timeout=30, every=POLL
    )
    # This pool's own creates (a new pool): another test's teardown moves the session-wide count.
    assert (await pool_counts(control, pool_name))["created"] == 2
    assert len(await pool_devices(control, pool_name)) == 2
    await delete_and_wait(handle)


async def test_a_create_that_gave_up_is_planned_again_under_the_same_key(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # The create endpoint is unreachable for longer than a create's whole budget
    # (the startup timeout): the batch gives the slot up and the pool plans it
    # again. Had the lost call reached the provider after all, only the same
    # idempotency key makes the second call find that device instead of renting
    # another one: the slot must come back, not a new one.
    before = await pool_counts(control, pool_name)
    # One failure that was the provider's verdict would pause creates in the region.
    settings = FAST.model_copy(update={"startup_timeout_seconds": 4, "failure_streak_limit": 1})
    TimedASGITransport.creates_partitioned = True
    try:
        handle = await start_pool(env.client, pool_name, 1, settings=settings)
        second_batch = env.client.get_workflow_handle(provision_workflow_id(pool_name, 1, 1))
        await eventually(
            lambda: _started(second_batch), what="the slot planned again", timeout=20, every=POLL
        )
    finally:
        TimedASGITransport.creates_partitioned = False
    await eventually(
        ready_count(pool_name, 1, control), what="1 ready device", timeout=20, every=POLL
    )
    (device,) = await pool_devices(control, pool_name)
    assert device["labels"][LABEL_SLOT].endswith("-0")  # <incarnation>-<slot>
    own = await pool_counts(control, pool_name)
    assert own["created"] - before["created"] == 1
    provider = await condition(handle, "ProviderAvailable")
    assert provider is not None and provider["status"] == "True", provider
    await delete_and_wait(handle)


async def test_a_report_that_overtakes_an_observation_waits_for_the_next_one(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # A scale-up starts a pass whose list is answered before the first batch's
    # creates land but arrives after that batch's "created" report. Applied to
    # that observation, the report would make the batch's devices neither in
    # flight nor seen, and the pool would rent them twice.
    before = await pool_counts(control, pool_name)
    gate = asyncio.Event()
    TimedASGITransport.create_gate, TimedASGITransport.at_gate = gate, 0
    try:
        handle = await start_pool(env.client, pool_name, 2)
        await eventually(
            lambda: _settled(TimedASGITransport.at_gate_of[pool_name] >= 2), what="2 creates held"
        )
        TimedASGITransport.late_list_answers[pool_name] = 1.5
        seen = TimedASGITransport.lists[pool_name]
        await handle.execute_update(UPDATE_SCALE, ScaleRequest(replicas=4), result_type=Accepted)
        await eventually(
            lambda: _settled(TimedASGITransport.lists[pool_name] > seen), what="a list after it"
        )
        await asyncio.sleep(0.3)  # the scale-up's own observation is on its way back
        gate.set()
        # The late listing (1.5 s behind) comes back before its switch is turned off.
        await asyncio.sleep(1.5)
    finally:
        gate.set()
        TimedASGITransport.create_gate = None
        TimedASGITransport.late_list_answers.pop(pool_name, None)
    await eventually(
        ready_count(pool_name, 4, control), what="4 ready devices", timeout=30, every=POLL
    )
    await asyncio.sleep(1)  # a pass after convergence
    own = await pool_counts(control, pool_name)
    assert own["created"] - before["created"] == 4
    assert own["terminated"] == before["terminated"]
    # The race happened: a `batch_created` report reached the pool while a list
    # that was answered without the report's devices was still on its way back.
    assert await _overtaken_lists(env, handle.id), await history_digest(env.client, handle.id)
    await delete_and_wait(handle)


async def _overtaken_lists(env: WorkflowEnvironment, workflow_id: str) -> list[str]:
    """Device ids of `batch_created` reports that arrived between a `list_devices`
    being scheduled and its result, when that result did not have them."""
    found: list[str] = []
    for history in await run_histories(env.client, workflow_id):
        open_lists: dict[int, set[str]] = {}  # scheduled event id -> devices reported since
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                if (
                    event.activity_task_scheduled_event_attributes.activity_type.name
                    == "list_devices"
                ):
                    open_lists[event.event_id] = set()
            elif event.HasField("workflow_execution_signaled_event_attributes"):
                signal = event.workflow_execution_signaled_event_attributes
                if signal.signal_name == SIGNAL_BATCH_CREATED:
                    created = json.loads(signal.input.payloads[0].data).get("created") or {}
                    for reported in open_lists.values():
                        reported.update(created.values())
            elif event.HasField("activity_task_completed_event_attributes"):
                done = event.activity_task_completed_event_attributes
                since = open_lists.pop(done.scheduled_event_id, set())
                if since:
                    listed = {d["id"] for d in json.loads(done.result.payloads[0].data)["devices"]}
                    found += sorted(since - listed)
    return found


async def _settled(done: bool) -> bool:
    return done


async def _started(handle: Any) -> bool:
    try:
        await handle.describe()
    except RPCError:
        return False
    return True


async def _replays_since(control: httpx.AsyncClient, before: dict[str, Any], n: int) -> bool:
    now = await stats(control)
    return now["creates"]["idempotentReplays"] - before["creates"]["idempotentReplays"] >= n


async def test_spec_change_during_provisioning_converges_exactly(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    before = await pool_counts(control, pool_name)
    handle = await start_pool(env.client, pool_name, 3)
    spec = DevicePoolSpec.model_validate(
        {
            "platform": "android",
            "region": "us-west",
            "osVersion": "14",
            "replicas": 7,
            "proxy": {"poolRef": "proxyseller-us", "sessionTTL": "15m"},
        }
    )
    accepted = await handle.execute_update(
        UPDATE_APPLY,
        ApplyRequest(metadata=ObjectMeta(name=pool_name), spec=spec),
        result_type=Accepted,
    )
    assert accepted.generation == 2
    await eventually(ready_count(pool_name, 7, control), what="7 ready devices", every=POLL)
    own = await pool_counts(control, pool_name)
    assert own["created"] - before["created"] == 7

    # Applying the same spec again changes nothing.
    again = await handle.execute_update(
        UPDATE_APPLY,
        ApplyRequest(metadata=ObjectMeta(name=pool_name), spec=spec),
        result_type=Accepted,
    )
    assert again.generation == 2
    await delete_and_wait(handle)


async def test_apply_refuses_wrong_name_and_immutable_changes(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    handle = await start_pool(env.client, pool_name, 0)
    base = {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": 1}
    with pytest.raises(WorkflowUpdateFailedError) as wrong_name:
        await handle.execute_update(
            UPDATE_APPLY,
            ApplyRequest(
                metadata=ObjectMeta(name="other"), spec=DevicePoolSpec.model_validate(base)
            ),
        )
    assert "metadata.name" in str(wrong_name.value.cause)
    with pytest.raises(WorkflowUpdateFailedError) as region:
        await handle.execute_update(
            UPDATE_APPLY,
            ApplyRequest(
                metadata=ObjectMeta(name=pool_name),
                spec=DevicePoolSpec.model_validate({**base, "region": "eu-west"}),
            ),
        )
    assert "spec.region: cannot change" in str(region.value.cause)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(UPDATE_SCALE, {"replicas": 501})
    spec = await handle.query("spec")
    assert spec["generation"] == 1 and spec["spec"]["replicas"] == 0
    await delete_and_wait(handle)


@pytest.mark.parametrize(
    ("start", "reason", "named"),
    [
        pytest.param(
            {"proxy_ref": "no-such-proxies"},
            "UnknownProxyPool",
            ("no-such-proxies",),
            id="proxy-pool",
        ),
        # `region: us-wset` (a typo) rented devices there before (issue 28); the known
        # regions are listed.
        pytest.param({"region": "us-wset"}, "UnknownRegion", ("us-wset", "us-west"), id="region"),
        pytest.param({"account": "nobody"}, "UnknownAccount", ("nobody",), id="account"),
    ],
)
async def test_an_unknown_reference_stops_provisioning_with_a_reason(
    env: WorkflowEnvironment,
    worker: DeviceActivities,
    control: httpx.AsyncClient,
    pool_name: str,
    start: dict[str, str],
    reason: str,
    named: tuple[str, ...],
) -> None:
    handle = await start_pool(env.client, pool_name, 2, **start)
    cond = await eventually(
        lambda: _condition_with(handle, "Ready", "False", reason),
        what=f"Ready=False {reason}",
        every=POLL,
    )
    assert all(word in cond["message"] for word in named), cond
    assert len(await pool_devices(control, pool_name)) == 0
    status = await status_of(handle)
    assert status["phase"] == "Degraded"
    # ...and `describe` says it as a Warning event, not only as a condition (issue 28).
    said = (await handle.query("events"))["events"]
    warnings = [e for e in said if e["type"] == "Warning" and e["reason"] == reason]
    assert warnings and named[0] in warnings[0]["message"], said
    await delete_and_wait(handle)


async def _condition_with(handle: Any, type_: str, status: str, reason: str) -> Any:
    cond = await condition(handle, type_)
    if cond and cond["status"] == status and cond["reason"] == reason:
        return cond
    return None


async def test_delete_during_an_activity_is_not_lost(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Slow provider answers: the cancel arrives while the pool awaits its first
    # `list_devices`. The SDK then hands the cancel to the activity, and the
    # pool must still notice it was deleted (workflows/shared/errors.py).
    await control.post("/_emulator/faults", json={"latencyMs": 1500})
    try:
        handle = await start_pool(env.client, pool_name, 2)

        async def observing() -> bool:
            desc = await handle.describe()
            return any(
                a.activity_type.name == "list_devices"
                for a in desc.raw_description.pending_activities
            )

        await eventually(observing, what="the pool awaiting list_devices", timeout=10)
        await handle.cancel()
    finally:
        await control.post("/_emulator/faults", json={})
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=30)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    await eventually(
        lambda: _len_is(pool_devices(control, pool_name), 0),
        what="nothing left",
        timeout=15,
        every=POLL,
    )


async def test_no_credential_in_any_workflow_history(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # README/DESIGN: no secret (API key, proxy password) ever enters a workflow
    # input, activity input or result; Temporal history is readable by everyone
    # with UI access. A pool with a proxy (its password is resolved worker-side
    # and sent to the provider) goes through creates, health and teardown; then
    # every history on this server (that pool's and whatever else this session
    # ran: batches, health checks, ledgers, continue-as-new runs) is searched,
    # payloads and failure messages as raw bytes.
    handle = await start_pool(env.client, pool_name, 2)
    await eventually(ready_count(pool_name, 2, control), what="2 ready devices", every=POLL)
    await delete_and_wait(handle)
    secrets = [key.encode() for key in ACCOUNTS.values()] + [PROXY_PASSWORD.encode()]
    leaks: list[str] = []
    scanned = 0
    async for execution in env.client.list_workflows():
        history = await env.client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        scanned += 1
        for event in history.events:
            raw = event.SerializeToString()
            leaks += [f"{execution.id} event {event.event_id}" for s in secrets if s in raw]
        if execution.id == handle.id:
            # Raw bytes show what was sent: the pool's own input is in there.
            assert b"proxyseller-us" in history.events[0].SerializeToString()
    assert scanned >= 3, scanned  # at least the pool, its batch and its health check
    assert not leaks, leaks


async def test_a_listing_that_lags_behind_the_creates_rents_nothing_extra(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    # Issue 23 (suspected): creates are counted by observation once their batch
    # reports them; a provider whose listing shows a new device only seconds
    # after its create returned made the pool rent it again.
    # Shorter than a boot (1.5 s here, ~45 s at a real provider): a batch that ended
    # has seen its devices ready, and a listing that lags longer is not waited for.
    TimedASGITransport.listing_lag[pool_name] = 1.2
    handle = await start_pool(env.client, pool_name, 2)
    await eventually(
        ready_count(pool_name, 2, control), what="2 ready devices", timeout=30, every=POLL
    )
    await asyncio.sleep(5)  # past the lag: anything rented twice is listed by now
    assert (await pool_counts(control, pool_name))["created"] == 2
    status = await handle.query("status")
    assert status["readyDevices"] == 2, status
    await delete_and_wait(handle)
