"""The team's cloud phones: records, their power lifecycle, groups and tags.

Documented: a phone is created shut down (`phone/addNew`); `phone/start` boots it
asynchronously (status 1 starting, then 0 started); `phone/status` reads 0 started,
1 starting, 2 shut down, 3 expired; with `energySavingMode` the provider shuts a phone down
after 30 minutes of inactivity; groups and tags named at creation are created if missing.
Our choices where the docs are silent: a boot takes `boot_seconds`; a stop is immediate;
"inactivity" is time since the phone last booted or was touched by a call that works on it
(restart, ADB, an update) or by the control plane; a phone under remote control or running a
task is never idle. Phones are listed in creation order.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# `phone/status` and `phone/list` codes.
STARTED, STARTING, SHUT_DOWN, EXPIRED = 0, 1, 2, 3


@dataclass
class Phone:
    id: str
    serial_no: int
    name: str
    mobile_type: str
    region: str
    charge_mode: int
    created_at: float
    remark: str = ""
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    proxy: dict[str, Any] | None = None
    equipment: dict[str, Any] = field(default_factory=dict)
    status: int = SHUT_DOWN
    boot_done_at: float = 0.0
    energy_saving: bool = False
    last_active: float = 0.0
    running_since: float | None = None
    sessions: list[tuple[float, float]] = field(default_factory=list)
    # How the last stop came: "api", "idle" (energySavingMode) or "provider" (control plane).
    stopped_by: str | None = None
    task_running: bool = False
    remote: bool = False
    adb_open: bool = False
    adb_ready_at: float = 0.0
    adb_password: str = ""
    # A monthly-rental phone's rental, charged once when it was created.
    rental: float = 0.0

    @property
    def on(self) -> bool:
        """Started or starting: what the provider bills and counts as running."""
        return self.status in (STARTED, STARTING)

    def intervals(self, now: float) -> list[tuple[float, float]]:
        found = list(self.sessions)
        if self.running_since is not None:
            found.append((self.running_since, now))
        return found

    def secrets(self) -> list[str]:
        found = [self.adb_password] if self.adb_password else []
        if self.proxy and self.proxy.get("password"):
            found.append(self.proxy["password"])
        return found


class PhoneStore:
    """Every phone of the team, the groups and tags, and the lifecycle counters."""

    def __init__(self, rng: random.Random, *, boot_seconds: float, idle_seconds: float) -> None:
        self.rng = rng
        self.boot_seconds = boot_seconds
        self.idle_seconds = idle_seconds
        self.phones: dict[str, Phone] = {}
        self.groups: dict[str, str] = {}  # name -> id
        self.tags: dict[str, str] = {}  # name -> id
        self.serial = 0
        # created, starts, stops, autoStops, providerStops, deleted, restarts, newIdentities
        self.counters: Counter[str] = Counter()
        # Phones gone, kept for the bill (deleted phones were billed while they ran).
        self.gone: list[Phone] = []

    def new_id(self) -> str:
        while True:
            found = str(self.rng.randrange(10**17, 10**18))
            if found not in self.phones:
                return found

    def group_id(self, name: str) -> str:
        return self.groups.setdefault(name, self.new_id())

    def tag_id(self, name: str) -> str:
        return self.tags.setdefault(name, self.new_id())

    def group_named(self, group_id: str) -> str | None:
        return next((n for n, i in self.groups.items() if i == group_id), None)

    def tag_named(self, tag_id: str) -> str | None:
        return next((n for n, i in self.tags.items() if i == tag_id), None)

    def add(self, phone: Phone) -> Phone:
        self.serial += 1
        phone.serial_no = self.serial
        if phone.group:
            self.group_id(phone.group)
        for tag in phone.tags:
            self.tag_id(tag)
        phone.equipment = self.equipment(phone.mobile_type)
        self.phones[phone.id] = phone
        self.counters["created"] += 1
        return phone

    def equipment(self, mobile_type: str) -> dict[str, Any]:
        rng = self.rng

        def mac() -> str:
            return ":".join(f"{rng.randrange(256):02X}" for _ in range(6))

        return {
            "countryName": "Singapore",
            "phoneNumber": f"+65{rng.randrange(80000000, 99999999)}",
            "enableSim": 1,
            "imei": str(rng.randrange(10**14, 10**15)),
            "osVersion": mobile_type.replace("Android ", "Android ") + ".0",
            "wifiBssid": mac(),
            "mac": mac(),
            "bluetoothMac": mac(),
            "timeZone": "Asia/Singapore",
            "deviceBrand": "samsung",
            "deviceModel": "Galaxy S23",
        }

    # ------------------------------------------------------------ power

    def settle(self, phone: Phone, now: float) -> Phone:
        """Bring `phone` up to `now`: a boot that ended, an idle phone the provider stopped."""
        if phone.status == STARTING and phone.boot_done_at <= now:
            phone.status = STARTED
            phone.last_active = max(phone.last_active, phone.boot_done_at)
        if (
            phone.status == STARTED
            and phone.energy_saving
            and not phone.remote
            and not phone.task_running
        ):
            idle_at = phone.last_active + self.idle_seconds
            if idle_at <= now:
                self.stop(phone, idle_at, by="idle")
        return phone

    def settle_all(self, now: float) -> list[Phone]:
        return [self.settle(p, now) for p in self.phones.values()]

    def start(self, phone: Phone, now: float, *, energy_saving: bool) -> None:
        phone.status = STARTING
        phone.boot_done_at = now + self.boot_seconds
        phone.energy_saving = energy_saving
        phone.last_active = now
        phone.running_since = now
        phone.stopped_by = None
        self.counters["starts"] += 1
        self.settle(phone, now)

    def restart(self, phone: Phone, now: float) -> None:
        phone.status = STARTING
        phone.boot_done_at = now + self.boot_seconds
        phone.last_active = now
        phone.adb_open = False
        self.counters["restarts"] += 1
        self.settle(phone, now)

    def stop(self, phone: Phone, at: float, *, by: str) -> None:
        if phone.running_since is not None:
            phone.sessions.append((phone.running_since, at))
        phone.running_since = None
        phone.status = SHUT_DOWN
        phone.stopped_by = by
        phone.adb_open = False
        phone.adb_password = ""
        self.counters[{"api": "stops", "idle": "autoStops", "provider": "providerStops"}[by]] += 1

    def touch(self, phone: Phone, now: float) -> None:
        phone.last_active = max(phone.last_active, now)

    def delete(self, phone: Phone) -> None:
        del self.phones[phone.id]
        self.gone.append(phone)
        self.counters["deleted"] += 1

    def duplicates(self) -> int:
        """Names held by more than one phone, counted once per extra phone."""
        names = Counter(p.name for p in self.phones.values())
        return sum(n - 1 for n in names.values() if n > 1)
