"""The e2e tests' stack: `devicepool dev` as a real process on free ports, and what tests ask.

`start_stack` runs `python -m devicepool.client dev` on a data dir with fast
knobs (any flag can be overridden by passing it again) and waits for its "is
up" banner; `stop_stack` stops it with SIGINT, as Ctrl-C would. `Stack` drives
it through the real CLI, the stock `temporal` CLI and the emulator's ground
truth (`GET /_emulator/stats`), and finds its child processes in /proc.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from devicepool.api.loader import load_manifests
from devicepool.client.cli import run_cli
from devicepool.client.pool_client import PoolClient
from devicepool.connect import connect
from devicepool.testing import free_ports, stats_sync, wait_until, write_pool
from tests.helpers.servers import temporal_binary

BIN = Path(sys.executable).parent


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (Linux /proc)."""
    found: set[int] = set()
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except FileNotFoundError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


@dataclass
class Stack:
    process: subprocess.Popen[bytes]
    data_dir: Path
    out: Path
    port: int
    emulator_port: int
    metrics_port: int
    children: set[int]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        env["TEMPORAL_ADDRESS"] = self.address
        return env

    def cli(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        devicepool = BIN / "devicepool"
        command = (
            [str(devicepool)]
            if devicepool.exists()
            else [sys.executable, "-m", "devicepool.client"]
        )
        return subprocess.run(
            [*command, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cli_here(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`devicepool ARGS` run in this process (the console script's `run_cli`), answered as
        `cli` answers, in this stack's environment: for a check of what the CLI says, where
        the test is not about the CLI's process (one costs ~0.7 CPU-s, mostly imports)."""
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
            for name in [name for name in os.environ if name.startswith("TEMPORAL_")]:
                patch.delenv(name)
            patch.setenv("TEMPORAL_ADDRESS", self.address)
            code = run_cli(list(args))
        return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())

    def status(self, name: str, *, kind: str | None = None) -> dict[str, Any]:
        """The pool's status as `devicepool get NAME -o json` prints it, read
        through the Python client's call behind it (`PoolClient.summary`: with
        no worker to answer the query, the last status the pool published):
        the waits poll it twice a second, and a CLI process per poll cost
        ~0.7 CPU-s. The tests run the CLI (`cli_here`) wherever they check what it says.
        `kind`: the kind's name (`BROWSER_POOL.name`), DevicePool by default.
        A stale summary (no worker answered the queries yet, e.g. just after a
        restart: `readyDevices` from the search attributes, no
        `observedGeneration`) reads as `{}`, so the waits keep waiting for the pool's
        own answer; CI once took one for it."""
        return asyncio.run(self._status(name, kind))

    async def _status(self, name: str, kind: str | None) -> dict[str, Any]:
        client = await connect(address=self.address)
        summary = await PoolClient(client).summary(name, kind=kind)
        return {} if summary.stale else dict(summary.status)

    def apply(self, path: str) -> None:
        """`apply -f PATH` (no `--wait`) through the Python client behind it, for a test that
        needs a pool applied, not what the CLI says (a CLI process costs ~0.7 CPU-s)."""
        asyncio.run(self._apply(path))

    async def _apply(self, path: str) -> None:
        client = PoolClient(await connect(address=self.address))
        for pool in load_manifests(path):
            await client.apply(pool)

    def stats(self) -> dict[str, Any]:
        return stats_sync(f"http://127.0.0.1:{self.emulator_port}")

    def faults(self, body: dict[str, Any]) -> None:
        """Set the emulator's faults (`{}` clears them)."""
        answer = httpx.post(
            f"http://127.0.0.1:{self.emulator_port}/_emulator/faults", json=body, timeout=5
        )
        answer.raise_for_status()

    def temporal(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """The stock `temporal` CLI against this stack."""
        return subprocess.run(
            [temporal_binary(), *args, "--address", self.address],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def worker_pid(self) -> int:
        return self._child_pid(" devicepool.client worker ")

    def temporal_pid(self) -> int:
        """The Temporal dev server (`temporal server start-dev`) the stack runs."""
        return self._child_pid(" server start-dev ")

    def temporal_pid_or_none(self) -> int | None:
        """The dev server's pid, or None while the stack has none running."""
        pids = self._child_pids(" server start-dev ")
        return pids[0] if len(pids) == 1 else None

    def _child_pid(self, marker: str) -> int:
        pids = self._child_pids(marker)
        assert len(pids) == 1, pids
        return pids[0]

    def _child_pids(self, marker: str) -> list[int]:
        return [p for p in descendants(self.process.pid) if marker in cmdline(p) and alive(p)]

    def workflow_running(self, workflow_id: str) -> bool:
        described = self.temporal(
            "workflow", "describe", "--workflow-id", workflow_id, "-o", "json"
        )
        if described.returncode != 0:
            assert "not found" in described.stderr.lower(), described.stderr
            return False
        status = json.loads(described.stdout)["workflowExecutionInfo"]["status"]
        return bool(status in ("WORKFLOW_EXECUTION_STATUS_RUNNING", "Running"))

    def orphans(self) -> dict[str, int]:
        """Live devices, per pool label, whose pool has no running workflow (ground truth)."""
        by_pool: dict[str, int] = self.stats()["devices"]["byPool"]
        return {
            pool: count
            for pool, count in by_pool.items()
            if not pool or not self.workflow_running(f"devicepool/{pool}")
        }


def start_stack(data_dir: Path, out: Path, *extra: str) -> Stack:
    """`devicepool dev` on `data_dir` (fast knobs, free ports, `extra` flags), once it says it is up.

    A port found free can be taken by another process before Temporal binds it (tests run
    side by side): a start that fails on "address already in use" is tried again on new
    ports, at most `PORT_RACE_TRIES` times in all, with the data dir as it was before.
    """
    fresh = not data_dir.exists()
    for attempt in range(1, PORT_RACE_TRIES + 1):
        try:
            return _start_stack(data_dir, out, *extra)
        except AssertionError:
            # Taken before `devicepool dev` looked (it names the flag), or after, before
            # Temporal bound it (Temporal's own log says so) or before the worker bound its
            # metrics port (the banner ends "OSError: [Errno 98] Address already in use";
            # CI with ten xdist workers lost a module's stack to it).
            log = data_dir / "logs" / "temporal.log"
            said = out.read_text(errors="replace").lower()
            raced = "already in use" in said or (
                log.is_file() and "address already in use" in log.read_text(errors="replace")
            )
            if not raced or attempt == PORT_RACE_TRIES:
                raise
            if fresh:
                shutil.rmtree(data_dir, ignore_errors=True)  # `--apply` wants a new data dir
    raise AssertionError("unreachable")


# Starts of a dev stack tried when its free ports were taken before Temporal bound them.
PORT_RACE_TRIES = 3


def _start_stack(data_dir: Path, out: Path, *extra: str) -> Stack:
    port, ui_port, emulator_port, metrics_port = free_ports(4)
    command = [
        sys.executable,
        "-m",
        "devicepool.client",
        "dev",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--emulator-port",
        str(emulator_port),
        "--metrics-port",
        str(metrics_port),
        "--data-dir",
        str(data_dir),
        "--provision-seconds",
        "2",
        # (5 s by default: every delete here would wait it out)
        "--terminate-seconds",
        "0.5",
        "--creates-per-minute",
        "120",
        "--resync-seconds",
        "2",
        "--health-seconds",
        "2",
        "--offline-after-seconds",
        "10",
        "--startup-timeout-seconds",
        "30",
        *extra,
    ]
    with out.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    stack = Stack(process, data_dir, out, port, emulator_port, metrics_port, set())
    try:
        wait_until(
            lambda: "devicepool dev is up" in out.read_text() or process.poll() is not None,
            timeout=90,
            what="devicepool dev to come up",
        )
        assert process.poll() is None, out.read_text()
    except BaseException:
        stop_stack(stack)
        raise
    stack.children = descendants(process.pid)
    return stack


def stop_stack(stack: Stack) -> None:
    """SIGINT, as Ctrl-C would; SIGKILL for everything if it does not stop within 60 s."""
    process = stack.process
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        for pid in descendants(process.pid):
            os.kill(pid, signal.SIGKILL)
        raise


def manifest(tmp_path: Path, name: str, replicas: int) -> str:
    """`NAME.yaml` in `tmp_path`: the pool at `replicas`, on the stack's proxy pool."""
    path = write_pool(tmp_path / f"{name}.yaml", name, provider="bitcloudphone", replicas=replicas)
    return str(path)


# The emulator's stats before anything happened (a new data dir), for a book
# that starts before its stack does.
NO_STATS: dict[str, Any] = {"creates": {"accepted": 0}, "deviceHoursBilled": 0.0}
