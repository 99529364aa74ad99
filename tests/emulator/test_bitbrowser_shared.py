"""Separate emulator processes of one BitBrowser account share it, as desktop clients do.

Profiles, phones, counters and the clock are the account's; a browser belongs
to the node (and so the process) that opened it. In process: two emulators on
one accounts dir, each with its own nodes (each call takes the file's lock, so
two emulators in one process behave as two processes would). Then real
`devicepool emulator --bitbrowser` processes on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devicepool.client.cli import main as cli_main
from devicepool.emulator.bitbrowser import StateFileError
from tests.emulator.conftest import emulator_process as bitbrowser_process
from tests.helpers.bitbrowser import Account, accounts_started, phone_body, profile_body

ROOT = Path(__file__).resolve().parents[2]
OPEN_ELSEWHERE = "其他设备"
BITBROWSER = [sys.executable, "-m", "devicepool.client", "emulator", "--bitbrowser"]

Start = Callable[..., Account]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """Start an emulator of account `acme` on `tmp_path/accounts`, serving `nodes`."""
    async with accounts_started(
        account="acme",
        open_seconds=0,
        phone_requests_per_second=100,
        accounts_dir=tmp_path / "accounts",
    ) as make:

        def on_nodes(*nodes: str, **config: Any) -> Account:
            return make(nodes=list(nodes), **config)

        yield on_nodes


async def test_two_emulators_of_one_account_share_profiles_and_phones(start: Start) -> None:
    a, b = start("node-a"), start("node-b")
    created = await a.create(node="node-a")
    listed = await b.ok("/browser/list", {"page": 0}, node="node-b")
    assert [p["id"] for p in listed["list"]] == [created["id"]]
    phone = await b.ok("/phone/profile/add", phone_body(), node="node-b")
    phones = await a.ok("/phone/list", {"page": 0}, node="node-a")
    assert [p["id"] for p in phones["list"]] == [phone["id"]]
    # A change on one is the other's too: a replace, then a delete.
    await b.ok(
        "/browser/update/partial", {"ids": [created["id"]], "remark": "moved"}, node="node-b"
    )
    assert (await a.ok("/browser/detail", {"id": created["id"]}, node="node-a"))["remark"] == (
        "moved"
    )
    for stats in (await a.stats("node-a"), await b.stats("node-b")):
        assert stats["creates"] == 1 and stats["phones"]["created"] == 1
        assert stats["nodes"] == {"node-a": True, "node-b": True}
        assert stats["account"] == "acme"
    await a.ok("/browser/delete", {"id": created["id"]}, node="node-a")
    assert (await b.ok("/browser/list", {"page": 0}, node="node-b"))["list"] == []


async def test_a_browser_stays_on_the_node_that_opened_it(start: Start) -> None:
    a, b = start("node-a"), start("node-b")
    profile = await a.create(node="node-a")
    opened = await a.ok("/browser/open", {"id": profile["id"]}, node="node-a")
    alive_on_a = await a.ok("/browser/pids/alive", {"ids": [profile["id"]]}, node="node-a")
    assert alive_on_a == {profile["id"]: opened["pid"]}
    assert await b.ok("/browser/pids/alive", {"ids": [profile["id"]]}, node="node-b") == {}
    assert OPEN_ELSEWHERE in await b.refused("/browser/open", {"id": profile["id"]}, node="node-b")
    assert OPEN_ELSEWHERE in await b.refused("/browser/close", {"id": profile["id"]}, node="node-b")
    assert (await b.stats("node-b"))["profiles"]["openByNode"] == {"node-a": 1, "node-b": 0}
    # Taken down from the other process, node-a loses its browsers and answers 503.
    await b.control("nodes/node-a", {"up": False}, node="node-b")
    assert (await a.call("/health", node="node-a")).status_code == 503
    assert (await a.stats("node-a"))["profiles"]["open"] == 0


async def test_an_open_in_flight_lets_the_other_emulator_in(start: Start) -> None:
    # The launch time is an await: the file is let go meanwhile, and read again after.
    a, b = start("node-a", open_seconds=0.5), start("node-b")
    profile = await a.create(node="node-a")
    opening = asyncio.create_task(a.ok("/browser/open", {"id": profile["id"]}, node="node-a"))
    await asyncio.sleep(0.2)
    assert (await b.stats("node-b"))["profiles"]["opening"] == 1
    assert OPEN_ELSEWHERE in await b.refused("/browser/open", {"id": profile["id"]}, node="node-b")
    other = await b.create(node="node-b", name="pool-a/1")
    opened = await asyncio.wait_for(opening, timeout=10)
    assert opened["pid"] > 0
    stats = await a.stats("node-a")
    assert stats["profiles"]["total"] == 2 and stats["profiles"]["openByNode"]["node-a"] == 1
    assert (await a.ok("/browser/detail", {"id": other["id"]}, node="node-a"))["name"] == "pool-a/1"


async def test_a_node_is_served_by_one_emulator(start: Start) -> None:
    start("node-a", "node-b")
    with pytest.raises(StateFileError, match=r"'node-b' .* served by another emulator"):
        start("node-b")
    start("node-c")  # the refused one left nothing held


async def test_other_accounts_and_the_last_one_out(start: Start, tmp_path: Path) -> None:
    a = start("node-a")
    other = start("node-a", account="globex")  # another account: its own node-a
    await a.create(node="node-a")
    assert (await other.stats("node-a"))["profiles"]["total"] == 0
    b = start("node-b")
    a.emulator.close()
    # node-a is gone from the account (and its browsers with it); the account is not.
    stats = await b.stats("node-b")
    assert stats["nodes"] == {"node-b": True} and stats["profiles"]["total"] == 1
    b.emulator.close()
    # Nobody serves acme any more: without a state file it is forgotten, as memory is.
    assert not (tmp_path / "accounts" / "acme.json").exists()
    again = start("node-a")
    assert (await again.stats("node-a"))["profiles"]["total"] == 0


async def test_two_emulators_on_one_state_file_share_it(start: Start, tmp_path: Path) -> None:
    state = tmp_path / "acme.json"
    a = start("node-a", state_file=state, accounts_dir=None)
    b = start("node-b", state_file=state, accounts_dir=None)
    created = await b.create(node="node-b")
    assert (await a.ok("/browser/detail", {"id": created["id"]}, node="node-a"))["id"] == (
        created["id"]
    )
    a.emulator.close()
    b.emulator.close()
    again = start("node-a", state_file=state, accounts_dir=None)  # a state file outlives them
    assert (await again.stats("node-a"))["profiles"]["total"] == 1


# ------------------------------------------------------------------ real processes


@contextlib.contextmanager
def emulator_process(log: Path, *argv: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`devicepool emulator --bitbrowser --port 0 ARGV` serving one node: (process, its URL)."""
    with bitbrowser_process(log, BITBROWSER, *argv) as (process, nodes):
        (url,) = nodes.values()
        yield process, url


def post(url: str, path: str, body: dict[str, Any]) -> Any:
    answer = httpx.post(f"{url}{path}", json=body, timeout=10).json()
    assert answer["success"] is True, answer
    return answer.get("data")


@pytest.mark.e2e  # real emulator processes
@pytest.mark.timeout(120)  # four Python processes on a busy 2-core machine
def test_emulator_processes_of_one_account_share_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = ["--account", "acme", "--accounts-dir", str(tmp_path / "accounts")]
    with (
        emulator_process(tmp_path / "a.log", "--node", "desk-a", *shared) as (a, url_a),
        emulator_process(tmp_path / "b.log", "--node", "desk-b", *shared) as (b, url_b),
    ):
        created = post(url_a, "/browser/update", profile_body())
        assert [p["id"] for p in post(url_b, "/browser/list", {"page": 0})["list"]] == [
            created["id"]
        ]
        post(url_b, "/browser/open", {"id": created["id"]})
        assert post(url_a, "/browser/pids/alive", {"ids": [created["id"]]}) == {}
        assert created["id"] in post(url_b, "/browser/pids/alive", {"ids": [created["id"]]})
        stats = httpx.get(f"{url_a}/_emulator/stats", timeout=10).json()
        assert stats["profiles"]["openByNode"] == {"desk-a": 0, "desk-b": 1}

        # Creates through both at once: none lost, none doubled (each call holds the file).
        def create(i: int) -> str:
            url = url_a if i % 2 else url_b
            return str(post(url, "/browser/update", profile_body(name=f"pool-a/{i}"))["id"])

        with ThreadPoolExecutor(max_workers=6) as pool:
            ids = set(pool.map(create, range(1, 21)))
        stats = httpx.get(f"{url_b}/_emulator/stats", timeout=10).json()
        assert len(ids) == 20 and stats["creates"] == 21 and stats["profiles"]["total"] == 21
        assert stats["duplicates"]["byName"] == {}
        post(url_a, "/browser/delete/ids", {"ids": sorted(ids)})

        # A second emulator for a node already served: one line, exit 2. (Its CLI in this
        # process: what it refuses is process a's claim, and a Python process of it to
        # start costs more CPU than the rest of this test.)
        with pytest.raises(SystemExit) as refused:
            cli_main(["emulator", "--bitbrowser", "--port", "0", "--node", "desk-a", *shared])
        assert refused.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "served by another emulator" in err, err

        # desk-b's process dies without leaving: the next process in forgets its node,
        # and the browser that died with it.
        b.send_signal(signal.SIGKILL)
        b.wait(timeout=10)
        with emulator_process(tmp_path / "c.log", "--node", "desk-c", *shared) as (c, url_c):
            stats = httpx.get(f"{url_a}/_emulator/stats", timeout=10).json()
            assert stats["nodes"] == {"desk-a": True, "desk-c": True}
            assert stats["profiles"] == {
                "total": 1,
                "open": 0,
                "opening": 0,
                "closing": 0,
                "openByNode": {"desk-a": 0, "desk-c": 0},
            }
            assert post(url_c, "/browser/detail", {"id": created["id"]})["id"] == created["id"]
            c.send_signal(signal.SIGTERM)
            assert c.wait(timeout=10) == 0
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=10) == 0
    # The last one out removed the account (no state file: it lived while they ran).
    assert not (tmp_path / "accounts" / "acme.json").exists()
