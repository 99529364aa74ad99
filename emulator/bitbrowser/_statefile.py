"""The account on disk (`--state FILE`): one JSON document, rewritten after every call.

With a state file, an emulator stopped and started again is the same account:
profiles, groups, phones (their power, timers and billing), counters, the
seeded id streams and the clock (the time it was down passes on it, so powered
phones stay billed, as they would in the vendor's cloud). Not kept: browser
processes (a restarted desktop client has no browser open), faults and the
nodes' up/down switches. The file is replaced atomically (write, then rename),
so a killed emulator loses at most the call it was answering; a lock file
beside it keeps a second emulator off it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any, TextIO

KIND = "devicepool-bitbrowser-emulator"
VERSION = 1


class StateFileError(Exception):
    """The state file cannot be used: held by another emulator, not ours, unreadable."""


class StateFile:
    """A held state file: `load` once, `save` after each change, `close` to let it go."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: TextIO | None = None
        lock_path = path.with_name(path.name + ".lock")
        try:
            lock = lock_path.open("a")
        except OSError as error:
            raise StateFileError(f"cannot open {lock_path}: {error.strerror}") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise StateFileError(f"{path} is used by another emulator") from None
        self._lock = lock

    def load(self) -> dict[str, Any] | None:
        """The saved document, or None for a file not written yet."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StateFileError(f"cannot read {self.path}: {error.strerror}") from None
        try:
            document = json.loads(raw)
        except json.JSONDecodeError:
            raise StateFileError(f"{self.path} is not a BitBrowser emulator state file") from None
        if not isinstance(document, dict) or document.get("kind") != KIND:
            raise StateFileError(f"{self.path} is not a BitBrowser emulator state file")
        if document.get("version") != VERSION:
            raise StateFileError(
                f"{self.path} has state version {document.get('version')!r}; this emulator "
                f"reads version {VERSION}"
            )
        return document

    def save(self, state: dict[str, Any]) -> None:
        document = {"kind": KIND, "version": VERSION, **state}
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, self.path)

    def close(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
