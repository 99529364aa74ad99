"""Fixtures for the emulator's own tests: a fresh app per test, driven with plain httpx;
`emulator_process`, a real emulator process; `refused_in_one_line`, a CLI's usage error."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devicepool.emulator.app import EmulatorConfig, create_app
from devicepool.emulator.bitbrowser import BitBrowserConfig
from tests.helpers.bitbrowser import Account
from tests.helpers.emulator import Provider

ROOT = Path(__file__).resolve().parents[2]
MakeProvider = Callable[..., Awaitable[Provider]]
# `/_emulator/stats`' `creates` block, whole.
CREATES = ("accepted", "rateLimited", "idempotentReplays", "rejected")


def creates(**counts: int) -> dict[str, int]:
    """The `creates` block of `/_emulator/stats` with these counts, the others 0."""
    assert set(counts) <= set(CREATES), counts
    return {name: counts.get(name, 0) for name in CREATES}


@pytest.fixture
async def make_provider() -> AsyncIterator[MakeProvider]:
    clients: list[httpx.AsyncClient] = []

    async def make(**config: Any) -> Provider:
        config.setdefault("seed", 7)
        app = create_app(EmulatorConfig(**config))
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://emulator"
        )
        clients.append(client)
        return Provider(client, app.state.emulator)

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
async def provider(make_provider: MakeProvider) -> Provider:
    return await make_provider()


# ---------------------------------------------------------------- the BitBrowser emulator

MakeAccount = Callable[..., Awaitable[Account]]


@pytest.fixture
async def make_account() -> AsyncIterator[MakeAccount]:
    """Build an emulated BitBrowser account: two nodes, instant opens, seeded, unless told."""
    accounts: list[Account] = []

    async def make(**config: Any) -> Account:
        config.setdefault("nodes", ["node-1", "node-2"])
        config.setdefault("open_seconds", 0)
        config.setdefault("seed", 7)
        account = Account(BitBrowserConfig(**config))
        accounts.append(account)
        return account

    yield make
    for account in accounts:
        await account.aclose()


@pytest.fixture
async def account(make_account: MakeAccount) -> Account:
    return await make_account()


def refused_in_one_line(capsys: pytest.CaptureFixture[str], run: Callable[[], object]) -> str:
    """What `run` (a CLI's `main`) wrote on stderr, having exited 2 with one line."""
    with pytest.raises(SystemExit) as exited:
        run()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@contextlib.contextmanager
def emulator_process(
    log: Path, command: list[str], *argv: str, lines: int | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """`COMMAND --port 0 ARGV` (an emulator CLI, stderr to `log`) once each of its `lines`
    apps listens (default: each node ARGV names, `--node`): the process and every app's URL
    by name."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--port", "0", *argv],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=sink,
        )
    try:
        assert process.stdout is not None
        nodes: dict[str, str] = {}
        deadline = time.monotonic() + 30  # a busy 2-core machine starts Python slowly
        # Once it listens, a line a node: `NODE URL`.
        expected = argv.count("--node") if lines is None else lines
        while len(nodes) < expected and time.monotonic() < deadline:
            line = process.stdout.readline().decode()
            assert line, f"the emulator died: {log.read_text()}"
            name, _, url = line.strip().partition(" ")
            nodes[name] = url
        yield process, nodes
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
