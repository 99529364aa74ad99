"""Browser processes: which node has a profile open, in what state, with which pid.

A profile is `closed` (no record here), `opening`, `open` or `closing`. The
account tracks the state (the vendor's cloud knows a profile is open, so
another node cannot open it too); the process lives on one node, whose
`/browser/pids*` calls are the only ones that see it.

`close` answers at once and leaves the process alive for the linger time:
`/browser/pids/alive` still shows it until it exits. A killed process (the
control plane) is dead at once; by default the client notices and the profile
is closed; a *stuck* kill leaves it `closing` with a dead pid, and so does an
open that times out (`opening`): both need `/browser/closing/reset`.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from dataclasses import dataclass
from typing import Any, Literal

State = Literal["opening", "open", "closing"]


@dataclass
class Process:
    profile_id: str
    node: str
    state: State
    pid: int
    port: int
    core_version: str
    alive: bool = True
    # `closing` ends at this virtual time (None: stuck until /browser/closing/reset).
    exits_at: float | None = None
    ws_path: str = ""

    def open_json(self, profile: dict[str, Any], host: str = "127.0.0.1") -> dict[str, Any]:
        """What `/browser/open` answers: `http` is host:port, without a scheme."""
        return {
            "ws": f"ws://{host}:{self.port}/devtools/browser/{self.ws_path}",
            "http": f"{host}:{self.port}",
            "coreVersion": self.core_version,
            "driver": f"C:\\BitBrowser\\chromedriver\\{self.core_version}\\chromedriver.exe",
            "seq": profile["seq"],
            "name": profile["name"],
            "remark": profile["remark"],
            "groupId": profile["groupId"],
            "pid": self.pid,
        }


class Processes:
    """Every profile's process record, settled against the clock when read."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._by_profile: dict[str, Process] = {}
        self._used_ports: set[int] = set()

    def get(self, profile_id: str, now: float) -> Process | None:
        process = self._by_profile.get(profile_id)
        if process is not None and process.state == "closing" and process.exits_at is not None:
            if now >= process.exits_at:
                self.forget(profile_id)
                return None
        return process

    def settled(self, now: float) -> list[Process]:
        return [p for pid in list(self._by_profile) if (p := self.get(pid, now)) is not None]

    def start_opening(self, profile_id: str, node: str, core_version: str) -> Process:
        port = self._rng.randrange(50_000, 60_000)
        while port in self._used_ports:
            port = self._rng.randrange(50_000, 60_000)
        self._used_ports.add(port)
        process = Process(
            profile_id=profile_id,
            node=node,
            state="opening",
            pid=self._rng.randrange(1_000, 99_999),
            port=port,
            core_version=core_version,
            ws_path=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
        )
        self._by_profile[profile_id] = process
        return process

    def forget(self, profile_id: str) -> None:
        process = self._by_profile.pop(profile_id, None)
        if process is not None:
            self._used_ports.discard(process.port)

    def on_node(self, node: str, now: float) -> list[Process]:
        return [p for p in self.settled(now) if p.node == node]

    def records(self) -> list[dict[str, Any]]:
        """Every process record, for the account's file (processes of one account share them)."""
        return [
            {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
            for p in self._by_profile.values()
        ]

    def restore(self, records: list[dict[str, Any]]) -> None:
        self._by_profile = {r["profile_id"]: Process(**r) for r in records}
        self._used_ports = {p.port for p in self._by_profile.values()}

    def clear(self) -> None:
        self._by_profile.clear()
        self._used_ports.clear()
