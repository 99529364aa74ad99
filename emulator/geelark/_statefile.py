"""The team on disk (`--state FILE`): started again on the file, the emulator is the same team.

One JSON document, written after every call (write, then rename: a killed process loses at
most the call it was answering) and when the emulator closes. It keeps the phones (deleted
ones too, for the bill), groups and tags, counters, the day's quotas, the locks and the request
counters, the random streams, and the clock, which runs on by the wall time the emulator was
down (a phone left running was billed meanwhile, as a real one is). Not kept: the current
request windows (they start empty, our choice) and the faults (this process's). One process
at a time: the file's lock (`flock` on FILE.lock) is held while the emulator runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from devicepool.emulator._base import rng_state
from devicepool.emulator._clock import clock_record
from devicepool.emulator.geelark._phones import Phone

if TYPE_CHECKING:
    from devicepool.emulator.geelark.state import GeeLarkEmulator

KIND = "devicepool-geelark-emulator"
VERSION = 1


class StateFileError(Exception):
    """The state file cannot be used: another emulator holds it, or it is not ours."""


class StateFile:
    """This process's hold on a state file: `load` once, `save` after each call, `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        lock_path = path.with_name(path.name + ".lock")
        try:
            self._lock: TextIO | None = lock_path.open("a")
        except OSError as error:
            raise StateFileError(f"cannot open {lock_path}: {error.strerror}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            self._lock = None
            raise StateFileError(f"another emulator is running on {path}") from None

    def load(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise StateFileError(f"cannot read {self.path}: {error}") from None
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            raise StateFileError(f"{self.path} is not a GeeLark emulator's state file")
        if doc.get("version") != VERSION:
            raise StateFileError(f"{self.path} has version {doc.get('version')}, not {VERSION}")
        return doc

    def save(self, doc: dict[str, Any]) -> None:
        # It holds every phone's proxy and ADB passwords: made readable by the owner alone,
        # never for a moment by the umask's mode (a scratch file left wider: narrowed first).
        scratch = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(json.dumps(doc))
        os.replace(scratch, self.path)

    def close(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError, ValueError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def snapshot(em: GeeLarkEmulator) -> dict[str, Any]:
    store, windows, quotas = em.phones, em.windows, em.quotas
    return {
        "kind": KIND,
        "version": VERSION,
        "clock": clock_record(em.clock),
        "phones": [dataclasses.asdict(p) for p in store.phones.values()],
        "gone": [dataclasses.asdict(p) for p in store.gone],
        "groups": store.groups,
        "tags": store.tags,
        "serial": store.serial,
        "counters": dict(store.counters),
        "rng": {
            "phones": store.rng.getstate(),
            "faults": em.dice.rng.getstate(),
        },
        "quotas": {
            "day": quotas.day,
            "creates": quotas.creates,
            "opens": quotas.opens,
            "refused": dict(quotas.refused),
        },
        "requests": {
            "lockedUntil": windows.locked_until,
            **{name: getattr(windows, name) for name in _WINDOW_COUNTERS},
        },
        "unknownPaths": em.unknown_paths,
    }


_WINDOW_COUNTERS = (
    "accepted",
    "rate_limited",
    "locked",
    "locks",
    "concurrency_refused",
    "max_per_minute",
    "max_per_hour",
)


def _phone(saved: dict[str, Any]) -> Phone:
    phone = Phone(**saved)
    phone.sessions = [(start, end) for start, end in saved["sessions"]]
    return phone


def restore(em: GeeLarkEmulator, doc: dict[str, Any]) -> None:
    store, windows, quotas = em.phones, em.windows, em.quotas
    store.phones = {p["id"]: _phone(p) for p in doc["phones"]}
    store.gone = [_phone(p) for p in doc["gone"]]
    store.groups, store.tags, store.serial = dict(doc["groups"]), dict(doc["tags"]), doc["serial"]
    store.counters.update(doc["counters"])
    store.rng.setstate(rng_state(doc["rng"]["phones"]))
    em.dice.rng.setstate(rng_state(doc["rng"]["faults"]))
    quotas.day, quotas.creates, quotas.opens = (
        doc["quotas"]["day"],
        doc["quotas"]["creates"],
        doc["quotas"]["opens"],
    )
    quotas.refused.update(doc["quotas"]["refused"])
    windows.locked_until = dict(doc["requests"]["lockedUntil"])
    for name in _WINDOW_COUNTERS:
        setattr(windows, name, doc["requests"][name])
    em.unknown_paths = doc["unknownPaths"]
