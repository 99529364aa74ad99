"""`devicepool ARGS` run in a thread against a test's dev server (`cli_in_thread`), or in
the test's own thread against a fake Temporal client (`fake_temporal`, `cli`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.testing import WorkflowEnvironment

from devicepool.client.cli import main

CliRun = Callable[..., Awaitable[tuple[int, str, str]]]
Fake = TypeVar("Fake")


def fake_temporal(monkeypatch: pytest.MonkeyPatch, fake: Fake) -> Fake:
    """Every client the CLI connects is `fake` (a test's stand-in for Temporal)."""

    async def connect(**_: Any) -> Fake:
        return fake

    monkeypatch.setattr("devicepool.connect.connect", connect)
    return fake


class FakeStarts:
    """The part of a fake Temporal client the CLI connects to that starts workflows: the ids
    `running` and those `started` here, in order; a start of a running id is refused as
    Temporal refuses it. A subclass makes its handles (`handle`)."""

    def __init__(self, running: Iterable[str] = ()) -> None:
        self.service_client = SimpleNamespace(config=SimpleNamespace(target_host="fake:7233"))
        self.data_converter = SimpleNamespace(payload_codec=None)  # keys, or no encryption
        self.running = set(running)
        self.started: list[str] = []

    def handle(self, workflow_id: str) -> Any:
        raise NotImplementedError

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> Any:
        return self.handle(workflow_id)

    async def start_workflow(self, workflow: str, arg: Any, *, id: str, **_: Any) -> Any:
        if id in self.running:
            raise WorkflowAlreadyStartedError(id, workflow)
        self.started.append(id)
        self.running.add(id)
        return self.handle(id)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`devicepool ARGS` in this thread: (exit code, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def watch_get(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Any, *flags: str
) -> tuple[int, str, str]:
    """`devicepool get -w FLAGS` against `fake` (a test's stand-in for Temporal), refreshing
    every 10 ms until the fake ends it: (exit code, stdout, stderr)."""
    monkeypatch.setattr("devicepool.client._cli_pools.WATCH_SECONDS", 0.01)
    fake_temporal(monkeypatch, fake)
    return cli(capsys, "get", "-w", *flags)


def cli_in_thread(
    env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CliRun:
    """Run `devicepool ARGS` (in a thread: it runs its own event loop) against `env`'s
    dev server, no other Temporal setting of the environment; returns (exit code,
    stdout, stderr).

    `capsys`, not `capfd`: the session's workers run in this process, and the
    Temporal core's own log lines go straight to file descriptor 1 (seen once
    in front of `devices -o json`, which then did not parse)."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_TLS", "TEMPORAL_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)

    async def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = await asyncio.to_thread(main, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


# The columns of `devicepool get -o table` and `--watch` for DevicePools, in order, as
# the README shows them (written out, not read from the registry: the tests pin them).
DEVICE_POOL_COLUMNS = [
    "NAME",
    "PLATFORM",
    "REGION",
    "DESIRED",
    "READY",
    "LEASED",
    "PROV",
    "PENDING",
    "OFFLINE",
    "$/H",
    "AGE",
    "PHASE",
]
