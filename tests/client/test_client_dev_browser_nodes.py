"""`devicepool dev --browser-nodes N`: the BitBrowser emulator's command and the banner's lines.

Without processes (the stack's spawns and waits are stubbed); the real stack with two nodes
is tests/e2e/test_e2e_dev_browser_nodes.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devicepool.client._dev_config import DevOptions
from devicepool.client._dev_stack import DevStack, bitbrowser_command
from devicepool.testing import free_port
from tests.helpers.dev_stubs import start_and_stop, stub_dev_stack


def flags(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == name]


def test_the_nodes_are_one_account_on_free_ports_kept_in_the_data_dir(tmp_path: Path) -> None:
    command = bitbrowser_command(DevOptions(data_dir=tmp_path, browser_nodes=3))
    assert command[1:3] == ["-m", "devicepool.emulator.bitbrowser"]
    assert flags(command, "--node") == ["node-1", "node-2", "node-3"]
    assert flags(command, "--port") == ["0"]  # it picks free ports and prints them
    assert flags(command, "--account") == ["bitbrowser"]
    assert flags(command, "--state") == [str(tmp_path / "bitbrowser.json")]


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`DevStack.start` with nothing spawned; the BitBrowser nodes "print" their addresses."""
    names: list[str] = []

    async def spawn(stack: DevStack, name: str, *_: object, **__: object) -> None:
        names.append(name)

    async def nodes_up(stack: DevStack, log_from: int) -> None:
        n = stack.options.browser_nodes
        stack.browser_nodes = {
            f"node-{i}": f"http://127.0.0.1:{41000 + i}" for i in range(1, n + 1)
        }

    stub_dev_stack(monkeypatch, spawn, skip=("_wait_log",), nodes_up=nodes_up)
    return names


async def banner(options: DevOptions) -> str:
    lines = await start_and_stop(options)
    return next(line for line in lines if line.startswith("devicepool dev is up\n"))


async def test_the_banner_lists_each_node(tmp_path: Path, spawned: list[str]) -> None:
    with_nodes = await banner(DevOptions(data_dir=tmp_path / "a", browser_nodes=2))
    assert spawned == ["temporal", "emulator", "bitbrowser", "node-1-worker", "node-2-worker"]
    assert (
        "  BitBrowser nodes: node-1 http://127.0.0.1:41001\n"
        "                    node-2 http://127.0.0.1:41002\n"
        "                    (account bitbrowser in bitbrowser.json, log bitbrowser.log)\n"
        "  Node workers:     node-1, node-2 (labelled node=<name>; logs <name>-worker.log)\n"
        "  Worker metrics:"
    ) in with_nodes
    # Without the flag: no BitBrowser process, and the banner without those three lines.
    spawned.clear()
    without = await banner(DevOptions(data_dir=tmp_path / "b"))
    assert spawned == ["temporal", "emulator"]
    assert "BitBrowser" not in without
    lines = with_nodes.replace(str(tmp_path / "a"), str(tmp_path / "b")).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  BitBrowser nodes:"))
    assert lines[:first] + lines[first + 4 :] == without.splitlines()


def test_each_node_worker_serves_its_emulator_node_labelled_with_its_name(tmp_path: Path) -> None:
    stack = DevStack(DevOptions(data_dir=tmp_path, browser_nodes=2))
    stack.browser_nodes = {"node-1": "http://127.0.0.1:41001", "node-2": "http://127.0.0.1:41002"}
    command = stack.node_worker_command("node-2")
    assert command[1:4] == ["-m", "devicepool.client", "worker"]
    assert flags(command, "--node") == ["node-2"]
    assert flags(command, "--node-label") == ["node=node-2"]
    assert flags(command, "--bitbrowser-url") == ["http://127.0.0.1:41002"]
    assert flags(command, "--config") == [str(tmp_path / "node.yaml")]


@pytest.mark.parametrize(("lost_after", "beat"), [(6.0, "2"), (120.0, "10")])
def test_a_node_worker_beats_well_within_the_stacks_node_lost_after(
    tmp_path: Path, lost_after: float, beat: str
) -> None:
    """`--node-lost-after-seconds 6` with the node workers' default beat (every 10 s) had
    each node lost 4 s in every 10: a BrowserPool replaced its profiles elsewhere and
    deleted the replacements again, over and over (issue 38's CI). A node worker beats at
    most every third of the limit, so one late beat does not lose it."""
    stack = DevStack(
        DevOptions(data_dir=tmp_path, browser_nodes=1, node_lost_after_seconds=lost_after)
    )
    stack.browser_nodes = {"node-1": "http://127.0.0.1:41001"}
    command = stack.node_worker_command("node-1")
    assert flags(command, "--node-heartbeat-seconds") == [beat]


# ------------------------------------------------- the nodes' ports across restarts


@pytest.fixture
def bitbrowser_argv(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """`DevStack.start` with nothing spawned; the BitBrowser emulator's command lines, and its
    nodes "listening" where they were asked to (else on a port of their own)."""
    commands: list[list[str]] = []

    async def spawn(stack: DevStack, name: str, args: list[str], **__: object) -> None:
        if name == "bitbrowser":
            commands.append(args)

    async def nodes_up(stack: DevStack, log_from: int) -> None:
        asked = dict(node.partition("=")[::2] for node in flags(commands[-1], "--node"))
        stack.browser_nodes = {
            name: f"http://127.0.0.1:{port or free_port()}" for name, port in asked.items()
        }

    stub_dev_stack(monkeypatch, spawn, skip=("_wait_log",), nodes_up=nodes_up)
    return commands


async def test_a_restart_keeps_each_nodes_port(
    tmp_path: Path, bitbrowser_argv: list[list[str]]
) -> None:
    """The docs' `curl http://127.0.0.1:PORT/_emulator/...` lines keep working after a restart:
    the ports the nodes took first are kept in the data dir and asked for again."""
    options = DevOptions(data_dir=tmp_path, browser_nodes=2)
    first = await start_and_stop(options)
    assert flags(bitbrowser_argv[0], "--node") == ["node-1", "node-2"]  # free ports at first
    said = re.findall(r"(node-\d) http://127\.0\.0\.1:(\d+)", first[-1])
    assert [name for name, _ in said] == ["node-1", "node-2"]
    (one, two) = (port for _, port in said)
    await start_and_stop(options)
    assert flags(bitbrowser_argv[1], "--node") == [f"node-1={one}", f"node-2={two}"]
    # One node more: the others keep theirs, the new one gets a free port.
    await start_and_stop(DevOptions(data_dir=tmp_path, browser_nodes=3))
    assert flags(bitbrowser_argv[2], "--node") == [f"node-1={one}", f"node-2={two}", "node-3"]


async def test_a_saved_port_taken_meanwhile_is_a_fresh_one_and_said(
    tmp_path: Path, bitbrowser_argv: list[list[str]]
) -> None:
    import socket

    options = DevOptions(data_dir=tmp_path, browser_nodes=2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = free_port()
        (tmp_path / "bitbrowser-ports.json").write_text(f'{{"node-1": {port}, "node-2": {other}}}')
        lines = await start_and_stop(options)
    assert flags(bitbrowser_argv[0], "--node") == ["node-1", f"node-2={other}"]
    assert (
        f"node-1's port {port} (kept in bitbrowser-ports.json) is taken: it gets a free one"
        in lines
    )


@pytest.mark.parametrize("saved", ["not json", '{"node-1": "x"}', '{"node-1": 70000}', "[]"])
async def test_a_damaged_ports_file_means_free_ports(
    tmp_path: Path, bitbrowser_argv: list[list[str]], saved: str
) -> None:
    (tmp_path / "bitbrowser-ports.json").write_text(saved)
    await start_and_stop(DevOptions(data_dir=tmp_path, browser_nodes=1))
    assert flags(bitbrowser_argv[0], "--node") == ["node-1"]


async def test_a_saved_port_that_is_now_another_flags_is_not_asked_for(
    tmp_path: Path, bitbrowser_argv: list[list[str]]
) -> None:
    # Free now, but this run's worker listens there once it starts.
    metrics_port = free_port()
    (tmp_path / "bitbrowser-ports.json").write_text(f'{{"node-1": {metrics_port}}}')
    options = DevOptions(data_dir=tmp_path, browser_nodes=1, metrics_port=metrics_port)
    lines = await start_and_stop(options)
    assert flags(bitbrowser_argv[0], "--node") == ["node-1"]
    assert f"node-1's port {metrics_port} (kept in bitbrowser-ports.json) is taken" in lines[0]


async def test_one_saved_port_for_two_nodes_is_asked_for_once(
    tmp_path: Path, bitbrowser_argv: list[list[str]]
) -> None:
    port = free_port()  # a file edited by hand: the emulator refuses one port twice
    (tmp_path / "bitbrowser-ports.json").write_text(f'{{"node-1": {port}, "node-2": {port}}}')
    await start_and_stop(DevOptions(data_dir=tmp_path, browser_nodes=2))
    assert flags(bitbrowser_argv[0], "--node") == [f"node-1={port}", "node-2"]


def test_the_help_says_the_ports_are_kept_in_the_data_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A restart gives each node its port again (`bitbrowser-ports.json`): "free ports" alone
    read as new ones every time."""
    from devicepool.client.cli import main

    assert main(["dev", "--help"]) == 0
    said = " ".join(re.sub(r"[│\s]+", " ", capsys.readouterr().out).split())
    assert "kept in the data dir" in said
