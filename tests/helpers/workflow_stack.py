"""Helpers shared by the workflow tests (fixtures are in conftest.py).

A uniquely named module: `from conftest import ...` would pick whichever
`conftest` was imported first when several test folders run together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, ClassVar

import httpx
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

from devicepool.activities import models as am
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import PoolSettings
from devicepool.api.names import TASK_QUEUE, pool_workflow_id, watch_task_queue
from devicepool.api.v1alpha1 import DevicePoolSpec, ObjectMeta
from devicepool.worker.build import account_workers, new_worker, pool_queue_workers
from devicepool.workflows import WORKFLOWS
from devicepool.workflows.pool.messages import PoolInput
from tests.support import emulator as ground_truth
from tests.support.binaries import temporal_binary as temporal_binary  # re-exported
from tests.support.emulator import stats as stats  # re-exported
from tests.support.histories import run_histories as run_histories  # re-exported
from tests.support.manifests import pool_manifest
from tests.support.settings import FAST as FAST  # re-exported
from tests.support.waits import eventually as eventually  # re-exported

EMULATOR_URL = "http://emulator.test"
ACCOUNTS = {"default": "wf-test-key", "second": "wf-test-key-2"}
# The proxy pool's password: distinctive, so a history can be searched for it.
PROXY_PASSWORD = "wf-proxy-password-3d9c"
# Low, so continue-as-new happens inside tests (override to record long histories).
CAN_THRESHOLD = int(os.environ.get("DEVICEPOOL_TEST_CAN_THRESHOLD", "60"))


async def start_pool(
    client: Client,
    name: str,
    replicas: int,
    *,
    settings: PoolSettings = FAST,
    account: str = "default",
    proxy_ref: str | None = "proxyseller-us",
    region: str = "us-west",
    task_queue: str = TASK_QUEUE,
    spec_fields: dict[str, Any] | None = None,
) -> WorkflowHandle[Any, Any]:
    fields: dict[str, Any] = {
        "region": region,
        "replicas": replicas,
        "providerCredentialRef": account,
        "proxy": None,
        **(spec_fields or {}),
    }
    if proxy_ref:
        fields["proxy"] = {"poolRef": proxy_ref, "stickyTTL": 900}
    return await client.start_workflow(
        "DevicePool",
        PoolInput(
            metadata=ObjectMeta(name=name),
            spec=DevicePoolSpec.model_validate(pool_manifest(name, **fields)["spec"]),
            settings=settings,
        ),
        id=pool_workflow_id(name),
        task_queue=task_queue,
    )


async def pool_devices(
    control: httpx.AsyncClient, name: str, *, account: str = "default"
) -> list[dict[str, Any]]:
    """Ground truth for one pool: its non-terminated devices, straight from the emulator."""
    devices = await ground_truth.labelled_devices(control, name, api_key=ACCOUNTS[account])
    return [d for d in devices if d["status"] != "terminated"]


async def pool_counts(
    control: httpx.AsyncClient, name: str, *, account: str = "default"
) -> dict[str, int]:
    """One pool's own `created` and `terminated` counts (tests.support.emulator.pool_counts)."""
    return await ground_truth.pool_counts(control, name, api_key=ACCOUNTS[account])


async def history_digest(client: Client, workflow_id: str) -> str:
    """A compact, readable trace of a workflow's runs (for failure messages)."""
    lines: list[str] = []
    for history in await run_histories(client, workflow_id):
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


class TimedASGITransport(httpx.ASGITransport):
    """ASGITransport that honours the client's read timeout like a socket would.

    The emulator's `timeoutRate` fault processes a request and then withholds
    the answer; over a real socket the client gives up and retries. In process,
    httpx would wait forever, so this transport enforces the timeout itself.
    """

    # Test switch: answers of this many create calls are "lost" after the
    # emulator processed them (the device exists; the client sees a timeout).
    lose_create_answers = 0
    # Test switch: a partition between workers and the provider's create
    # endpoint. Calls hang until the caller gives up and never arrive.
    creates_partitioned = False
    # Test switch: while set and closed, creates wait here before reaching the
    # provider (`at_gate` counts them).
    create_gate: asyncio.Event | None = None
    at_gate = 0
    # Test switch: pool -> seconds a list of its devices is answered late
    # (processed at once, the answer held back); `lists` counts them per pool.
    late_list_answers: ClassVar[dict[str, float]] = {}
    lists: ClassVar[Counter[str]] = Counter()
    # Test switch: device ids whose status answers leave `updatedAt` out (a
    # provider that does not say when a status changed), so a health check that
    # lost its clocks cannot rebuild them from the provider.
    hide_updated_at: ClassVar[set[str]] = set()
    # Test switch: while set and closed, DELETEs wait here before reaching the
    # provider (a teardown that takes its time).
    delete_gate: asyncio.Event | None = None
    # Test switch: device id -> how many of its DELETEs are refused with 409
    # invalid_state before one reaches the provider.
    refuse_deletes: ClassVar[dict[str, int]] = {}
    # Test switch: pool -> seconds a device it creates stays out of its listings (a
    # provider whose label index lags behind its creates); `born` is when each was.
    listing_lag: ClassVar[dict[str, float]] = {}
    born: ClassVar[dict[str, float]] = {}
    # Test switch: pools whose listings are refused with 401 (a revoked or rotated key).
    unauthenticated_lists: ClassVar[set[str]] = set()
    # ...and what happens at the provider right after such a refusal (a session starts).
    after_refused_delete: ClassVar[Callable[[str], Awaitable[Any]] | None] = None

    @classmethod
    def reset(cls) -> None:
        """Every switch back to its default (tests/workflows/conftest.py does it after each test)."""
        cls.lose_create_answers = 0
        cls.creates_partitioned = False
        if cls.create_gate is not None:
            cls.create_gate.set()  # creates held by a failed test go on
        cls.create_gate = None
        cls.at_gate = 0
        cls.late_list_answers.clear()
        cls.lists.clear()
        cls.hide_updated_at.clear()
        if cls.delete_gate is not None:
            cls.delete_gate.set()
        cls.delete_gate = None
        cls.refuse_deletes.clear()
        cls.after_refused_delete = None
        cls.unauthenticated_lists.clear()
        cls.listing_lag.clear()
        cls.born.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._handle(request)
        if TimedASGITransport.listing_lag:
            response = await self._lag(request, response)
        hidden = TimedASGITransport.hide_updated_at
        if not hidden or "json" not in response.headers.get("content-type", ""):
            return response
        body = json.loads(await response.aread())
        items = body.get("items") if isinstance(body, dict) and "items" in body else [body]
        for item in items or []:
            if isinstance(item, dict) and item.get("id") in hidden:
                item.pop("updatedAt", None)
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(response.status_code, headers=headers, json=body, request=request)

    async def _lag(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        """Keep a lagging pool's new devices out of its listings for a while."""
        lag, now = TimedASGITransport.listing_lag, asyncio.get_running_loop().time()
        body = json.loads(await response.aread() or b"null")
        if request.method == "POST" and request.url.path.endswith("/devices"):
            if isinstance(body, dict) and (body.get("labels") or {}).get("pool") in lag:
                TimedASGITransport.born.setdefault(body["id"], now)
            return response
        pool = request.url.params.get("label", "").removeprefix("pool=")
        if request.method != "GET" or pool not in lag or not isinstance(body, dict):
            return response
        born = TimedASGITransport.born
        body["items"] = [
            d for d in body.get("items") or [] if now - born.get(d["id"], -1e9) >= lag[pool]
        ]
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(response.status_code, headers=headers, json=body, request=request)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        gate = TimedASGITransport.delete_gate
        if request.method == "DELETE" and gate is not None:
            await gate.wait()
        device_id = request.url.path.rsplit("/", 1)[-1]
        if request.method == "DELETE" and TimedASGITransport.refuse_deletes.get(device_id, 0) > 0:
            TimedASGITransport.refuse_deletes[device_id] -= 1
            if TimedASGITransport.after_refused_delete is not None:
                await TimedASGITransport.after_refused_delete(device_id)
            detail = f"device {device_id} cannot be terminated right now"
            return _problem(request, 409, "invalid_state", detail)
        label = request.url.params.get("label", "")
        if request.method == "GET" and label.startswith("pool="):
            pool = label[len("pool=") :]
            if pool in TimedASGITransport.unauthenticated_lists:
                return _problem(request, 401, "unauthenticated", "the API key is not valid")
            response = await super().handle_async_request(request)
            await response.aread()
            TimedASGITransport.lists[pool] += 1
            await asyncio.sleep(TimedASGITransport.late_list_answers.get(pool, 0.0))
            return response
        if request.method == "POST" and request.url.path.endswith("/devices"):
            gate = TimedASGITransport.create_gate
            if gate is not None and not gate.is_set():
                TimedASGITransport.at_gate += 1
                await gate.wait()
            if TimedASGITransport.creates_partitioned:
                await asyncio.sleep(float((request.extensions.get("timeout") or {})["read"]))
                raise httpx.ReadTimeout("partitioned", request=request)
            if TimedASGITransport.lose_create_answers > 0:
                TimedASGITransport.lose_create_answers -= 1
                response = await super().handle_async_request(request)
                await response.aread()
                raise httpx.ReadTimeout("answer lost on the way back", request=request)
        read = (request.extensions.get("timeout") or {}).get("read")
        try:
            return await asyncio.wait_for(super().handle_async_request(request), read)
        except TimeoutError as err:
            raise httpx.ReadTimeout("emulated read timeout", request=request) from err


def _problem(request: httpx.Request, status: int, code: str, detail: str) -> httpx.Response:
    """An error answer in the provider contract's problem+json shape."""
    problem = {
        "type": "about:blank",
        "title": code,
        "status": status,
        "code": code,
        "detail": detail,
    }
    headers = {"content-type": "application/problem+json"}
    return httpx.Response(status, json=problem, headers=headers, request=request)


class Workers:
    """The session's workers, restartable: a restart drops every cached
    workflow (the next task replays from history) and cancels running
    activities, as a killed worker process would."""

    def __init__(self, client: Client, activities: DeviceActivities) -> None:
        self.client = client
        self.activities = activities
        self._running: list[tuple[Worker, asyncio.Task[None]]] = []

    def start(self) -> None:
        workers = [
            *pool_queue_workers(
                self.client,
                self.activities,
                # After a restart, tasks of workflows cached by the old worker
                # wait this long on its sticky queue before anyone else may
                # take them; shortened so the restart test stays quick.
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
            ),
            *account_workers(self.client, self.activities, list(ACCOUNTS)),
        ]
        self._running = [(w, asyncio.ensure_future(w.run())) for w in workers]

    async def stop(self) -> None:
        for worker, _ in self._running:
            await worker.shutdown()
        await asyncio.gather(*(task for _, task in self._running), return_exceptions=True)
        self._running = []

    async def restart(self) -> None:
        await self.stop()
        self.start()


class OwnQueueActivities:
    """The pool's own activities, for a pool a test runs on a task queue of its own.

    A pool's activities go to its workflow's task queue (and its watch to that
    queue's `-watch`), while its children and creates go to the session's
    workers: a test scripts only what it overrides (with `@activity.defn` of
    the same name) and the rest is the session's real `DeviceActivities`.
    """

    def __init__(self, real: DeviceActivities) -> None:
        self.real = real

    @activity.defn(name="check_pool_refs")
    async def check_pool_refs(self, input: am.CheckRefsInput) -> am.CheckRefsResult:
        return await self.real.check_pool_refs(input)

    @activity.defn(name="list_devices")
    async def list_devices(self, input: am.ListDevicesInput) -> am.ListDevicesResult:
        return await self.real.list_devices(input)

    @activity.defn(name="watch_devices")
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        return await self.real.watch_devices(input)

    @activity.defn(name="terminate_device")
    async def terminate_device(self, input: am.TerminateDeviceInput) -> am.TerminateDeviceResult:
        return await self.real.terminate_device(input)

    @activity.defn(name="running_workflows")
    async def running_workflows(self, input: am.RunningWorkflowsInput) -> am.RunningWorkflowsResult:
        return await self.real.running_workflows(input)

    @activity.defn(name="terminate_pool")
    async def terminate_pool(self, input: am.TerminatePoolInput) -> am.TerminatePoolResult:
        return await self.real.terminate_pool(input)

    @contextlib.asynccontextmanager
    async def serving(self, client: Client, queue: str) -> AsyncIterator[None]:
        """Workers for `queue` (the pool workflows and these activities) and its watch queue."""
        short = [
            self.check_pool_refs,
            self.list_devices,
            self.terminate_device,
            self.running_workflows,
            self.terminate_pool,
        ]
        async with (
            new_worker(client, task_queue=queue, workflows=WORKFLOWS, activities=short),
            new_worker(client, task_queue=watch_task_queue(queue), activities=[self.watch_devices]),
        ):
            yield


async def cancel_running_pools(client: Client) -> None:
    """Cancel every pool still running (a test that failed before its own cleanup)."""
    query = "WorkflowType = 'DevicePool' AND ExecutionStatus = 'Running'"
    async for execution in client.list_workflows(query):
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).cancel()
