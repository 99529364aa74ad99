"""The account on disk: one JSON document that every emulator process of the account shares.

An account kept on disk is either a state file (`--state FILE`: it outlives
the processes, so an emulator started again on it is the same account) or a
shared store, `<accounts-dir>/<account>.json`, that lives while any process of
the account runs and is removed by the last one out (an account in memory, but
one that separate processes share, as desktop clients logged into one
BitBrowser account list the same profiles).

Every call is one transaction: take the file's lock (`flock` on FILE.lock),
read the document again if another process wrote since (a token in the lock
file says who wrote last), do the call, write the document (replaced
atomically: write, then rename) and a new token, let go. A killed process
loses at most the call it was answering; its locks go with it.

Beside the lock: FILE.members, held shared by every process of the account
(the first one in, who can take it exclusively, starts the account; the last
one out, ditto, removes a shared store), and one FILE.node-NAME per node,
held exclusively by the process serving that node, so that two processes
cannot serve the same node, and so that a node of a process that died is
known to be gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

KIND = "devicepool-bitbrowser-emulator"
VERSION = 1
_TOKEN_BYTES = 64


class StateFileError(Exception):
    """The account's file cannot be used: its node is served elsewhere, not ours, unreadable."""


def _open_lock(path: Path) -> TextIO:
    # Not O_APPEND: the lock file holds the writer's token at offset 0 (pwrite).
    try:
        return os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+")
    except OSError as error:
        raise StateFileError(f"cannot open {path}: {error.strerror}") from None


def _try_lock(lock: TextIO, mode: int) -> bool:
    try:
        fcntl.flock(lock, mode | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _unlock(lock: TextIO) -> None:
    with contextlib.suppress(OSError, ValueError):
        fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()


class StateFile:
    """One process's hold on an account file: `join`, then `begin`/`end` each call, `leave`.

    `persistent`: a state file (kept when the last process leaves); else a
    shared store, removed by the last process out.
    """

    def __init__(self, path: Path, *, persistent: bool = True) -> None:
        self.path = path
        self.persistent = persistent
        self._lock: TextIO | None = None
        self._members: TextIO | None = None
        self._nodes: dict[str, TextIO] = {}
        self._token = ""
        self._held = False
        if not persistent:
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as error:
                raise StateFileError(f"cannot create {path.parent}: {error.strerror}") from None
        self._lock = _open_lock(self._beside("lock"))

    def _beside(self, suffix: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{suffix}")

    def _node_lock_path(self, node: str) -> Path:
        return self._beside("node-" + quote(node, safe=""))

    # ------------------------------------------------------------ membership

    def join(self, nodes: list[str]) -> tuple[dict[str, Any] | None, bool]:
        """Serve `nodes` of the account: (the document, or None for a new account; whether this
        process is the first one in). Raises StateFileError if another process serves one of
        them. Returns with the file's lock held: write the account, then `end`."""
        self.begin()
        try:
            members = _open_lock(self._beside("members"))
            first = _try_lock(members, fcntl.LOCK_EX)
            # Joins and leaves test the members lock only under the file's lock: the
            # change from exclusive to shared needs no atomicity.
            fcntl.flock(members, fcntl.LOCK_SH)
            self._members = members
            for node in nodes:
                lock = _open_lock(self._node_lock_path(node))
                if not _try_lock(lock, fcntl.LOCK_EX):
                    lock.close()
                    raise StateFileError(
                        f"node {node!r} of {self.path} is served by another emulator"
                    )
                self._nodes[node] = lock
            document = self.load()
            if first and not self.persistent:
                document = None  # left by a process that died: an account in memory starts anew
            return document, first
        except BaseException:
            self._let_go()
            self.end()
            self._close_lock()
            raise

    def node_alive(self, node: str) -> bool:
        """Whether some process serves `node` (its lock is held); ours count as alive."""
        if node in self._nodes:
            return True
        path = self._node_lock_path(node)
        if not path.exists():
            return False
        lock = _open_lock(path)
        try:
            return not _try_lock(lock, fcntl.LOCK_EX)
        finally:
            _unlock(lock)

    def leave(self) -> None:
        """Stop serving this process's nodes; the last process of a shared store removes it.
        Idempotent."""
        if self._members is None and not self._nodes:
            self._close_lock()
            return
        self.begin()
        try:
            for lock in self._nodes.values():
                _unlock(lock)
            self._nodes.clear()
            last = False
            if self._members is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(self._members, fcntl.LOCK_UN)
                last = _try_lock(self._members, fcntl.LOCK_EX)
                _unlock(self._members)
                self._members = None
            if last and not self.persistent:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
        finally:
            self.end()
            self._close_lock()

    def _let_go(self) -> None:
        for lock in self._nodes.values():
            _unlock(lock)
        self._nodes.clear()
        if self._members is not None:
            _unlock(self._members)
            self._members = None

    def _close_lock(self) -> None:
        if self._lock is not None:
            _unlock(self._lock)
            self._lock = None

    # ------------------------------------------------------------ one call

    @property
    def held(self) -> bool:
        return self._held

    def begin(self) -> bool:
        """Take the file's lock; True if another process wrote since this one last did."""
        assert self._lock is not None, "the account file was let go"
        assert not self._held, "a transaction is already open"
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._held = True
        token = os.pread(self._lock.fileno(), _TOKEN_BYTES, 0).decode(errors="replace")
        return token.strip() != self._token

    def end(self) -> None:
        if self._held and self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._held = False

    def load(self) -> dict[str, Any] | None:
        """The saved document (call between `begin` and `end`), or None for a new file."""
        document = self._read()
        self._token = self._current_token()
        return document

    def _current_token(self) -> str:
        assert self._lock is not None
        return os.pread(self._lock.fileno(), _TOKEN_BYTES, 0).decode(errors="replace").strip()

    def _read(self) -> dict[str, Any] | None:
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
        """Write the document (call between `begin` and `end`) and mark it as this process's."""
        assert self._lock is not None
        document = {"kind": KIND, "version": VERSION, **state}
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        # The token first: a process killed between the two leaves readers on the old
        # document, never a new document they would not read.
        self._token = os.urandom(8).hex()
        os.pwrite(self._lock.fileno(), self._token.encode().ljust(_TOKEN_BYTES), 0)
        os.replace(temporary, self.path)
