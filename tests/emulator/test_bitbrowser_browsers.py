"""Browser processes in the BitBrowser emulator: open, close racing the process's exit, stuck
states and their reset, one open in flight per node, kills, nodes down and up."""

from __future__ import annotations

import asyncio

from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import Account, refusal_of


async def test_open_answers_the_debug_addresses(account: Account) -> None:
    profile = await account.create(browserFingerPrint={"coreVersion": "128"})
    opened = await account.ok("/browser/open", {"id": profile["id"], "queue": True})
    assert opened["ws"].startswith("ws://127.0.0.1:") and "/devtools/browser/" in opened["ws"]
    host, _, port = opened["http"].partition(":")
    assert host == "127.0.0.1" and port.isdigit() and "://" not in opened["http"]
    assert opened["coreVersion"] == "128" and isinstance(opened["pid"], int)
    assert opened["seq"] == profile["seq"] and opened["remark"] == profile["remark"]
    # Open again: the same browser, not a second one.
    assert await account.ok("/browser/open", {"id": profile["id"]}) == opened
    ports = await account.ok("/browser/ports")
    assert ports == {profile["id"]: port}
    stats = await account.stats()
    assert stats["opens"] == 1
    assert stats["profiles"]["openByNode"] == {"node-1": 1, "node-2": 0}


async def test_a_profile_open_on_one_node_cannot_be_opened_or_closed_on_another(
    account: Account,
) -> None:
    profile = await account.create()
    await account.ok("/browser/open", {"id": profile["id"]}, node="node-1")
    other = {"id": profile["id"]}
    assert "其他设备" in await account.refused("/browser/open", other, node="node-2")
    assert "其他设备" in await account.refused("/browser/close", other, node="node-2")
    # A node's pids are its own processes.
    assert await account.ok("/browser/pids/all", node="node-2") == {}
    assert list(await account.ok("/browser/pids/all", node="node-1")) == [profile["id"]]


async def test_close_succeeds_while_the_process_lingers(make_account: MakeAccount) -> None:
    account = await make_account(close_linger_seconds=3)
    profile = await account.create()
    opened = await account.ok("/browser/open", {"id": profile["id"]})
    assert await account.ok("/browser/close", {"id": profile["id"]}) is None
    ids = {"ids": [profile["id"]]}
    # Success, yet the browser is still alive for a moment.
    assert await account.ok("/browser/pids/alive", ids) == {profile["id"]: opened["pid"]}
    assert "关闭中" in await account.refused("/browser/open", {"id": profile["id"]})
    assert "关闭中" in await account.refused("/browser/delete", {"id": profile["id"]})
    assert await account.ok("/browser/close", {"id": profile["id"]}) is None  # again: fine
    await account.advance(3)
    assert await account.ok("/browser/pids/alive", ids) == {}
    assert await account.ok("/browser/pids", ids) == {}
    await account.ok("/browser/delete", {"id": profile["id"]})
    stats = await account.stats()
    assert (stats["closes"], stats["deletes"], stats["profiles"]["total"]) == (1, 1, 0)


async def test_an_open_profile_cannot_be_deleted(account: Account) -> None:
    one, two = await account.create(), await account.create(name="b")
    await account.ok("/browser/open", {"id": one["id"]})
    assert "关闭" in await account.refused("/browser/delete", {"id": one["id"]})
    assert "关闭" in await account.refused("/browser/delete/ids", {"ids": [two["id"], one["id"]]})
    assert (await account.stats())["profiles"]["total"] == 2  # all or nothing


async def test_a_killed_browser_is_gone_and_can_be_opened_again(account: Account) -> None:
    profile = await account.create()
    first = await account.ok("/browser/open", {"id": profile["id"]})
    killed = await account.control(f"browsers/{profile['id']}/kill")
    assert killed == {"id": profile["id"], "node": "node-1", "pid": first["pid"], "stuck": False}
    assert await account.ok("/browser/pids/alive", {"ids": [profile["id"]]}) == {}
    second = await account.ok("/browser/open", {"id": profile["id"]})
    assert second["pid"] != first["pid"]
    assert (await account.stats())["kills"] == 1


async def test_a_stuck_profile_needs_closing_reset(account: Account) -> None:
    profile = await account.create()
    opened = await account.ok("/browser/open", {"id": profile["id"]})
    await account.control(f"browsers/{profile['id']}/kill", {"stuck": True})
    ids = {"ids": [profile["id"]]}
    assert await account.ok("/browser/pids/alive", ids) == {}
    # /browser/pids is not checked against the processes: the dead pid stays.
    assert await account.ok("/browser/pids", ids) == {profile["id"]: opened["pid"]}
    assert "关闭中" in await account.refused("/browser/open", {"id": profile["id"]})
    await account.advance(3600)
    assert "关闭中" in await account.refused("/browser/open", {"id": profile["id"]})
    assert await account.ok("/browser/closing/reset", {"id": profile["id"]}) is None
    await account.ok("/browser/open", {"id": profile["id"]})
    assert (await account.stats())["resets"] == 1


async def test_an_open_that_times_out_leaves_the_profile_opening(account: Account) -> None:
    profile = await account.create()
    await account.faults(openStuckRate=1)
    assert await account.refused("/browser/open", {"id": profile["id"]}) == "打开窗口超时"
    await account.faults()
    assert "正在打开中" in await account.refused("/browser/open", {"id": profile["id"]})
    assert "正在打开中" in await account.refused("/browser/close", {"id": profile["id"]})
    assert (await account.stats())["profiles"]["opening"] == 1
    await account.ok("/browser/closing/reset", {"id": profile["id"]})
    await account.ok("/browser/open", {"id": profile["id"]})


async def test_open_failures_n_times_then_success(account: Account) -> None:
    profile = await account.create()
    await account.faults(openFailures=2)
    for _ in range(2):
        assert "启动失败" in await account.refused("/browser/open", {"id": profile["id"]})
    await account.ok("/browser/open", {"id": profile["id"]})
    stats = await account.stats()
    assert (stats["opens"], stats["openFailures"]) == (1, 2)
    assert (await account.http["node-1"].get("/_emulator/faults")).json()["openFailures"] == 0


async def test_one_open_in_flight_per_node_queue_waits_its_turn(
    make_account: MakeAccount,
) -> None:
    account = await make_account(open_seconds=1, speed=2)  # an open takes 0.5 s
    a, b, c = [await account.create(name=n) for n in "abc"]
    first = asyncio.create_task(account.call("/browser/open", {"id": a["id"]}))
    await asyncio.sleep(0.05)
    assert (await account.stats())["profiles"]["opening"] == 1
    # Without queue: refused while another open is in flight on this node.
    assert "queue" in await account.refused("/browser/open", {"id": b["id"]})
    # Another node opens at the same time.
    elsewhere = asyncio.create_task(account.call("/browser/open", {"id": c["id"]}, node="node-2"))
    queued = await account.call("/browser/open", {"id": b["id"], "queue": True})
    assert queued.json()["success"] is True
    assert (await first).json()["success"] is True
    assert (await elsewhere).json()["success"] is True
    assert (await account.stats())["profiles"]["openByNode"] == {"node-1": 2, "node-2": 1}


async def test_a_node_down_refuses_its_api_and_loses_its_browsers(account: Account) -> None:
    profile = await account.create()
    await account.ok("/browser/open", {"id": profile["id"]})
    assert await account.control("node", {"up": False}) == {
        "name": "node-1",
        "up": False,
        "open": 0,
    }
    down = await account.call("/health")
    assert down.status_code == 503 and not down.headers["content-type"].startswith(
        "application/json"
    )
    # The other node still serves the account, and can open the profile now.
    await account.ok("/browser/open", {"id": profile["id"]}, node="node-2")
    assert (await account.stats(node="node-1"))["nodes"] == {"node-1": False, "node-2": True}
    # Up again through its own control plane, or any node's.
    await account.control("nodes/node-1", {"up": True}, node="node-2")
    assert await account.ok("/health") is None


async def test_node_and_kill_control_plane_refusals(account: Account) -> None:
    response = await account.http["node-1"].post("/_emulator/node", json={"up": "no"})
    assert response.status_code == 400
    response = await account.http["node-1"].post("/_emulator/nodes/node-9", json={"up": True})
    assert response.status_code == 404
    response = await account.http["node-1"].post(f"/_emulator/browsers/{'0' * 32}/kill")
    assert response.status_code == 404
    refusal_of(await account.call("/browser/close", {}))


async def test_close_all_and_by_seqs_close_this_nodes_browsers(account: Account) -> None:
    a, b, c = [await account.create(name=n) for n in "abc"]
    await account.ok("/browser/open", {"id": a["id"]})
    await account.ok("/browser/open", {"id": b["id"]})
    await account.ok("/browser/open", {"id": c["id"]}, node="node-2")
    await account.ok("/browser/close/byseqs", {"seqs": [a["seq"], c["seq"]]})
    await account.advance(3)
    assert list(await account.ok("/browser/pids/all")) == [b["id"]]
    assert list(await account.ok("/browser/pids/all", node="node-2")) == [c["id"]]
    await account.ok("/browser/close/all")
    await account.advance(3)
    assert await account.ok("/browser/pids/all") == {}
    assert (await account.stats())["profiles"]["openByNode"] == {"node-1": 0, "node-2": 1}


async def test_batch_proxy_update(account: Account) -> None:
    one, two = await account.create(), await account.create(name="b")
    body = {
        "ids": [one["id"], two["id"]],
        "proxyMethod": 2,
        "proxyType": "http",
        "host": "h2",
        "port": 8080,
        "proxyUserName": "u2",
        "proxyPassword": "p2",
    }
    await account.ok("/browser/proxy/update", body)
    detail = await account.ok("/browser/detail", {"id": two["id"]})
    assert (detail["proxyType"], detail["host"], detail["proxyPassword"]) == ("http", "h2", "p2")
    assert detail["name"] == "b"
    del body["proxyMethod"]
    assert await account.refused("/browser/proxy/update", body) == "请选择代理方式"
