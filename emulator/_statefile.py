"""The emulator's state on disk (`devicepool emulator --state FILE`): one SQLite file.

With a state file, an emulator stopped and started again is the same provider
(docs/providers.md says what carries over); without one, `InMemory` stands in.
Tables: `meta` (schema version, the clock), `devices` (terminated ones too:
they were billed), `regions`, `answers` (each accepted create's answer by
account and Idempotency-Key), `creates` (the rate window), `counters` (stats).

The facade (`state.Emulator`) commits once per request, in one transaction, so
a killed emulator loses at most the request it was answering. What a device
does on the clock alone is not written: a restart settles it again from the
stored timers. Every commit records the virtual time, the wall time and the
speed, so the clock runs on through a restart (never backwards). One emulator
at a time: the file is held in SQLite's exclusive locking mode.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

from devicepool.emulator._clock import VirtualClock
from devicepool.emulator._devices import Device, DeviceStore
from devicepool.emulator._idempotency import Answer, IdempotencyCache
from devicepool.emulator._ratelimit import RateWindows
from devicepool.emulator._stats import Counters

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS devices (
    id TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    platform TEXT NOT NULL,
    region TEXT NOT NULL,
    os_version TEXT NOT NULL,
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    proxy TEXT,
    created_at REAL NOT NULL,
    status TEXT NOT NULL,
    updated_at REAL NOT NULL,
    due_at REAL,
    will_fail INTEGER NOT NULL,
    reason TEXT,
    session_active INTEGER NOT NULL,
    last_activity_at REAL,
    manually_offline INTEGER NOT NULL,
    terminated_at REAL
);
CREATE TABLE IF NOT EXISTS regions (name TEXT PRIMARY KEY, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
    account TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    headers TEXT NOT NULL,
    PRIMARY KEY (account, key)
);
CREATE TABLE IF NOT EXISTS creates (account TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, key)
);
"""
_DATA_TABLES = ("devices", "regions", "answers", "creates", "counters")
_DEVICE_COLUMNS = tuple(f.name for f in fields(Device))
_JSON_COLUMNS = frozenset({"labels", "proxy"})
_BOOL_COLUMNS = frozenset({"will_fail", "session_active", "manually_offline"})
_UPSERT_DEVICE = (
    f"INSERT INTO devices ({', '.join(_DEVICE_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _DEVICE_COLUMNS)}) ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _DEVICE_COLUMNS[1:])
)


class StateFileError(Exception):
    """The state file cannot be used: not an emulator's SQLite file, a newer schema, in use."""


def wall_time() -> float:
    """Seconds since the Unix epoch; a module function so that tests can stand in a downtime."""
    return time.time()


class InMemory:
    """No state file: everything stays in memory, nothing is written (each method does nothing)."""

    def load_clock(self, *, speed: float) -> VirtualClock:
        return VirtualClock(speed=speed)

    def load_into(
        self,
        *,
        store: DeviceStore,
        idempotency: IdempotencyCache,
        rates: RateWindows,
        counters: Counters,
    ) -> None:
        """Fill freshly made parts with the saved state."""

    def stage_device(self, device: Device) -> None:
        """Write a device that changed, at the next commit."""

    def stage_create(
        self, *, account: str, key: str, fingerprint: str, answer: Answer, at: float
    ) -> None:
        """Write an accepted create (its answer and its place in the window), at the next commit."""

    def wipe(self) -> None:
        """Forget everything saved (`/_emulator/reset`), at the next commit."""

    def commit(self, *, counters: Counters, regions: dict[str, str], clock: VirtualClock) -> None:
        """Write what was staged, the counters and regions that changed, and the clock."""

    def close(self) -> None:
        """Release the file."""


def open_state(path: Path | None) -> InMemory:
    """The state file at `path` (created if missing), or `InMemory` when there is none."""
    return InMemory() if path is None else StateFile(path)


class StateFile(InMemory):
    """An emulator's state in the SQLite file at `path`, held by this emulator alone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._counters_written: dict[tuple[str, str], int] = {}
        self._regions_written: dict[str, str] = {}
        try:
            self._db = sqlite3.connect(path, timeout=0, check_same_thread=False)
        except sqlite3.Error as error:
            raise StateFileError(f"cannot open the state file {path}: {error}") from None
        try:
            self._prepare()
        except sqlite3.Error as error:
            self._db.close()
            in_use = "locked" in str(error)
            raise StateFileError(
                f"the state file {path} is in use by another emulator"
                if in_use
                else f"cannot use {path} as an emulator state file: {error}"
            ) from None
        except StateFileError:
            self._db.close()
            raise

    def _prepare(self) -> None:
        db = self._db
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise StateFileError(f"{self.path} is a SQLite file but not an emulator state file")
        # Exclusive from the first write on: a second emulator on this file fails at once.
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("PRAGMA journal_mode = WAL")
        # A commit survives the emulator being killed; only a power cut may lose the last ones.
        db.execute("PRAGMA synchronous = NORMAL")
        db.executescript(_SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is not None and row[0] != SCHEMA_VERSION:
            raise StateFileError(
                f"{self.path} has state schema {row[0]}; this emulator reads {SCHEMA_VERSION}"
            )
        columns = tuple(row[1] for row in db.execute("PRAGMA table_info(devices)"))
        if columns != _DEVICE_COLUMNS:
            raise StateFileError(f"{self.path} stores devices with other fields: {columns}")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        db.commit()

    # ------------------------------------------------------------ loading

    def load_clock(self, *, speed: float) -> VirtualClock:
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if "virtualSeconds" not in meta:
            return VirtualClock(speed=speed)
        downtime = max(0.0, wall_time() - float(meta["wallSeconds"]))
        return VirtualClock(
            speed=speed,
            start=float(meta["virtualSeconds"]) + downtime * float(meta["speed"]),
            epoch=datetime.fromisoformat(meta["epoch"]),
        )

    def load_into(
        self,
        *,
        store: DeviceStore,
        idempotency: IdempotencyCache,
        rates: RateWindows,
        counters: Counters,
    ) -> None:
        db = self._db
        for row in db.execute(f"SELECT {', '.join(_DEVICE_COLUMNS)} FROM devices ORDER BY rowid"):
            device = _device_from_row(row)
            store.devices[device.id] = device
        store.regions.update(db.execute("SELECT name, status FROM regions ORDER BY rowid"))
        self._regions_written = dict(store.regions)
        for account, key, print_, status, body, headers in db.execute(
            "SELECT account, key, fingerprint, status, body, headers FROM answers ORDER BY rowid"
        ):
            idempotency.remember(
                account, key, print_, Answer(status, json.loads(body), json.loads(headers))
            )
        times: dict[str, list[float]] = {}
        for account, at in db.execute("SELECT account, at FROM creates ORDER BY rowid"):
            times.setdefault(account, []).append(at)
        for account, account_times in times.items():
            rates.restore(account, account_times)
        for name, key, value in db.execute("SELECT name, key, value FROM counters"):
            _set_counter(counters, name, key, value)
        self._counters_written = _counter_rows(counters)

    # ------------------------------------------------------------ writing

    def stage_device(self, device: Device) -> None:
        self._db.execute(_UPSERT_DEVICE, _device_row(device))

    def stage_create(
        self, *, account: str, key: str, fingerprint: str, answer: Answer, at: float
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?)",
            (
                account,
                key,
                fingerprint,
                answer.status,
                json.dumps(answer.body),
                json.dumps(answer.headers),
            ),
        )
        self._db.execute("INSERT INTO creates VALUES (?, ?)", (account, at))

    def wipe(self) -> None:
        for table in _DATA_TABLES:
            self._db.execute(f"DELETE FROM {table}")  # table names from a constant
        self._counters_written = {}
        self._regions_written = {}

    def commit(self, *, counters: Counters, regions: dict[str, str], clock: VirtualClock) -> None:
        db = self._db
        rows = _counter_rows(counters)
        db.executemany(
            "INSERT OR REPLACE INTO counters VALUES (?, ?, ?)",
            [(*nk, v) for nk, v in rows.items() if self._counters_written.get(nk) != v],
        )
        self._counters_written = rows
        db.executemany(
            "INSERT INTO regions VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET status = excluded.status",
            [(n, s) for n, s in regions.items() if self._regions_written.get(n) != s],
        )
        self._regions_written = dict(regions)
        clock_rows = {
            "epoch": clock.epoch.isoformat(),
            "virtualSeconds": clock.now(),
            "wallSeconds": wall_time(),
            "speed": clock.speed,
        }
        db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", clock_rows.items())
        db.commit()

    def close(self) -> None:
        self._db.close()  # closing twice is harmless


# ---------------------------------------------------------------- rows


def _device_row(device: Device) -> tuple[Any, ...]:
    values = []
    for column in _DEVICE_COLUMNS:
        value = getattr(device, column)
        values.append(json.dumps(value) if column in _JSON_COLUMNS else value)
    return tuple(values)


def _device_from_row(row: tuple[Any, ...]) -> Device:
    values: dict[str, Any] = {}
    for column, value in zip(_DEVICE_COLUMNS, row, strict=True):
        if column in _JSON_COLUMNS:
            value = json.loads(value)
        elif column in _BOOL_COLUMNS:
            value = bool(value)
        values[column] = value
    return Device(**values)


def _counter_rows(counters: Counters) -> dict[tuple[str, str], int]:
    rows: dict[tuple[str, str], int] = {}
    for field in fields(counters):
        value = getattr(counters, field.name)
        if isinstance(value, Counter):
            rows.update({(field.name, key): count for key, count in value.items()})
        else:
            rows[(field.name, "")] = value
    return rows


def _set_counter(counters: Counters, name: str, key: str, value: int) -> None:
    current = getattr(counters, name, None)
    if isinstance(current, Counter):
        current[key] = value
    elif isinstance(current, int):
        setattr(counters, name, value)
