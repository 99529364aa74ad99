"""Issue 37, BrowserPool: a node that beats but cannot serve, a delete among two accounts, age.

The stack of test_bp_nodes.py (a pool worker, node workers in process over emulated
BitBrowser nodes), on a dev server of its own that suggests continue-as-new early, so
every scenario here also crosses runs (what the pool carries is what it keeps).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.node_models import NodeOpenResult
from devicepool.activities.node_registry import query_nodes
from devicepool.activities.providers.bitbrowser.profile_provider import parse_mark
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.api.names import (
    TASK_QUEUE,
    UPDATE_APPLY,
    browser_pool_workflow_id,
)
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.client.browser_pools import BrowserPoolClient
from devicepool.emulator.bitbrowser import BitBrowserConfig
from devicepool.workflows.browserpool.messages import BrowserApplyRequest, BrowserPoolInput
from devicepool.workflows.browserpool.workflow import BrowserPoolWorkflow
from tests.browserpool.test_bp_nodes import (
    LOST_AFTER,
    SETTINGS,
    Node,
    alive_only,
    browser_manifest,
    deleted,
    eventually,
    node_stack,
    placement,
    spread_open,
    start_browser_pool,
    status,
    web_ui,
)
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.cli import cli_in_thread
from tests.helpers.servers import dev_server

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(150)]

WRONG_KEY = "wrong-bitbrowser-key-51d0"


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await dev_server(continue_as_new_after=120) as server:
        yield server


@pytest.fixture
def cli(
    env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Any:
    """`devicepool ARGS` in a thread against this module's dev server: (code, stdout, stderr)."""
    return cli_in_thread(env, monkeypatch, capsys)


def conditions(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in s.get("conditions", [])}


# Its waits add up to 173 s: bounded below them, a slow run under load ended the xdist
# worker (pytest-timeout's thread method) instead of failing at the wait that was slow.
@pytest.mark.timeout(240)
async def test_a_closed_desktop_client_is_said_and_the_other_node_keeps_the_pool(
    env: WorkflowEnvironment,
) -> None:
    """Item 10: node-1's desktop client closes while its node worker beats on. Every pass
    aborted on the failed listing, and the pool said Ready 4/4 for ever (2 show it here). Now node-2's
    profiles are kept, the pool says NodesAvailable=False naming node-1 with the cause, and
    once node-1 has not answered for nodeLostAfterSeconds its slots are held on node-2."""
    client = env.client
    pool = f"bp-closed-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as (account, _):
        handle = await start_browser_pool(client, pool, 2)
        await spread_open(handle, account, pool)
        originals = set(_nodes_of(account, pool))
        on_node_2 = {pid for pid, n in _nodes_of(account, pool).items() if n == "node-2"}

        await account.control("node", {"up": False}, node="node-1")

        async def said() -> dict[str, Any] | None:
            s = await status(handle)
            nodes = conditions(s).get("NodesAvailable", {})
            return s if nodes.get("reason") == "NodeUnreachable" else None

        s = await eventually(said, timeout=10, what="NodesAvailable=False NodeUnreachable")
        cond = conditions(s)
        assert cond["NodesAvailable"]["status"] == "False", cond
        message = cond["NodesAvailable"]["message"]
        assert "node node-1's Local API does not answer" in message, message
        assert "server_error (HTTP 503)" in message, message
        assert cond["Ready"]["status"] == "False" or s["readyProfiles"] == 2, cond

        # node-1's profiles are not shown held (counted): they wait, or are lost by now. (A run
        # that just handed over answers no rows until its first pass publishes them: a
        # BrowserPool does not carry its rows across continue-as-new.)
        async def node_1_rows() -> list[dict[str, Any]] | None:
            rows = (await handle.query("devices"))["profiles"]
            return [r for r in rows if r["node"] == "node-1"] or None

        rows = await eventually(node_1_rows, timeout=10, what="node-1's rows in `devices`")
        states = {r["state"] for r in rows}
        assert states <= {"waiting", "lost"}, rows
        # The search attributes (the Web UI, the gauges) say it too, not "Ready".
        await eventually(
            lambda: web_ui(handle, DevicePoolPhase="Degraded"), timeout=10, what="Degraded"
        )

        async def held_on_node_2() -> dict[str, Any] | None:
            s = await status(handle)
            ok = s.get("readyProfiles") == 2 and s.get("byNode") == {"node-2": 2}
            return s if ok else None

        s = await eventually(
            held_on_node_2, timeout=LOST_AFTER + 20, what="node-1's slots held on node-2"
        )
        assert s["lostProfiles"] == 1, s
        cond = conditions(s)
        assert cond["Ready"]["status"] == "True", cond
        assert cond["NodesAvailable"]["status"] == "False", cond  # still said: fix node-1
        assert "counted lost" in cond["NodesAvailable"]["message"], cond
        # node-2's own one was kept throughout.
        assert on_node_2 <= set(_nodes_of(account, pool)), on_node_2
        events = (await handle.query("events"))["events"]
        assert any(e["reason"] == "NodeUnreachable" and "node-1" in e["message"] for e in events), (
            events
        )

        await account.control("node", {"up": True}, node="node-1")

        async def back() -> bool:
            s = await status(handle)
            return conditions(s).get("NodesAvailable", {}).get("status") == "True"

        await eventually(back, timeout=20, what="NodesAvailable=True again")

        # Review of issue 37, defect 2: node-1's originals (their cookies) were deleted as
        # "a second profile" and the replacements kept. The originals win; the
        # replacements go once the originals serve.
        async def originals_back() -> dict[str, Any] | None:
            s = await status(handle)
            ok = set(s.get("profileIds") or []) == originals and s.get("readyProfiles") == 2
            return s if ok and set(_nodes_of(account, pool)) == originals else None

        await eventually(originals_back, timeout=30, what="the originals kept, replacements gone")
        assert set(_nodes_of(account, pool)) == originals
        await handle.cancel()
        await eventually(
            lambda: _gone(account, pool), timeout=40, what="every profile deleted at the end"
        )


async def test_a_wrong_key_is_said_by_the_pool_and_scale_wait_stops(
    env: WorkflowEnvironment, cli: Any, tmp_path: Path
) -> None:
    """Item 14: node-2 restarts with a wrong key (HTTP 403). The pool said Ready 2/2 after a
    scale to 3 and `scale --wait` timed out saying "2/2 ready". Now the pool says
    LocalApiRefused naming node-2, `scale --wait` stops at once with it, and the node's
    beat carries its API health. The key is in no status, event or history."""
    pool = f"bp-key-{uuid.uuid4().hex[:4]}"
    manifest = browser_manifest(tmp_path, pool, "{replicas: 2, nodeSelector: {node: node-2}}")
    async with node_stack(env.client) as (account, nodes):
        code, out, err = await cli("apply", "-f", str(manifest), "--wait", "--timeout", "60")
        assert code == 0, (out, err)
        # node-2's worker restarts holding a wrong key.
        await nodes["node-2"].stop()
        await nodes["node-2"].activities.aclose()
        nodes["node-2"] = Node(env.client, account, "node-2", key=WRONG_KEY)
        await nodes["node-2"].start()

        code, out, err = await cli("scale", pool, "--replicas", "3", "--wait", "--timeout", "40")
        assert code == 1, (out, err)
        assert f'error: pool "browserpool/{pool}" cannot become ready: LocalApiRefused' in err, err
        assert "node node-2's Local API refuses its key" in err, err
        assert "unauthenticated (HTTP 403)" in err, err

        handle = env.client.get_workflow_handle(browser_pool_workflow_id(pool))
        s = await status(handle)
        assert s["desiredReplicas"] == 3, s
        cond = conditions(s)
        assert cond["NodesAvailable"]["reason"] == "LocalApiRefused", cond
        assert cond["Ready"]["status"] == "False", cond
        events = (await handle.query("events"))["events"]
        assert any(
            e["reason"] == "LocalApiRefused" and "node node-2" in e["message"] for e in events
        ), events
        code, out, _ = await cli("describe", f"browserpool/{pool}")
        assert "LocalApiRefused" in out and "node-2" in out, out

        view = await query_nodes(env.client)
        info = next(n for n in view.nodes if n.node == "node-2")
        assert info.api_healthy is False and info.api_error.startswith("unauthenticated"), info

        history = (await handle.fetch_history()).to_json()
        assert WRONG_KEY not in history and WRONG_KEY not in json.dumps(s)

        # Deleted meanwhile: teardown waits for node-2, and says why it cannot use it.
        await handle.cancel()

        async def blocked() -> dict[str, Any] | None:
            found = conditions(await status(handle)).get("TeardownBlocked", {})
            return found if found.get("status") == "True" else None

        found = await eventually(blocked, timeout=20, what="TeardownBlocked")
        assert found["reason"] == "NodeDown" and "node-2" in found["message"], found
        assert "unauthenticated (HTTP 403)" in found["message"], found
        await handle.terminate()


@pytest.mark.parametrize(
    ("pool_says", "stranger_says", "named"),
    [
        # Item 11: the pool's nodes (account shop) are down; a node of account ads is the
        # only live one. Teardown listed through it, saw none of shop's profiles and ended
        # Deleted with both left.
        ({"node-1": "shop", "node-2": "shop"}, "ads", ("account shop", "node-3")),
        # Defect 5 (item 11 without --node-account, the default): the pool's nodes are down
        # and another account's node (naming none either) is the only live one. The same.
        (None, "", ("node-1",)),
    ],
    ids=["nodes-name-accounts", "no-node-names-an-account"],
)
async def test_a_delete_waits_for_the_pools_nodes_not_another_accounts(
    env: WorkflowEnvironment,
    pool_says: dict[str, str] | None,
    stranger_says: str,
    named: tuple[str, ...],
) -> None:
    """Now a delete waits (TeardownBlocked NoLiveNode, its message naming what it waits
    for), and ends once node-1 is back: the profiles deleted, the final status Deleted
    with Ready=False, nothing desired, nothing held."""
    client = env.client
    pool = f"bp-acct-{uuid.uuid4().hex[:4]}"
    other = Account(BitBrowserConfig(nodes=["node-3"], api_key=KEY, account="ads", seed=9))
    stranger = Node(client, other, "node-3", says=stranger_says)
    async with node_stack(client, says=pool_says) as (account, nodes):
        await stranger.start()
        try:
            handle = await start_browser_pool(
                client, pool, replicas=2, node_selector={"node": "node-1"}
            )

            async def ready() -> bool:
                return (await status(handle)).get("readyProfiles") == 2

            await eventually(ready, timeout=40, what="2 ready on node-1")
            for node in nodes.values():
                await node.stop()
            # Both nodes silent past nodeLostAfterSeconds: lost, as the delete will find them.
            await eventually(
                lambda: alive_only(client, "node-3"), timeout=LOST_AFTER + 5, what="both lost"
            )
            await handle.cancel()

            async def blocked() -> dict[str, Any] | None:
                s = await status(handle)
                found = conditions(s).get("TeardownBlocked", {})
                return s if found.get("status") == "True" else None

            s = await eventually(blocked, timeout=30, what="TeardownBlocked")
            found = conditions(s)["TeardownBlocked"]
            assert found["reason"] == "NoLiveNode", found
            assert all(part in found["message"] for part in named), found
            assert placement(account, pool)["total"] == 2
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING

            await nodes["node-1"].start()
            await eventually(lambda: _gone(account, pool), timeout=40, what="profiles deleted")
            # Held long (NoLiveNode): the teardown may have continued as new.
            final = await deleted(handle, timeout=40, handed_over=True)
            cond = conditions(final)
            assert final["phase"] == "Deleted", final
            assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("False", "Deleted")
            assert final["desiredReplicas"] == 0 and final["readyProfiles"] == 0, final
            assert final["profileIds"] == [] and final["byNode"] == {}, final
            assert cond["TeardownBlocked"]["status"] == "False", cond
            assert placement(account, pool)["total"] == 0
        finally:
            await _stop_stranger(stranger, other)


async def test_the_pools_age_is_kept_across_continue_as_new(env: WorkflowEnvironment) -> None:
    """Item 15: `creationTimestamp` (get, describe, AGE) was the current run's start, so it
    restarted at each continue-as-new. It is the first run's, in every run."""
    client = env.client
    pool = f"bp-age-{uuid.uuid4().hex[:4]}"
    pools = BrowserPoolClient(client)
    async with node_stack(client):
        # Passes three times a second: the server's suggestion (a history length) comes
        # three times as soon.
        handle = await client.start_workflow(
            BrowserPoolWorkflow.run,
            BrowserPoolInput(
                metadata=ObjectMeta(name=pool),
                spec=BrowserPoolSpec(replicas=1),
                settings=SETTINGS.model_copy(update={"resync_seconds": 0.3}),
            ),
            id=browser_pool_workflow_id(pool),
            task_queue=TASK_QUEUE,
        )
        first = (await handle.describe()).start_time
        runs = {(await handle.describe()).run_id}

        async def new_runs() -> bool:
            runs.add((await client.get_workflow_handle(handle.id).describe()).run_id)
            return len(runs) >= 3

        await eventually(new_runs, timeout=60, what="two continue-as-new")
        got = await pools.summary(pool)
        assert got.created == first, (got.created, first)
        [listed] = [p for p in await pools.list_pools() if p.name == pool]
        assert listed.created == first
        described = await pools.describe(pool)
        assert described["metadata"]["creationTimestamp"].startswith(
            first.strftime("%Y-%m-%dT%H:%M:%S")
        ), described["metadata"]
        await handle.terminate()


async def _stop_stranger(stranger: Node, other: Account) -> None:
    """`stranger` stopped, and counted lost before the next test: its pools (no
    nodeSelector) would list it, a call nobody takes for NODE_PICKUP (15 s)."""
    await stranger.stop()
    await stranger.activities.aclose()
    await other.aclose()
    await eventually(
        lambda: alive_only(stranger.client, "node-1", "node-2"),
        timeout=LOST_AFTER + 5,
        what=f"{stranger.name} lost",
    )


def _nodes_of(account: Account, pool: str) -> dict[str, str]:
    return {
        p.id: m.node
        for p in account.emulator.profiles.profiles.values()
        if (m := parse_mark(p.fields.get("remark") or "")) is not None and m.pool == pool
    }


async def _gone(account: Account, pool: str) -> bool:
    return placement(account, pool)["total"] == 0


# Review of issue 37, defects 3, 4 and 5: which nodes teardown may trust with "none left".
# The nodes that placed or listed the pool's profiles are its account's; each account the
# pool ever used needs one of them live and answering before the pool ends Deleted, and
# any of them serves (named with --node-account or not).


async def test_a_delete_ends_when_only_one_of_the_pools_nodes_names_its_account(
    env: WorkflowEnvironment,
) -> None:
    """Defect 3: node-1 beats `--node-account shop`, node-2 names none (the same real
    account). Teardown kept only node-1 as "the account's", found node-2's profiles on a
    node it did not count alive and stayed TeardownBlocked NodeDown for ever."""
    client = env.client
    pool = f"bp-half-{uuid.uuid4().hex[:4]}"
    async with node_stack(client, says={"node-1": "shop"}) as (account, _):
        handle = await start_browser_pool(client, pool, 2)

        async def spread() -> bool:
            return (await status(handle)).get("byNode") == {"node-1": 1, "node-2": 1}

        await eventually(spread, timeout=40, what="1/1 on node-1 and node-2")
        await handle.cancel()
        final = await deleted(handle, timeout=30)
        assert final["phase"] == "Deleted", final
        assert placement(account, pool)["total"] == 0


async def test_a_selector_moved_to_another_accounts_nodes_leaves_nothing_behind(
    env: WorkflowEnvironment,
) -> None:
    """Defect 4: nodeSelector moved from account shop's node-1 to account ads's node-3.
    shop's nodes were no longer listed (they name another account than the pool's new
    one), so shop's profiles stayed for ever, browsers open, and delete ended Deleted."""
    client = env.client
    pool = f"bp-move-{uuid.uuid4().hex[:4]}"
    other = Account(BitBrowserConfig(nodes=["node-3"], api_key=KEY, account="ads", seed=9))
    stranger = Node(client, other, "node-3", says="ads")
    async with node_stack(client, says={"node-1": "shop", "node-2": "shop"}) as (account, _):
        await stranger.start()
        try:
            spec = BrowserPoolSpec(replicas=2, node_selector={"node": "node-1"})
            handle = await client.start_workflow(
                BrowserPoolWorkflow.run,
                BrowserPoolInput(metadata=ObjectMeta(name=pool), spec=spec, settings=SETTINGS),
                id=browser_pool_workflow_id(pool),
                task_queue=TASK_QUEUE,
            )

            async def ready() -> bool:
                return (await status(handle)).get("readyProfiles") == 2

            await eventually(ready, timeout=40, what="2 ready on node-1")
            moved = spec.model_copy(update={"node_selector": {"node": "node-3"}})
            await handle.execute_update(
                UPDATE_APPLY, BrowserApplyRequest(metadata=ObjectMeta(name=pool), spec=moved)
            )

            async def shop_empty() -> bool:
                return (
                    placement(account, pool)["total"] == 0 and placement(other, pool)["total"] == 2
                )

            await eventually(shop_empty, timeout=40, what="shop's profiles deleted, 2 on ads")
            await handle.cancel()
            final = await deleted(handle, timeout=30)
            assert final["phase"] == "Deleted", final
            assert placement(account, pool)["total"] == 0
            assert placement(other, pool)["total"] == 0
        finally:
            await _stop_stranger(stranger, other)


async def test_a_slow_open_on_one_node_does_not_hide_another_nodes_trouble(
    env: WorkflowEnvironment,
) -> None:
    """Review of issue 37, defect 7: a pass awaited every open (up to NODE_OPEN, 490 s)
    before it published, so node-1's closed desktop client, found by the pass that started
    a slow open on node-2, went unsaid (no NodesAvailable=False) for minutes. A pass now
    publishes before it acts as well: said within a resync while node-2's open is held.
    (Opens stay inside the pass: run beside it, a failing open looped without pause.)"""
    client = env.client
    pool = f"bp-slow-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as (account, nodes):
        slow = nodes["node-2"].provider
        opening, release = asyncio.Event(), asyncio.Event()
        real_open = slow._open

        async def held_open(profile_id: str) -> Any:
            opening.set()
            await asyncio.wait_for(release.wait(), timeout=60)
            return await real_open(profile_id)

        real_keep = slow._one_per_mark

        async def then_node_1_closes(mark: str, made: str) -> str:
            kept = await real_keep(mark, made)
            await account.control("node", {"up": False}, node="node-1")
            return kept

        slow._open = held_open  # type: ignore[method-assign]
        slow._one_per_mark = then_node_1_closes  # type: ignore[method-assign]
        handle = await start_browser_pool(client, pool, 2)
        try:
            # The first pass creates (node-1's desktop client closes as node-2's create
            # ends); the next finds node-1 down and opens node-2's profile: held.
            await asyncio.wait_for(opening.wait(), timeout=30)

            async def said() -> bool:
                nodes_cond = conditions(await status(handle)).get("NodesAvailable", {})
                return nodes_cond.get("reason") == "NodeUnreachable"

            await eventually(said, timeout=10, what="node-1 said while node-2 opens")
            assert not release.is_set()
        finally:
            release.set()
            await handle.terminate()


# The three held states, each with what its pool's spec asks and what an open answers
# (None: the node's own open).
HELD: dict[str, tuple[dict[str, Any], NodeOpenResult | None]] = {
    "proxy-pool-missing": ({"replicas": 2, "proxy": {"poolRef": "nosuchproxy"}}, None),
    "open-busy": (
        {"replicas": 2, "open": True},
        NodeOpenResult(open=False, reason="server_error: 系统繁忙，请稍后再试", node_trouble=True),
    ),
    # The open answers success; no browser stays up.
    "browser-dies": ({"replicas": 2, "open": True}, NodeOpenResult(open=True)),
}


async def test_a_held_pool_waits_for_its_resync_not_two_seconds(env: WorkflowEnvironment) -> None:
    """Second review, defects 1 and 4: a pass that wanted work woke the next in 2 s
    whatever came of it. A create held for the nodes' configuration (no such proxy pool)
    or an open every node answers busy cost a full pass (a registry query, a listing on
    every node) every 2 s, for hours; so did an open that "works" whose browser dies at
    once. A pass that did nothing (or opened again what it had just opened) waits for
    the resync. (The three held pools side by side: each pass is one pool's own.)"""
    client = env.client
    tag = uuid.uuid4().hex[:4]
    pools = {f"bp-held-{n}-{tag}": held for n, held in enumerate(HELD)}
    resync = 5.0
    async with node_stack(client) as (account, nodes):
        listings: Counter[str] = Counter()  # by pool: each pass lists on every node
        for node in nodes.values():
            provider = node.provider
            real_list, real_open = provider.list_pool, provider._open

            async def counted(pool: str, _real: Any = real_list) -> Any:
                listings[pool] += 1
                return await _real(pool)

            async def answered(profile_id: str, _real: Any = real_open) -> Any:
                profile = account.emulator.profiles.profiles[profile_id]
                mark = parse_mark(profile.fields.get("remark") or "")
                held = pools.get(mark.pool) if mark is not None else None
                answer = HELD[held][1] if held is not None else None
                return answer if answer is not None else await _real(profile_id)

            provider.list_pool = counted  # type: ignore[method-assign]
            provider._open = answered  # type: ignore[method-assign]

        async def passes(pool: str) -> float:
            """The pool's passes in a window of three resyncs, once its first are over."""
            # The first passes (creates, then the held state) are over once the pool was
            # quiet for most of a resync; a pass every 2 s (the defect) never is. Not a
            # fixed 3 s: on a loaded CI machine they ran into the window below.
            loop = asyncio.get_running_loop()
            seen, since, deadline = listings[pool], loop.time(), loop.time() + 30
            while loop.time() - since < 0.6 * resync:
                assert loop.time() < deadline, (pools[pool], "a pass at least every 3 s for 30 s")
                await asyncio.sleep(0.1)
                if listings[pool] != seen:
                    seen, since = listings[pool], loop.time()
            before = listings[pool]
            await asyncio.sleep(3 * resync)
            return (listings[pool] - before) / len(nodes)

        settings = SETTINGS.model_copy(update={"resync_seconds": resync})
        handles = [
            await client.start_workflow(
                BrowserPoolWorkflow.run,
                BrowserPoolInput(
                    metadata=ObjectMeta(name=pool),
                    spec=BrowserPoolSpec.model_validate(HELD[held][0]),
                    settings=settings,
                ),
                id=browser_pool_workflow_id(pool),
                task_queue=TASK_QUEUE,
            )
            for pool, held in pools.items()
        ]
        try:
            counts = await asyncio.gather(*(passes(pool) for pool in pools))
            # Three resyncs: three passes, four if the window starts just before one, and
            # one to spare for work the pool does in it (CI once saw four passes in two
            # resyncs on a loaded machine); a pass every 2 s (the defect) makes seven or
            # eight.
            for held, count in zip(pools.values(), counts, strict=True):
                assert count <= 3 + 2, (held, count)
        finally:
            for handle in handles:
                await handle.terminate()


async def one_closed_profile(client: Client, pool: str) -> WorkflowHandle[Any, Any]:
    """BrowserPool `pool` of one profile, kept closed (`open: false`), once it is ready."""
    handle = await start_browser_pool(client, pool, replicas=1, open=False)

    async def one() -> bool:
        return (await status(handle)).get("readyProfiles") == 1

    await eventually(one, timeout=40, what="1 profile, closed")
    return handle


async def test_a_delete_during_a_pass_starts_no_open(env: WorkflowEnvironment) -> None:
    """Second review, defect 7: a delete that arrived while a pass awaited a create was
    absorbed (`except ActivityError`), and the pass went on to start its opens: up to
    minutes of `/browser/open` on a profile teardown was about to delete. The pass stops
    at the delete; no open is started."""
    client = env.client
    pool = f"bp-cut-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as (account, nodes):
        handle = await one_closed_profile(client, pool)
        creating, release = asyncio.Event(), asyncio.Event()
        opens: list[str] = []
        for node in nodes.values():
            acts = node.provider
            real_keep, real_open = acts._one_per_mark, acts._open

            async def held_keep(mark: str, made: str, _real: Any = real_keep) -> str:
                creating.set()
                await asyncio.wait_for(release.wait(), timeout=60)
                return str(await _real(mark, made))

            async def counted_open(profile_id: str, _real: Any = real_open) -> Any:
                opens.append(profile_id)
                return await _real(profile_id)

            acts._one_per_mark = held_keep  # type: ignore[method-assign]
            acts._open = counted_open  # type: ignore[method-assign]
        try:
            spec = BrowserPoolSpec(replicas=2, open=True)
            request = BrowserApplyRequest(metadata=ObjectMeta(name=pool), spec=spec)
            await handle.execute_update(UPDATE_APPLY, request)
            await asyncio.wait_for(creating.wait(), timeout=30)  # slot 1's create, held
            await handle.cancel()
            # The delete reaches the pass awaiting the held create: an open it started would be seen by now.
            await asyncio.sleep(2)
        finally:
            release.set()
        # Review of the port, finding 5: the run ends cancelled (`deleted` is strict: a
        # run that completed would fail here), as every kind's deletion on the shell.
        final = await deleted(handle, timeout=60)
        assert final["phase"] == "Deleted", final
        assert opens == [], opens
        assert placement(account, pool)["total"] == 0


async def test_a_change_during_an_open_is_not_observed_by_that_pass(
    env: WorkflowEnvironment,
) -> None:
    """Review of issue 37, defect 2: a pass published after its act with the generation
    of the spec at that moment, so a change that landed while its open ran was reported
    observed (`apply --wait` said ready) though the pass had planned from the spec read
    at its start. The post-act status keeps the pass's start generation; the change is
    observed by the pass that plans from it."""
    client = env.client
    pool = f"bp-gen-{uuid.uuid4().hex[:4]}"
    async with node_stack(client) as (_account, nodes):
        handle = await one_closed_profile(client, pool)
        opening, creating = asyncio.Event(), asyncio.Event()
        release_open, release = asyncio.Event(), asyncio.Event()
        for node in nodes.values():
            acts = node.provider
            real_keep, real_open = acts._one_per_mark, acts._open

            async def held_open(profile_id: str, _real: Any = real_open) -> Any:
                opening.set()
                await asyncio.wait_for(release_open.wait(), timeout=60)
                return await _real(profile_id)

            async def held_keep(mark: str, made: str, _real: Any = real_keep) -> str:
                creating.set()
                await asyncio.wait_for(release.wait(), timeout=60)
                return str(await _real(mark, made))

            acts._open = held_open  # type: ignore[method-assign]
            acts._one_per_mark = held_keep  # type: ignore[method-assign]
        opened = BrowserApplyRequest(
            metadata=ObjectMeta(name=pool), spec=BrowserPoolSpec(replicas=1, open=True)
        )
        first = await handle.execute_update(UPDATE_APPLY, opened)
        try:
            await asyncio.wait_for(opening.wait(), timeout=30)  # the open, held
            more = BrowserApplyRequest(
                metadata=ObjectMeta(name=pool), spec=BrowserPoolSpec(replicas=2, open=True)
            )
            second = await handle.execute_update(UPDATE_APPLY, more)
            assert second["generation"] == first["generation"] + 1
            # The open ends while the create it leads to stays held: the next pass (the
            # one planned from the change) has not published after its act.
            release_open.set()
            await asyncio.wait_for(creating.wait(), timeout=30)
            # The next pass runs on while its create is held: a publish after its act would show by now.
            await asyncio.sleep(1)
            s = await status(handle)
            assert s.get("observedGeneration") == first["generation"], s
        finally:
            release_open.set()
            release.set()
            await handle.terminate()
