"""Issue 26's scenario: a BrowserPool on two node workers, one of them lost and back.

A dev server of its own, the pool's worker, and two node workers in process,
each serving its node's task queue over one emulated node of one BitBrowser
account (tests.helpers.bitbrowser.Account), and beating at the node registry.
Ground truth is the emulator: its profiles, which are open where, and its
duplicate counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.converter import decode_typed_search_attributes
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from devicepool.activities.node_browsers import NodeBrowserActivities
from devicepool.activities.node_models import NodeBeat, NodeCreateInput
from devicepool.activities.node_registry import NodeRegistryActivities, query_nodes, split_nodes
from devicepool.activities.providers.bitbrowser import BrowserProfiles, LocalApi
from devicepool.activities.providers.bitbrowser.profile_provider import (
    BitBrowserProfiles,
    parse_mark,
)
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import PoolSettings, ProxyPoolSettings
from devicepool.api.browserpool.v1beta1 import BrowserPool, BrowserPoolSpec
from devicepool.api.names import (
    POOL_COLUMNS,
    TASK_QUEUE,
    UPDATE_APPLY,
    browser_pool_workflow_id,
    node_task_queue,
)
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.client.browser_pools import BrowserPoolClient
from devicepool.emulator.bitbrowser import BitBrowserConfig
from devicepool.testing import eventually as poll_until
from devicepool.worker.build import new_worker
from devicepool.worker.node import beat_forever
from devicepool.workflows.browserpool import calls
from devicepool.workflows.browserpool.messages import BrowserApplyRequest, BrowserPoolInput
from devicepool.workflows.browserpool.workflow import BrowserPoolWorkflow
from devicepool.workflows.nodes.workflow import NodeRegistryWorkflow
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.cli import cli_in_thread
from tests.helpers.servers import dev_server
from tests.helpers.settings import FAST

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]

LOST_AFTER = 3.0
# A third of LOST_AFTER, as `devicepool dev` beats: each beat is a signal-with-start that
# the server and the registry's worker take.
BEAT = LOST_AFTER / 3
# How often a wait polls (`eventually`'s default is 0.2 s): each poll is a query the
# pool's worker answers. (With BEAT at 1 s, not 0.5, the module's CPU went 18 -> 11 s.)
POLL = 0.5
SETTINGS = FAST.model_copy(
    update={"resync_seconds": 1.0, "node_lost_after_seconds": LOST_AFTER, "failure_streak_limit": 3}
)
# How long a node call waits for its node worker to take it (`calls.NODE_PICKUP`, 15 s, not a
# setting): a pass that lists a node just stopped waits that long. Shortened as LOST_AFTER is,
# by `node_stack` (calls.py is passed through the sandbox: the workflows read what it patches).
PICKUP = timedelta(seconds=5)


def eventually(check: Callable[[], Awaitable[Any]], *, timeout: float, what: str) -> Awaitable[Any]:
    """`devicepool.testing.eventually`, polling every `POLL` s."""
    return poll_until(check, timeout=timeout, what=what, every=POLL)


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await dev_server() as server:
        yield server


class Node:
    """One node worker in process: its activities on its queue, and its beats."""

    def __init__(
        self,
        client: Client,
        account: Account,
        name: str,
        *,
        says: str = "",
        key: str = "",
        proxy_pools: dict[str, ProxyPoolSettings] | None = None,
    ) -> None:
        self.client, self.name = client, name
        self.says = says  # the BitBrowser account its beats name (`--node-account`)
        api = LocalApi(
            base_url=f"http://{name}.local",
            api_key=key or account.key,
            timeout=5.0,
            transport=account.transports[name],
            scrubber=Scrubber.of(),
        )
        self.provider = BitBrowserProfiles(
            BrowserProfiles(api, settle_seconds=0.0), closing_wait_seconds=2.0
        )
        self.activities = NodeBrowserActivities(self.provider, node=name, proxy_pools=proxy_pools)
        self.worker: Worker | None = None
        self.beats: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.worker = new_worker(
            self.client,
            task_queue=node_task_queue(self.name),
            activities=self.activities.activities(),
        )
        await self.worker.__aenter__()
        self.beats = asyncio.ensure_future(self._beat())

    async def stop(self) -> None:
        """As a SIGKILL looks from outside: no more beats, nobody on the queue."""
        if self.beats is not None:
            self.beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.beats
        if self.worker is not None:
            await self.worker.__aexit__(None, None, None)
        self.worker = self.beats = None

    async def _beat(self) -> None:
        """The node worker's own beat loop (its Local API's health in every beat)."""
        beat = NodeBeat(
            node=self.name, labels={"node": self.name}, account=self.says, interval_seconds=BEAT
        )
        await beat_forever(self.client, beat, stop=asyncio.Event(), api=self.provider)


def placement(account: Account, pool: str) -> dict[str, Any]:
    """The emulator's truth: the pool's profiles by node, and which are open where."""
    emulator = account.emulator
    marks = {
        p.id: m
        for p in emulator.profiles.profiles.values()
        if (m := parse_mark(p.fields.get("remark") or "")) is not None and m.pool == pool
    }
    profiles = [emulator.profiles.profiles[pid] for pid in marks]
    by_node = Counter(m.node for m in marks.values())
    open_ids = {
        p.profile_id for p in emulator.processes.settled(emulator.now()) if p.state == "open"
    }
    return {
        "by_node": dict(by_node),
        "total": len(profiles),
        "open": sum(1 for p in profiles if p.id in open_ids),
        "ids": {p.id for p in profiles},
    }


async def start_browser_pool(
    client: Client, pool: str, replicas: int, **spec: Any
) -> WorkflowHandle[Any, Any]:
    """A BrowserPool of `replicas` profiles (and `spec`'s other BrowserPoolSpec fields)
    with this module's fast settings."""
    return await client.start_workflow(
        BrowserPoolWorkflow.run,
        BrowserPoolInput(
            metadata=ObjectMeta(name=pool),
            spec=BrowserPoolSpec(replicas=replicas, **spec),
            settings=SETTINGS,
        ),
        id=browser_pool_workflow_id(pool),
        task_queue=TASK_QUEUE,
    )


async def spread_now(
    handle: WorkflowHandle[Any, Any], account: Account, pool: str
) -> dict[str, Any] | None:
    """The emulator's placement if a pool of 2 is ready with one profile on each of node-1
    and node-2 (its status and the emulator agree), both open; else None."""
    s = await status(handle)
    truth = placement(account, pool)
    one_each = {"node-1": 1, "node-2": 1}
    done = s.get("readyProfiles") == 2 and s.get("byNode") == truth["by_node"] == one_each
    return truth if done and truth["open"] == 2 else None


async def spread_open(
    handle: WorkflowHandle[Any, Any], account: Account, pool: str
) -> dict[str, Any]:
    """`spread_now`'s placement, once it is so."""
    found: dict[str, Any] = await eventually(
        lambda: spread_now(handle, account, pool), timeout=40, what="2 open, 1 on each node"
    )
    return found


def browser_manifest(directory: Path, pool: str, spec: str) -> Path:
    """`directory/browsers.yaml`: the v1alpha1 BrowserPool `pool` of `spec` (flow-style YAML)."""
    manifest = directory / "browsers.yaml"
    manifest.write_text(
        "apiVersion: mobile.example.com/v1alpha1\n"
        "kind: BrowserPool\n"
        f"metadata: {{name: {pool}}}\n"
        f"spec: {spec}\n"
    )
    return manifest


async def status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return dict(await handle.query("status"))


async def deleted(
    handle: WorkflowHandle[Any, Any], *, timeout: float, handed_over: bool = False
) -> dict[str, Any]:
    """The status of a deleted pool once its run has ended: cancelled, as every pool kind
    ends a deletion on the reconciler shell. `handed_over`: the teardown was held long
    enough to continue as new (a server that suggests it early), and the run that took
    it over completed."""
    try:
        result = await asyncio.wait_for(handle.result(), timeout=timeout)
    except WorkflowFailureError as err:
        assert isinstance(err.cause, CancelledError), err.cause
    else:
        assert handed_over, f"the run completed, not cancelled: {result}"
    ended = (await handle.describe()).status
    allowed = {WorkflowExecutionStatus.CANCELED}
    if handed_over:
        allowed.add(WorkflowExecutionStatus.COMPLETED)
    assert ended in allowed, ended
    return await status(handle)


async def web_ui(
    handle: WorkflowHandle[Any, Any], **want: Any
) -> tuple[dict[str, Any], str] | None:
    """The pool's search attributes (ours, by name) and its Web UI details, once `want` holds."""
    described = (await handle.describe()).typed_search_attributes
    attrs = {p.key.name: p.value for p in described if p.key.name in POOL_COLUMNS}
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    if all(attrs.get(name) == value for name, value in want.items()):
        return attrs, meta.current_details
    return None


async def upserts(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """Each search-attribute upsert in the pool's history, as name -> value."""
    history = await handle.fetch_history()
    return [
        {p.key.name: p.value for p in decode_typed_search_attributes(attributes.search_attributes)}
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        for attributes in [e.upsert_workflow_search_attributes_event_attributes]
    ]


@contextlib.asynccontextmanager
async def node_stack(
    client: Client,
    says: dict[str, str] | None = None,
    keys: dict[str, str] | None = None,
    proxy_pools: dict[str, ProxyPoolSettings] | None = None,
) -> AsyncIterator[tuple[Account, dict[str, Node]]]:
    """The pool worker and two node workers (node-1, node-2) over one emulated account
    (`says`: the BitBrowser account a node's beats name, none by default; `keys`: a key a
    node holds other than the account's; `proxy_pools`: what every node has configured)."""
    account = Account(BitBrowserConfig(nodes=["node-1", "node-2"], api_key=KEY, speed=20.0, seed=7))
    nodes = {
        name: Node(
            client,
            account,
            name,
            says=(says or {}).get(name, ""),
            key=(keys or {}).get(name, ""),
            proxy_pools=proxy_pools,
        )
        for name in ("node-1", "node-2")
    }
    registry = NodeRegistryActivities()
    worker = new_worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[BrowserPoolWorkflow, NodeRegistryWorkflow],
        activities=[registry.live_nodes, pool_settings],
    )
    with mock.patch.object(calls, "NODE_PICKUP", PICKUP):
        async with worker:
            for node in nodes.values():
                await node.start()
            try:
                yield account, nodes
            finally:
                await end_pools_left_running(client)
                for node in nodes.values():
                    await node.stop()
                    await node.activities.aclose()
                await account.aclose()


async def end_pools_left_running(client: Client) -> None:
    """A test that failed half-way leaves its pool running; its calls would go to the next
    test's node workers (the same node names, the same task queues), as creates nobody made
    there (CI: a failed CLI test's creates, without a proxy, in the next test's count)."""
    running = "WorkflowType = 'BrowserPool' AND ExecutionStatus = 'Running'"
    async for pool in client.list_workflows(running):
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(pool.id, run_id=pool.run_id).terminate(
                "left by a test"
            )


async def alive_only(client: Client, *names: str) -> bool:
    """The registry counts no node alive but `names`, as the pools here count."""
    view = await query_nodes(client)
    now = datetime.now(UTC)
    seen = split_nodes(view.nodes, selector={}, lost_after_seconds=LOST_AFTER, now=now)
    return {n.node for n in seen.alive} <= set(names)


@activity.defn(name="pool_settings")
async def pool_settings() -> PoolSettings:
    """The worker's intervals, as a pool started by `apply` (no settings in its input) asks."""
    return SETTINGS


async def test_a_pool_of_2_spreads_survives_a_lost_node_and_tears_down(
    env: WorkflowEnvironment,
) -> None:
    """The wiring of the placement test_bp_plan.py decides at 6 (3/3, lost and held on the
    other node, the replacements gone once it is back): 2 show each step."""
    client = env.client
    pool = f"bp-{uuid.uuid4().hex[:6]}"
    async with node_stack(client) as (account, nodes):
        handle = await start_browser_pool(client, pool, 2)

        async def spread(
            by_node: dict[str, int], truth_by_node: dict[str, int] | None = None
        ) -> dict[str, Any] | None:
            """The status says `by_node` with 2 ready; the emulator agrees (`truth_by_node`:
            what it holds, a lost node's profiles included), every profile open."""
            s = await status(handle)
            truth = placement(account, pool)
            held = truth_by_node or by_node
            done = (
                s.get("readyProfiles") == 2
                and s.get("byNode") == by_node
                and truth["by_node"] == held
                and truth["open"] == sum(held.values())
            )
            return s if done else None

        first = await eventually(
            lambda: spread({"node-1": 1, "node-2": 1}), timeout=40, what="2 open, 1/1"
        )
        assert first["phase"] == "Ready", first
        # The worker's values the pool runs by, as numbers (`describe`; issue 43, item 11).
        assert (first["failureStreakLimit"], first["nodeLostAfterSeconds"]) == (3, LOST_AFTER)
        before = placement(account, pool)["ids"]
        # Started without search attributes: the pool writes them (platform `browser`).
        attrs, details = await eventually(
            lambda: web_ui(handle, DevicePoolPhase="Ready", DevicePoolReady=2),
            timeout=10,
            what="search attributes saying Ready, 2 ready",
        )
        assert attrs == {
            "DevicePoolPlatform": "browser",
            "DevicePoolPhase": "Ready",
            "DevicePoolDesired": 2,
            "DevicePoolReady": 2,
        }
        assert details.startswith(f"**{pool}** · BrowserPool · nodes `any`"), details
        assert "node-1  1\nnode-2  1" in details and details.endswith("all fine"), details

        # node-1's worker dies: its profile is lost and held again on node-2.
        await nodes["node-1"].stop()
        lost = await eventually(
            lambda: spread({"node-2": 2}, {"node-1": 1, "node-2": 2}),
            timeout=LOST_AFTER + 25,
            what="node-1's profile recreated on node-2",
        )
        conditions = {c["type"]: c for c in lost["conditions"]}
        assert conditions["NodesAvailable"]["reason"] == "NodesLost", conditions
        assert "node-1" in conditions["NodesAvailable"]["message"]
        assert lost["lostProfiles"] == 1, lost
        _, details = await eventually(lambda: web_ui(handle), timeout=5, what="details")
        assert "lost     1" in details and "**NodesAvailable** True · NodesLost" in details
        # (the emulator still has node-1's: 3 in all while it is away)
        assert placement(account, pool)["total"] == 3

        # node-1 comes back: the surplus goes, and the spread is 1/1 again.
        await nodes["node-1"].start()
        back = await eventually(
            lambda: spread({"node-1": 1, "node-2": 1}), timeout=30, what="1/1 again"
        )
        assert back["lostProfiles"] == 0
        truth = placement(account, pool)
        assert truth["total"] == 2
        # The replacement on the busier node-2 went; node-1's own stayed.
        assert truth["ids"] == before

        # Written only when a value changed: no upsert repeats what the last one said,
        # though the pool ran a pass every second.
        written = await upserts(handle)
        assert written, "no search attribute upsert"
        last: dict[str, Any] = {}
        for upsert in written:
            assert any(last.get(k) != v for k, v in upsert.items()), (upsert, written)
            last.update(upsert)

        await handle.cancel()

        async def gone() -> bool:
            return placement(account, pool)["total"] == 0

        await eventually(gone, timeout=30, what="every profile deleted")
        stats = account.emulator.stats()
        assert stats["duplicates"] == {"byName": {}, "byRemark": {}}, stats["duplicates"]
        # No profile secret in the pool's history.
        history = (await handle.fetch_history()).to_json()
        for secret in account.emulator.secrets():
            assert secret not in history


@pytest.fixture
def cli(
    env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Any:
    """`devicepool ARGS` in a thread against this module's dev server: (code, stdout, stderr)."""
    return cli_in_thread(env, monkeypatch, capsys)


async def test_the_cli_addresses_browser_pools_as_kubectl_does(
    env: WorkflowEnvironment, cli: Any, tmp_path: Path
) -> None:
    pool = f"bp-cli-{uuid.uuid4().hex[:4]}"
    manifest = browser_manifest(tmp_path, pool, "{replicas: 2, nodeSelector: {node: node-2}}")
    async with node_stack(env.client) as (account, _):
        code, out, err = await cli("apply", "-f", str(manifest))
        assert code == 0, err
        assert out.strip() == f"browserpool/{pool} created (generation 1, replicas 2)"

        handle = env.client.get_workflow_handle(f"browserpool/{pool}")

        async def shown(ready: int) -> dict[str, Any]:
            """`get -o json` once the pool says `ready` (waited on by query: each CLI call
            is a client of its own)."""
            await eventually(
                lambda: _ready_on(handle, {"node-2": ready}), timeout=40, what=f"{ready} ready"
            )
            code, out, _ = await cli("get", f"browserpool/{pool}", "-o", "json")
            assert code == 0, out
            got: dict[str, Any] = json.loads(out)
            assert got["status"]["readyProfiles"] == ready, out
            return got

        got = await shown(2)
        assert got["status"]["byNode"] == {"node-2": 2}  # the selector picks node-2 only
        # One pool by name has its age, as in the list (metadata.creationTimestamp).
        assert got["metadata"]["creationTimestamp"].endswith("Z"), got
        code, out, _ = await cli("get", f"browserpool/{pool}", "-o", "table")
        [row] = [line for line in out.splitlines() if line.startswith(f"browserpool/{pool}")]
        assert row.split()[6] != "-", out  # AGE
        summary = await (await handle.describe()).static_summary()
        assert summary == (
            f"BrowserPool **{pool}**: BitBrowser profiles on nodes `node=node-2`, browsers open"
        )
        # Started with its search attributes (apply): in the UI's columns at once, and
        # the pool never writes again what has not changed.
        started = (await handle.fetch_history()).events[0]
        at_start = started.workflow_execution_started_event_attributes.search_attributes
        assert {p.key.name: p.value for p in decode_typed_search_attributes(at_start)} == {
            "DevicePoolPlatform": "browser",
            "DevicePoolPhase": "Pending",
            "DevicePoolDesired": 2,
            "DevicePoolReady": 0,
        }
        assert all("DevicePoolPlatform" not in u for u in await upserts(handle))
        code, out, _ = await cli("get", "browserpools", "-o", "table")
        rows = [line.split() for line in out.splitlines()]
        # the kind asked for names it once, as `kubectl get pods` does: bare names
        assert code == 0 and pool in [r[0] for r in rows if r] and "node-2=2" in out, out
        code, out, _ = await cli("get", "-o", "table")  # every pool, both kinds
        row = next((line for line in out.splitlines() if pool in line), "")
        # browserpool/NAME, or the bare name beside a KIND column when DevicePools are listed
        assert code == 0 and (f"browserpool/{pool}" in row or "BrowserPool" in row), out

        code, out, err = await cli("scale", f"browserpool/{pool}", "--replicas", "1")
        assert code == 0, err
        assert out.strip() == f"browserpool/{pool} scaled to 1 (generation 2)"
        await shown(1)
        code, out, _ = await cli("describe", f"browserpool/{pool}")
        assert code == 0 and "node=node-2" in out and "Profiles:" in out, out

        async def one_profile() -> bool:
            return len((await handle.query("devices"))["profiles"]) == 1

        await eventually(one_profile, timeout=20, what="one profile listed")
        code, out, _ = await cli("devices", f"browserpool/{pool}", "-o", "json")
        [profile] = json.loads(out)
        assert profile["node"] == "node-2" and profile["open"] is True, profile
        assert profile["state"] == "held", profile

        # A bare NAME that only a BrowserPool has is that BrowserPool.
        code, out, _ = await cli("get", pool, "-o", "json")
        assert code == 0 and json.loads(out)["kind"] == "BrowserPool", out
        code, out, _ = await cli("describe", pool)
        assert code == 0 and f"browserpool/{pool}" in out, out
        code, out, err = await cli("get", f"devicepool/{pool}")
        assert code != 0 and pool in err, err  # named as a DevicePool: not found

        code, out, err = await cli("get", f"nodepool/{pool}")
        assert code == 2 and "unknown kind 'nodepool'" in err, err

        code, out, err = await cli("delete", pool)  # bare: the BrowserPool of that name
        assert code == 0 and out.startswith(f"browserpool/{pool} deleting"), (out, err)

        async def gone() -> bool:
            return placement(account, pool)["total"] == 0

        await eventually(gone, timeout=30, what="every profile deleted")
        code, _, err = await cli("scale", f"browserpool/{pool}", "--replicas", "3")
        assert code != 0 and pool in err, err


async def test_scale_and_delete_wait_for_a_browser_pool_as_for_a_device_pool(
    env: WorkflowEnvironment, cli: Any, tmp_path: Path
) -> None:
    """`--wait` is kept, not ignored: `scale --wait` returns once the pool holds exactly the
    new count, ready (a scale-down's surplus deleted); `delete --wait` once it has ended."""
    pool = f"bp-wait-{uuid.uuid4().hex[:4]}"
    manifest = browser_manifest(tmp_path, pool, "{replicas: 2}")
    async with node_stack(env.client) as (account, _):
        code, out, err = await cli("apply", "-f", str(manifest), "--wait", "--timeout", "60")
        assert code == 0, err
        assert placement(account, pool)["total"] == 2
        code, out, err = await cli("scale", pool, "--replicas", "1", "--wait", "--timeout", "60")
        assert code == 0, err
        assert out.splitlines()[-1] == f"browserpool/{pool} ready", out
        assert placement(account, pool)["total"] == 1  # the surplus is gone when it returns

        # A DevicePool of the same name (a workflow no worker serves is enough): a bare
        # NAME that changes a pool is not guessed; named with its kind, it is fine.
        twin = await env.client.start_workflow(
            "DevicePool", {}, id=f"devicepool/{pool}", task_queue=f"nobody-{pool}"
        )
        try:
            for argv in (("delete", pool), ("scale", pool, "--replicas", "2")):
                code, out, err = await cli(*argv)
                assert code == 2 and out == "", (argv, out, err)
                assert err.strip() == (
                    f'error: both a DevicePool and a BrowserPool are named "{pool}": '
                    f"say devicepool/{pool} or browserpool/{pool}"
                ), err
            assert placement(account, pool)["total"] == 1  # nothing changed
        finally:
            await twin.terminate()
        code, out, err = await cli("delete", f"browserpool/{pool}", "--wait", "--timeout", "60")
        assert code == 0, err
        assert out.strip() == f"browserpool/{pool} deleted (every profile closed and deleted)"
        assert placement(account, pool)["total"] == 0
        handle = env.client.get_workflow_handle(browser_pool_workflow_id(pool))
        assert await _closed(handle)
        # Gone now, and said as the BrowserPool it was, not as a DevicePool's workflow.
        code, _, err = await cli("get", f"browserpool/{pool}")
        assert code != 0
        assert err.strip() == (
            f"error: browserpool/{pool} not found (no running workflow browserpool/{pool})"
        )


async def test_a_proxy_pool_no_node_has_is_said_and_held_not_retried_every_pass(
    env: WorkflowEnvironment, cli: Any, tmp_path: Path
) -> None:
    """A node refuses the create for its configuration (no such proxy pool): the pool says
    `Ready=False UnknownProxyPool`, `apply --wait` stops at once, and creates are held
    (one try a minute), not sent to fail again every pass."""
    pool = f"bp-proxy-{uuid.uuid4().hex[:4]}"
    manifest = browser_manifest(tmp_path, pool, "{replicas: 4, proxy: {poolRef: nosuchproxy}}")
    async with node_stack(env.client) as (account, _):
        code, out, err = await cli("apply", "-f", str(manifest), "--wait", "--timeout", "60")
        assert code == 1, (out, err)
        assert err.startswith(
            f'error: pool "browserpool/{pool}" cannot become ready: UnknownProxyPool: node '
        ), err
        assert "proxy pool 'nosuchproxy' is not configured" in err, err
        await asyncio.sleep(4 * SETTINGS.resync_seconds)  # passes go by: nothing is sent
        handle = env.client.get_workflow_handle(browser_pool_workflow_id(pool))
        events = (await handle.query("events"))["events"]
        failed = sum(e.get("count", 1) for e in events if e["reason"] == "CreateFailed")
        assert failed == 1, events
        assert placement(account, pool)["total"] == 0
        # Not cancelled: a teardown the stack's end cut short would leave it running with no
        # worker, and each later listing would wait out a query to it (QUERY_TIMEOUT).
        await handle.terminate()


async def test_a_proxy_pool_fixed_while_a_pass_lists_is_what_its_creates_use(
    env: WorkflowEnvironment,
) -> None:
    """Review of the port, finding 1: a pass created from the spec it observed. A pool
    held for `poolRef: nosuchproxy` got `poolRef: gw` while a pass listed its nodes; the
    apply cleared the hold, the pass sent every create with nosuchproxy, the first was
    refused and the hold was set again for a minute (Ready=False naming the old pool,
    `apply --wait` a minute longer). A change during the pass is the next pass's: no
    create of the old spec goes out, and the pool is ready well within the minute."""
    client = env.client
    pool = f"bp-fix-{uuid.uuid4().hex[:4]}"
    gw = ProxyPoolSettings(name="gw", host="gw.proxy.example", port=1080)
    async with node_stack(client, proxy_pools={"gw": gw}) as (account, nodes):
        sent: list[str | None] = []
        listing, release = asyncio.Event(), asyncio.Event()
        blocking = False
        for node in nodes.values():
            acts, provider = node.activities, node.provider
            real_proxy, real_list = acts._proxy, provider.list_pool

            def proxy(input: NodeCreateInput, _real: Any = real_proxy) -> Any:
                sent.append(input.proxy_pool)
                return _real(input)

            async def held_list(pool: str, _real: Any = real_list) -> Any:
                if blocking:
                    listing.set()
                    await asyncio.wait_for(release.wait(), timeout=30)
                return await _real(pool)

            acts._proxy = proxy  # type: ignore[method-assign]
            provider.list_pool = held_list  # type: ignore[method-assign]
        spec = BrowserPoolSpec.model_validate(
            {"replicas": 2, "open": False, "proxy": {"poolRef": "nosuchproxy"}}
        )
        handle = await client.start_workflow(
            BrowserPoolWorkflow.run,
            BrowserPoolInput(metadata=ObjectMeta(name=pool), spec=spec, settings=SETTINGS),
            id=browser_pool_workflow_id(pool),
            task_queue=TASK_QUEUE,
        )
        try:

            async def ready(reason: str) -> bool:
                conds = {c["type"]: c for c in (await status(handle)).get("conditions", [])}
                return conds.get("Ready", {}).get("reason") == reason

            await eventually(lambda: ready("UnknownProxyPool"), timeout=30, what="the hold")
            blocking = True
            await asyncio.wait_for(listing.wait(), timeout=30)  # a pass lists: held there
            fixed = BrowserPoolSpec.model_validate(
                {"replicas": 2, "open": False, "proxy": {"poolRef": "gw"}}
            )
            before = len(sent)
            await handle.execute_update(
                UPDATE_APPLY, BrowserApplyRequest(metadata=ObjectMeta(name=pool), spec=fixed)
            )
            blocking = False
            release.set()
            # Well within the minute a create of the old pool would hold the pool for.
            await eventually(lambda: ready("Converged"), timeout=20, what="Ready=True")
            assert sent[before:] and set(sent[before:]) == {"gw"}, sent
            assert placement(account, pool)["total"] == 2
        finally:
            release.set()
            await handle.terminate()


async def test_a_delete_with_every_node_down_waits_and_finishes_when_one_is_back(
    env: WorkflowEnvironment,
) -> None:
    client = env.client
    pool = f"bp-down-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as (account, nodes):
        handle = await start_browser_pool(client, pool, 2)

        async def ready() -> bool:
            return (await status(handle)).get("readyProfiles") == 2

        await eventually(ready, timeout=30, what="2 ready")
        for node in nodes.values():
            await node.stop()
        # Both silent past nodeLostAfterSeconds.
        await eventually(lambda: alive_only(client), timeout=LOST_AFTER + 5, what="both lost")
        await handle.cancel()

        async def blocked() -> dict[str, Any] | None:
            s = await status(handle)
            found = next((c for c in s["conditions"] if c["type"] == "TeardownBlocked"), None)
            return s if found and found["status"] == "True" and s["phase"] == "Deleting" else None

        held = await eventually(blocked, timeout=30, what="TeardownBlocked while no node lives")
        reason = next(c for c in held["conditions"] if c["type"] == "TeardownBlocked")["reason"]
        assert reason == "NoLiveNode", held
        _, details = await eventually(
            lambda: web_ui(handle, DevicePoolPhase="Deleting"), timeout=10, what="phase Deleting"
        )
        assert "- **TeardownBlocked** True · NoLiveNode" in details, details
        assert placement(account, pool)["total"] == 2  # nothing was claimed deleted

        await nodes["node-2"].start()  # node-2 back: its profile goes; node-1's waits for node-1

        async def down_node_named() -> bool:
            s = await status(handle)
            found: dict[str, Any] = next(
                (c for c in s["conditions"] if c["type"] == "TeardownBlocked"), {}
            )
            return found.get("reason") == "NodeDown" and "node-1" in found.get("message", "")

        await eventually(down_node_named, timeout=30, what="TeardownBlocked naming node-1")
        assert placement(account, pool)["by_node"] == {"node-1": 1}
        await nodes["node-1"].start()

        async def gone() -> bool:
            return placement(account, pool)["total"] == 0

        await eventually(gone, timeout=40, what="every profile deleted")
        described = await handle.describe()
        await eventually(lambda: _closed(handle), timeout=20, what="the pool's workflow to end")
        assert described is not None


async def _closed(handle: WorkflowHandle[Any, Any]) -> bool:
    from temporalio.client import WorkflowExecutionStatus

    return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING


async def test_a_pool_no_worker_answers_is_listed_from_its_search_attributes(
    env: WorkflowEnvironment,
) -> None:
    """No worker runs here (outside `node_stack`): `get` still lists the pool, from the
    search attributes `apply` started it with, marked stale, as a DevicePool's."""
    pool = f"bp-stale-{uuid.uuid4().hex[:4]}"
    pools = BrowserPoolClient(env.client)
    await pools.apply(BrowserPool(metadata=ObjectMeta(name=pool), spec=BrowserPoolSpec(replicas=3)))
    handle = env.client.get_workflow_handle(browser_pool_workflow_id(pool))
    try:

        async def listed() -> Any:
            return next((p for p in await pools.list_pools() if p.name == pool), None)

        got = await eventually(listed, timeout=30, what="the pool listed")
        assert got.stale, got
        assert got.status == {"phase": "Pending", "desiredReplicas": 3, "readyProfiles": 0}
        assert got.spec == {"replicas": 3} and got.created is not None
    finally:
        await handle.terminate()


async def test_nodes_of_two_accounts_hold_the_pool_until_the_selector_picks_one(
    env: WorkflowEnvironment,
) -> None:
    """Profiles belong to the account: a node of another account lists none of the pool's,
    so the pool would make them again there. Nothing is made while the live selected
    nodes name two accounts; once only one account's nodes are live, the pool converges."""
    client = env.client
    pool = f"bp-{uuid.uuid4().hex[:6]}"
    async with node_stack(client, says={"node-1": "shop", "node-2": "ads"}) as (account, nodes):
        handle = await start_browser_pool(client, pool, 2)

        async def held() -> dict[str, Any] | None:
            s = await status(handle)
            conds = {c["type"]: c for c in s.get("conditions", [])}
            nodes_ok = conds.get("NodesAvailable", {})
            return s if nodes_ok.get("reason") == "MixedAccounts" else None

        s = await eventually(held, timeout=20, what="NodesAvailable=False MixedAccounts")
        cond = next(c for c in s["conditions"] if c["type"] == "NodesAvailable")
        assert cond["status"] == "False", cond
        assert "node-1 (shop)" in cond["message"] and "node-2 (ads)" in cond["message"], cond

        async def held_passes(at_least: int) -> int:
            """The passes held so far (each says MixedAccounts again: a count on the event)."""
            events = (await handle.query("events"))["events"]
            said = sum(e.get("count", 1) for e in events if e["reason"] == "MixedAccounts")
            return said if said >= at_least else 0

        # Two passes more held: a pool that placed on mixed accounts would have made a profile.
        first = await eventually(lambda: held_passes(1), timeout=5, what="MixedAccounts said")
        await eventually(lambda: held_passes(first + 2), timeout=10, what="two passes more")
        assert placement(account, pool)["total"] == 0  # nothing made meanwhile

        await nodes["node-2"].stop()  # only shop's node is live now
        await eventually(
            lambda: _ready_on(handle, {"node-1": 2}), timeout=LOST_AFTER + 25, what="2 on node-1"
        )
        assert placement(account, pool)["by_node"] == {"node-1": 2}
        await handle.terminate()  # not cancelled: see the proxy pool's test


async def _ready_on(handle: WorkflowHandle[Any, Any], by_node: dict[str, int]) -> bool:
    s = await status(handle)
    return s.get("readyProfiles") == sum(by_node.values()) and s.get("byNode") == by_node


async def test_a_browser_pool_takes_the_scale_signal_every_kind_takes(
    env: WorkflowEnvironment,
) -> None:
    """Issue 38: BrowserPool stands on the reconciler shell, so the messages every kind has
    are its too: signal `scale` (plain JSON, checked, a refusal said as an event and as
    `SpecRejected`) and the `spec` query with the pool's metadata and age. Before, a
    BrowserPool had no `scale` signal: the SDK kept it unhandled and the pool stayed at 1."""
    client = env.client
    pool = f"bp-sig-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as _:
        handle = await start_browser_pool(client, pool, 1)

        async def ready(n: int) -> bool:
            return (await status(handle)).get("readyProfiles") == n

        await eventually(lambda: ready(1), timeout=40, what="1 profile")
        await handle.signal("scale", {"replicas": 2})
        await eventually(lambda: ready(2), timeout=40, what="2 profiles, by signal")
        await handle.signal("scale", {"replicas": -1})

        async def refused() -> bool:
            events = (await handle.query("events")).get("events", [])
            return any(e.get("reason") == "SpecRejected" for e in events)

        await eventually(refused, timeout=20, what="the refused signal said")
        # Review of the port, finding 6: said only as an event before; recorded as a
        # DevicePool's is, `SpecRejected=True` with the message, until a change is accepted.
        rejected = {c["type"]: c for c in (await status(handle))["conditions"]}["SpecRejected"]
        assert (rejected["status"], rejected["reason"]) == ("True", "InvalidScaleSignal")
        assert rejected["message"].startswith('signal scale {"replicas": -1} refused: '), rejected
        spec = await handle.query("spec")
        assert spec["spec"]["replicas"] == 2 and spec["generation"] == 2, spec
        assert spec["metadata"]["name"] == pool and spec["createdAt"], spec
        await handle.signal("scale", {"replicas": 1})

        async def superseded() -> bool:
            conds = {c["type"] for c in (await status(handle))["conditions"]}
            return "SpecRejected" not in conds

        await eventually(superseded, timeout=20, what="SpecRejected gone with the next scale")
        await handle.terminate()
