"""Ctrl-C on `devicepool dev`: a child slow to stop is named while the stack waits for it, with
how long at most and how to stop waiting (issue 43, item 19).

A real child process that ignores SIGTERM stands for a worker finishing its activities; the
stack's waits are shortened, so nothing sleeps out a fixed time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import devicepool.client._dev_processes
import devicepool.client._dev_stack
from devicepool.client._dev_config import DevOptions
from devicepool.client._dev_processes import spawn
from devicepool.client._dev_stack import DevStack

# Ignores SIGTERM, as a worker finishing in-flight activities does for up to 20 s.
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring' + ' SIGTERM', flush=True); time.sleep(60)",
]


async def test_a_child_slow_to_stop_is_named_while_the_stack_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devicepool.client._dev_processes, "STOP_TIMEOUT", 2.0)
    monkeypatch.setattr(devicepool.client._dev_stack, "SLOW_STOP_NOTICE", 0.5)
    lines: list[str] = []
    stack = DevStack(DevOptions(data_dir=tmp_path, metrics_port=1), out=lines.append)
    (tmp_path / "logs").mkdir()
    child = await spawn("emulator", STUBBORN, log_path=tmp_path / "logs" / "emulator.log")
    stack.children.append(child)
    await stack._wait_log("emulator", "ignoring SIGTERM", 0)  # its handler is set
    await stack.stop()
    assert lines[0] == "stopping the emulator ..."
    assert lines[1] == (
        "  still waiting for the emulator to exit (killed at 2 s; Ctrl-C again kills it now)"
    )
    assert child.process.returncode is not None  # killed at STOP_TIMEOUT


async def test_a_quick_child_gets_one_line(tmp_path: Path) -> None:
    lines: list[str] = []
    stack = DevStack(DevOptions(data_dir=tmp_path, metrics_port=1), out=lines.append)
    (tmp_path / "logs").mkdir()
    quick = [sys.executable, "-c", "import time; time.sleep(60)"]
    stack.children.append(await spawn("emulator", quick, log_path=tmp_path / "logs" / "e.log"))
    await stack.stop()
    assert lines == ["stopping the emulator ..."]
