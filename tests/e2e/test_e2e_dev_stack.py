"""End to end: `devicepool dev` as a real process, driven by the real CLI and the stock `temporal` CLI.

One stack per module (free ports, a temp data dir, fast knobs); the tests run
in file order, `test_sigint_stops_everything` stops that stack with SIGINT and
checks that no process is left behind, and the last one restarts a stack of
its own on the same data dir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


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


def wait_until(check: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


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

    def status(self, name: str) -> dict[str, Any]:
        result = self.cli("get", name, "-o", "json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout)["status"])

    def stats(self) -> dict[str, Any]:
        answer = httpx.get(f"http://127.0.0.1:{self.emulator_port}/_emulator/stats", timeout=5)
        answer.raise_for_status()
        return dict(answer.json())

    def worker_pid(self) -> int:
        pids = [
            p for p in descendants(self.process.pid) if " devicepool.client worker " in cmdline(p)
        ]
        assert len(pids) == 1, pids
        return pids[0]


def start_stack(data_dir: Path, out: Path, *extra: str) -> Stack:
    """`devicepool dev` on `data_dir` (fast knobs, free ports, `extra` flags), once it says it is up."""
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("devicepool-dev")
    stack = start_stack(data_dir, data_dir.parent / f"{data_dir.name}.out")
    try:
        yield stack
    finally:
        stop_stack(stack)


def manifest(tmp_path: Path, name: str, replicas: int) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        "apiVersion: mobile.example.com/v1alpha1\n"
        "kind: DevicePool\n"
        f"metadata:\n  name: {name}\n"
        "spec:\n"
        "  provider: bitcloudphone\n"
        "  platform: android\n"
        "  region: us-west\n"
        '  osVersion: "14"\n'
        f"  replicas: {replicas}\n"
        "  proxy:\n    poolRef: proxyseller-us\n    stickyTTL: 900\n"
    )
    return str(path)


def test_apply_scale_with_temporal_cli_delete(stack: Stack, tmp_path: Path) -> None:
    # Bad input changes nothing, against a live server too.
    bad = stack.cli("apply", "-f", manifest(tmp_path, "e2e-bad", 501))
    assert bad.returncode == 2, bad.stderr
    assert stack.cli("get", "e2e-bad").returncode == 1

    applied = stack.cli(
        "apply", "-f", manifest(tmp_path, "e2e-pool", 2), "--wait", "--timeout", "60"
    )
    assert applied.returncode == 0, applied.stderr
    assert "devicepool/e2e-pool created" in applied.stdout
    assert stack.status("e2e-pool")["readyDevices"] == 2

    temporal = shutil.which("temporal", path=str(BIN)) or shutil.which("temporal")
    assert temporal is not None
    signalled = subprocess.run(
        [
            temporal,
            "workflow",
            "signal",
            "--workflow-id",
            "devicepool/e2e-pool",
            "--name",
            "scale",
            "--input",
            '{"replicas": 3}',
            "--address",
            stack.address,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert signalled.returncode == 0, signalled.stderr
    wait_until(
        lambda: stack.status("e2e-pool").get("readyDevices") == 3,
        timeout=30,
        what="3 ready devices after the scale signal",
    )
    assert stack.stats()["devices"]["byPool"]["e2e-pool"] == 3

    listed = stack.cli("get", "-o", "json")
    assert [p["metadata"]["name"] for p in json.loads(listed.stdout)] == ["e2e-pool"]

    deleted = stack.cli("delete", "e2e-pool", "--wait", "--timeout", "60")
    assert deleted.returncode == 0, deleted.stderr
    assert "0 devices left" in deleted.stdout
    stats = stack.stats()
    assert "e2e-pool" not in stats["devices"]["byPool"]
    assert stats["devices"]["live"] == 0
    gone = stack.cli("get", "e2e-pool")
    assert gone.returncode == 1
    assert "not found" in gone.stderr


def test_worker_killed_mid_scale_up_converges_without_duplicates(
    stack: Stack, tmp_path: Path
) -> None:
    applied = stack.cli(
        "apply", "-f", manifest(tmp_path, "e2e-kill", 1), "--wait", "--timeout", "60"
    )
    assert applied.returncode == 0, applied.stderr
    before = stack.stats()

    scaled = stack.cli("scale", "e2e-kill", "--replicas", "8")
    assert scaled.returncode == 0, scaled.stderr
    wait_until(
        lambda: stack.stats()["devices"]["byPool"].get("e2e-kill", 0) >= 3,
        timeout=30,
        what="the scale-up to start",
    )
    os.kill(stack.worker_pid(), signal.SIGKILL)  # `devicepool dev` starts a new worker

    status = wait_until(
        lambda: (s := stack.status("e2e-kill")).get("readyDevices") == 8 and s,
        timeout=90,
        what="8 ready devices after the worker was killed",
    )
    assert status["desiredReplicas"] == 8
    after = stack.stats()
    assert after["devices"]["byPool"]["e2e-kill"] == 8
    assert after["creates"]["accepted"] - before["creates"]["accepted"] == 7
    assert after["terminations"] == before["terminations"]

    deleted = stack.cli("delete", "e2e-kill", "--wait", "--timeout", "60")
    assert deleted.returncode == 0, deleted.stderr
    assert stack.stats()["devices"]["live"] == 0


def readme_python_example() -> str:
    """The first ```python block of the README's "## Python API" section, as written."""
    text = (ROOT / "README.md").read_text()
    assert "\n## Python API\n" in text, "README.md has no '## Python API' section"
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    assert "```python\n" in section, "the Python API section has no python code block"
    return section.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_readme_python_api_example_runs(stack: Stack) -> None:
    # Run as a user would (`python example.py` from the repository root), against this stack.
    code = readme_python_example()
    assert "from devicepool.client import PoolClient, connect" in code
    # Then end as the `devicepool` CLI does, without interpreter finalization: there
    # the SDK's native threads can abort a process whose work is done (SIGABRT,
    # temporalio/sdk-python#300). An exception in the example still exits non-zero.
    script = f"{code}\n\nimport os, sys\nsys.stdout.flush()\nos._exit(0)\n"
    try:
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=stack.env(),
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        status = stack.status("quickstart")
        assert status["readyDevices"] == status["desiredReplicas"] == 8
        assert "quickstart: 8/8 ready" in result.stdout
    finally:
        # Waited for: a worker stopped mid-teardown makes the next test's shutdown slow.
        deleted = stack.cli("delete", "quickstart", "--wait", "--timeout", "60")
    assert deleted.returncode == 0, deleted.stderr
    assert stack.stats()["devices"]["live"] == 0


def test_sigint_stops_everything(stack: Stack) -> None:
    children = descendants(stack.process.pid) | stack.children
    assert children, "the stack has child processes"
    stack.process.send_signal(signal.SIGINT)
    assert stack.process.wait(timeout=60) == 0, stack.out.read_text()
    wait_until(
        lambda: not any(alive(pid) for pid in children),
        timeout=10,
        what="every child process to exit",
    )
    assert "stopped" in stack.out.read_text()


def test_a_restarted_dev_stack_keeps_its_pools_devices(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # After the module's stack has stopped: a stack of its own, started with
    # `--apply` as `make demo` does, scaled by the user, stopped with SIGINT and
    # started again on the same data dir (on other ports) with the same `--apply`.
    data_dir = tmp_path_factory.mktemp("devicepool-restart")
    example = manifest(data_dir.parent, "e2e-restart", 3)
    first = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-1.out", "--apply", example)
    try:
        banner = first.out.read_text()
        assert "devicepool/e2e-restart created (generation 1, replicas 3)" in banner
        assert f"Manifests:        {example} applied (a new data dir)" in banner
        scaled = first.cli("scale", "e2e-restart", "--replicas", "4")
        assert scaled.returncode == 0, scaled.stderr
        status = wait_until(
            lambda: (s := first.status("e2e-restart")).get("readyDevices") == 4 and s,
            timeout=60,
            what="4 ready devices after the user's scale",
        )
        devices = sorted(status["deviceIds"])
        before = first.stats()
    finally:
        stop_stack(first)
    assert first.process.returncode == 0, first.out.read_text()
    assert (data_dir / "emulator.sqlite").is_file()

    second = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-2.out", "--apply", example)
    try:
        banner = second.out.read_text()
        assert f"Manifests:        {example} not applied: {data_dir} already existed" in banner
        assert "devicepool/e2e-restart" not in banner
        assert second.stats()["devices"] == before["devices"]
        status = wait_until(
            lambda: (s := second.status("e2e-restart")).get("readyDevices") == 4 and s,
            timeout=30,
            what="the pool to report its 4 devices after the restart",
        )
        # The user's scale stands: the example was not applied again.
        assert status["desiredReplicas"] == 4 and status["observedGeneration"] == 2
        assert sorted(status["deviceIds"]) == devices
        time.sleep(2 * 2)  # two more resyncs: nothing rented, nothing replaced
        after = second.stats()
        assert after["devices"]["byPool"] == {"e2e-restart": 4}
        assert after["creates"] == before["creates"]
        assert after["terminations"] == before["terminations"]
        assert after["deviceHoursBilled"] > before["deviceHoursBilled"]
        deleted = second.cli("delete", "e2e-restart", "--wait", "--timeout", "60")
        assert deleted.returncode == 0, deleted.stderr
        assert second.stats()["devices"]["live"] == 0
    finally:
        stop_stack(second)
    assert second.process.returncode == 0, second.out.read_text()
