"""Helpers shared by the workflow tests (fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from activities.models import PoolSettings
from api.names import TASK_QUEUE, pool_workflow_id
from api.v1alpha1 import DevicePoolSpec, ObjectMeta
from workflows.messages import PoolInput

EMULATOR_URL = "http://emulator.test"
ACCOUNTS = {"default": "wf-test-key", "second": "wf-test-key-2"}
# Low, so continue-as-new happens inside tests (override to record long histories).
CAN_THRESHOLD = int(os.environ.get("DEVICEPOOL_TEST_CAN_THRESHOLD", "60"))

FAST = PoolSettings(
    resync_seconds=0.3,
    health_seconds=1,
    offline_after_seconds=3,
    startup_timeout_seconds=15,
    idle_grace_seconds=0,
    provision_batch_size=4,
    watch_max_seconds=20,
)


async def start_pool(
    client: Client,
    name: str,
    replicas: int,
    *,
    settings: PoolSettings = FAST,
    account: str = "default",
    proxy_ref: str | None = "proxyseller-us",
    region: str = "us-west",
) -> WorkflowHandle[Any, Any]:
    spec: dict[str, Any] = {
        "platform": "android",
        "region": region,
        "osVersion": "14",
        "replicas": replicas,
        "providerCredentialRef": account,
    }
    if proxy_ref:
        spec["proxy"] = {"poolRef": proxy_ref, "stickyTTL": 900}
    return await client.start_workflow(
        "DevicePool",
        PoolInput(
            metadata=ObjectMeta(name=name),
            spec=DevicePoolSpec.model_validate(spec),
            settings=settings,
        ),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


async def stats(control: httpx.AsyncClient) -> dict[str, Any]:
    response = await control.get("/_emulator/stats")
    response.raise_for_status()
    return response.json()


async def pool_devices(control: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    """Ground truth for one pool: its non-terminated devices, straight from the emulator."""
    response = await control.get(
        "/api/v1/devices",
        params={"label": f"pool={name}", "page_size": 100},
        headers={"Authorization": f"Bearer {ACCOUNTS['default']}"},
    )
    response.raise_for_status()
    items = response.json()["items"]
    token = response.json().get("nextPageToken")
    while token:
        more = await control.get(
            "/api/v1/devices",
            params={"label": f"pool={name}", "page_size": 100, "page_token": token},
            headers={"Authorization": f"Bearer {ACCOUNTS['default']}"},
        )
        items += more.json()["items"]
        token = more.json().get("nextPageToken")
    return [d for d in items if d["status"] != "terminated"]


async def eventually(
    check: Callable[[], Awaitable[Any]], *, timeout: float = 30, what: str = "condition"
) -> Any:
    """Poll `check` until it returns something truthy (and return it) or fail."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


async def history_digest(client: Client, workflow_id: str) -> str:
    """A compact, readable trace of a workflow's runs (for failure messages)."""
    lines: list[str] = []
    runs = [r async for r in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    for run in sorted(runs, key=lambda r: r.start_time):
        history = await client.get_workflow_handle(workflow_id, run_id=run.run_id).fetch_history()
        for event in history.events:
            kind = event.WhichOneof("attributes") or ""
            if "workflow_task" in kind:
                continue
            detail = ""
            if event.HasField("activity_task_scheduled_event_attributes"):
                detail = event.user_metadata.summary.data.decode()
            elif event.HasField("workflow_execution_signaled_event_attributes"):
                attrs = event.workflow_execution_signaled_event_attributes
                detail = attrs.signal_name + " " + attrs.input.payloads[0].data.decode()[:160]
            elif event.HasField("activity_task_failed_event_attributes"):
                detail = event.activity_task_failed_event_attributes.failure.message[:160]
            elif event.HasField("timer_started_event_attributes"):
                detail = str(
                    event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
                )
            stamp = event.event_time.ToDatetime().strftime("%M:%S.%f")[:-3]
            lines.append(f"{stamp} {kind.removesuffix('_event_attributes')} {detail}")
    return "\n".join(lines)


async def condition(handle: Any, type_: str) -> dict[str, Any] | None:
    """The pool's condition of this type, from its `status` query (None if absent)."""
    status = await handle.query("status")
    return next((c for c in status["conditions"] if c["type"] == type_), None)
