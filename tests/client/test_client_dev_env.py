"""`devicepool dev`'s children's environments: the shell's `OTEL_*` reach the worker, never the
Temporal server (which refuses `OTEL_TRACES_EXPORTER=console` and stops at start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from devicepool.client import _dev_stack
from devicepool.client._dev_config import DevOptions, server_env, worker_env
from devicepool.client._dev_processes import Child
from devicepool.client._dev_stack import DevStack

SHELL_OTEL = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "mine"}


@pytest.fixture
def otel_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SHELL_OTEL.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DEVICEPOOL_SHELL_MARK", "kept")


@pytest.mark.usefixtures("otel_shell")
def test_the_server_gets_the_shell_without_otel_and_the_worker_keeps_it(tmp_path: Path) -> None:
    server = server_env()
    assert not [name for name in server if name.startswith("OTEL_")]
    assert server["DEVICEPOOL_SHELL_MARK"] == "kept"  # the rest of the shell stays
    assert server["PATH"]
    worker = worker_env(DevOptions(data_dir=tmp_path))
    assert {name: worker[name] for name in SHELL_OTEL} == SHELL_OTEL


@pytest.mark.usefixtures("otel_shell")
async def test_the_stack_starts_its_server_with_that_environment(tmp_path: Path) -> None:
    """The wiring: a restarted server (the path `start` shares) is spawned with `server_env`."""
    stack = DevStack(DevOptions(data_dir=tmp_path), out=lambda _line: None)
    old = Child("temporal", mock.Mock(), tmp_path / "temporal.log", mock.Mock())
    stack.children.append(old)
    spawned: list[tuple[str, dict[str, Any] | None]] = []

    async def spawn(name: str, args: list[str], *, log_path: Path, env: Any = None) -> Child:
        spawned.append((name, env))
        return Child(name, mock.Mock(), log_path, mock.Mock())

    with (
        mock.patch.object(_dev_stack, "spawn", spawn),
        mock.patch.object(_dev_stack, "stop_child", mock.AsyncMock()),
        mock.patch.object(_dev_stack, "find_temporal", lambda: "temporal"),
        mock.patch.object(DevStack, "_wait_temporal", mock.AsyncMock()),
    ):
        await stack.restart(old)
    [(name, env)] = spawned
    assert name == "temporal"
    assert env is not None and env["DEVICEPOOL_SHELL_MARK"] == "kept"
    assert not [name for name in env if name.startswith("OTEL_")]
