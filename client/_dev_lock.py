"""One `devicepool dev` per data dir: a lock on ``<data-dir>/lock``, held for the stack's life.

Two stacks on one data dir would share its Temporal SQLite file (the second
died with a truncated ``SQLITE_BUSY``) and its ``worker.yaml`` (the second
rewrote the running stack's). `DataDirLock.acquire` takes ``fcntl.flock`` on
the lock file and writes who holds it (pid, ports); a second stack finds it
taken and refuses with one line naming the first, before it has changed
anything. The kernel drops a flock when its holder's process ends, however it
ends (even SIGKILL), so a lock file left behind never blocks the next stack.
The descriptor is not inherited by the stack's children (PEP 446), so a child
left running cannot hold the lock either.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from devicepool.client.errors import DevicePoolError

__all__ = ["LOCK_FILE", "DataDirLock"]

LOCK_FILE = "lock"


class DataDirLock:
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
