"""The device store: device records, their lifecycle on the virtual clock, and their JSON shapes.

`DeviceStore` owns every device and every region's status. Lifecycles are
timers on the virtual clock that are settled lazily whenever a device is read,
so `advanceSeconds` takes effect at once and no background task is needed.

A device's `status` field holds its lifecycle status and is never `offline`:
`offline` is an overlay (control-plane switch or region down) over
provisioning / ready / busy / rebooting, which is why "online" and "region up"
bring a device back exactly as it was.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from devicepool.emulator._bodies import CreateSpec
from devicepool.emulator._clock import VirtualClock
from devicepool.emulator._problems import INVALID_STATE, NOT_FOUND, ProblemError, invalid

PLATFORMS = ("android", "ios")
STATUSES = (
    "provisioning",
    "ready",
    "busy",
    "offline",
    "rebooting",
    "terminating",
    "terminated",
    "failed",
)
REGION_STATUSES = ("up", "degraded", "down")
DEFAULT_REGIONS = ("us-west", "us-east", "eu-west", "eu-central", "ap-southeast")

REASON_PROVISION_FAILED = "provision_failed"
REASON_REGION_DOWN = "region_down"
REASON_UNREACHABLE = "unreachable"
REASON_DELETED = "deleted"

# Lifecycle statuses under which a device can be shown `offline`.
_CAN_GO_OFFLINE = frozenset({"provisioning", "ready", "busy", "rebooting"})
_REBOOTABLE = frozenset({"ready", "busy"})


@dataclass
class Device:
    id: str
    account: str
    platform: str
    region: str
    os_version: str
    name: str
    labels: dict[str, str]
    proxy: dict[str, Any] | None  # never holds the password
    created_at: float
    status: str  # lifecycle status; `offline` is computed, see the module docstring
    updated_at: float
    due_at: float | None  # when the current timed status (provisioning, ...) ends
    will_fail: bool = False
    reason: str | None = None
    session_active: bool = False
    last_activity_at: float | None = None
    manually_offline: bool = False
    terminated_at: float | None = None


class DeviceStore:
    """Every device and region; lookups settle a device's timed transition first."""

    def __init__(self, clock: VirtualClock, id_rng: random.Random) -> None:
        self.clock = clock
        self.devices: dict[str, Device] = {}
        self.regions: dict[str, str] = dict.fromkeys(DEFAULT_REGIONS, "up")
        self._id_rng = id_rng

    # ------------------------------------------------------------- lookups

    def owned(self, account: str) -> list[Device]:
        return [d for d in self.devices.values() if d.account == account]

    def owned_device(self, account: str, device_id: str) -> Device:
        device = self.devices.get(device_id)
        if device is None or device.account != account:
            # Another account's device is indistinguishable from a missing one.
            raise ProblemError(404, NOT_FOUND, f"device {device_id!r} not found")
        return self.settle(device)

    def any_device(self, device_id: str) -> Device:
        device = self.devices.get(device_id)
        if device is None:
            raise ProblemError(404, NOT_FOUND, f"device {device_id!r} not found")
        return self.settle(device)

    def live_count(self, account: str) -> int:
        return sum(1 for d in self.settled(self.owned(account)) if d.status != "terminated")

    def settled(self, devices: Iterable[Device]) -> list[Device]:
        return [self.settle(d) for d in devices]

    # ----------------------------------------------------------- lifecycle

    def add(
        self,
        *,
        account: str,
        platform: str,
        spec: CreateSpec,
        now: float,
        provision_seconds: float | None,
        will_fail: bool,
    ) -> Device:
        """Store a new `provisioning` device; `provision_seconds=None` stalls it forever."""
        device = Device(
            id=self._new_id(),
            account=account,
            platform=platform,
            region=spec.region,
            os_version=spec.os_version,
            name=spec.name,
            labels=spec.labels,
            proxy=spec.proxy,
            created_at=now,
            status="provisioning",
            updated_at=now,
            due_at=None if provision_seconds is None else now + provision_seconds,
            will_fail=will_fail,
        )
        self.devices[device.id] = device
        return device

    def settle(self, device: Device) -> Device:
        """Apply the device's timed transition if the virtual clock has passed it."""
        if device.due_at is None or device.due_at > self.clock.now():
            return device
        at = device.due_at

        def finish() -> None:
            if device.status == "provisioning":
                device.status = "failed" if device.will_fail else "ready"
                if device.will_fail:
                    device.reason = REASON_PROVISION_FAILED
            elif device.status == "rebooting":
                device.status = "ready"
            elif device.status == "terminating":
                device.status = "terminated"
                device.terminated_at = at
            device.due_at = None

        self._switch(device, finish, at=at)
        return device

    def reboot(self, device: Device, *, seconds: float) -> None:
        if device.status not in _REBOOTABLE:
            raise ProblemError(
                409,
                INVALID_STATE,
                f"device {device.id} is {self.effective_status(device)}; only ready, busy "
                "or offline devices can be rebooted",
            )
        now = self.clock.now()
        device.status = "rebooting"
        device.due_at = now + seconds
        device.session_active = False
        device.manually_offline = False  # a reboot is what brings a wedged device back
        device.updated_at = now

    def terminate(self, device: Device, *, seconds: float) -> bool:
        """Start terminating the device; False if it already is (a delete is idempotent)."""
        if device.status in ("terminating", "terminated"):
            return False
        now = self.clock.now()
        device.status = "terminating"
        device.reason = REASON_DELETED
        device.due_at = now + seconds
        device.session_active = False
        device.manually_offline = False
        device.updated_at = now
        self.settle(device)  # the termination may take 0 seconds
        return True

    def set_session(self, device: Device, active: bool) -> None:
        status = self.effective_status(device)
        if status not in ("ready", "busy"):
            raise ProblemError(
                409, INVALID_STATE, f"device {device.id} is {status}; sessions need ready or busy"
            )
        now = self.clock.now()
        new_status = "busy" if active else "ready"
        if new_status != device.status:
            device.updated_at = now
        device.status = new_status
        device.session_active = active
        device.last_activity_at = now

    def set_offline(self, device: Device, offline: bool) -> None:
        if device.status not in _CAN_GO_OFFLINE:
            raise ProblemError(
                409,
                INVALID_STATE,
                f"device {device.id} is {device.status} and cannot go {'off' if offline else 'on'}line",
            )
        self._switch(device, lambda: setattr(device, "manually_offline", offline))

    def set_region(self, name: str, status: Any) -> dict[str, str]:
        if status not in REGION_STATUSES:
            raise invalid(f"region status must be one of {list(REGION_STATUSES)}")
        affected = [d for d in self.settled(self.devices.values()) if d.region == name]
        before = {d.id: self.effective_status(d) for d in affected}
        self.regions[name] = status
        now = self.clock.now()
        for device in affected:
            if self.effective_status(device) != before[device.id]:
                device.updated_at = now
        return {"name": name, "status": status}

    # -------------------------------------------------------- what clients see

    def effective_status(self, device: Device) -> str:
        if device.status in _CAN_GO_OFFLINE and (
            device.manually_offline or self.regions.get(device.region) == "down"
        ):
            return "offline"
        return device.status

    def status_json(self, device: Device) -> dict[str, Any]:
        iso = self.clock.isoformat
        return {
            "id": device.id,
            "status": self.effective_status(device),
            "reason": self._effective_reason(device),
            "sessionActive": device.session_active,
            "lastActivityAt": None
            if device.last_activity_at is None
            else iso(device.last_activity_at),
            "updatedAt": iso(device.updated_at),
        }

    def device_json(self, device: Device) -> dict[str, Any]:
        status = self.status_json(device)
        return {
            "id": device.id,
            "platform": device.platform,
            "region": device.region,
            "osVersion": device.os_version,
            "name": device.name,
            "labels": dict(device.labels),
            "status": status["status"],
            "reason": status["reason"],
            "sessionActive": status["sessionActive"],
            "lastActivityAt": status["lastActivityAt"],
            "createdAt": self.clock.isoformat(device.created_at),
            "updatedAt": status["updatedAt"],
            "proxy": None if device.proxy is None else dict(device.proxy),
        }

    def connect_json(self, device: Device) -> dict[str, Any] | None:
        """The detail's `connect` block: the device's ADB login once it is up (`ready`,
        `busy`), else None. The password is derived from the id (the same after a restart
        on a state file), never listed: only `GET /devices/{id}` answers it."""
        if self.effective_status(device) not in ("ready", "busy"):
            return None
        digest = hashlib.sha256(f"devicepool-emulator-adb:{device.id}".encode()).hexdigest()
        port = 20000 + int(digest[:8], 16) % 40000
        return {"adb": {"ip": "10.20.0.1", "port": port, "code": digest[8:26]}}

    # ------------------------------------------------------------ internal

    def _new_id(self) -> str:
        while True:
            device_id = f"dev-{self._id_rng.getrandbits(64):016x}"
            if device_id not in self.devices:
                return device_id

    def _switch(
        self, device: Device, change: Callable[[], None], *, at: float | None = None
    ) -> None:
        """Apply `change`; `updatedAt` moves only when the status a client sees changes.

        So a device that finishes provisioning while offline keeps the `updatedAt`
        of the moment it went offline, which is what "offline for how long" needs.
        """
        before = self.effective_status(device)
        change()
        if self.effective_status(device) != before:
            device.updated_at = self.clock.now() if at is None else at

    def _effective_reason(self, device: Device) -> str | None:
        if self.effective_status(device) == "offline":
            return (
                REASON_REGION_DOWN
                if self.regions.get(device.region) == "down"
                else REASON_UNREACHABLE
            )
        return device.reason
