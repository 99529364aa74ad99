"""The in-memory BitCloudPhone provider that the emulator's HTTP layer serves.

All state lives in one `Emulator` object (reachable as `app.state.emulator`).
Device lifecycles are timers on the virtual clock that are settled lazily
whenever state is read, so `advanceSeconds` takes effect at once and no
background task is needed. Every method is synchronous: the app calls them
from `async` handlers on one event loop, so each create's check-then-act
(idempotency, quota, rate window) is atomic without locks.

A device's `status` field holds its lifecycle status and is never `offline`:
`offline` is an overlay (control-plane switch or region down) over
provisioning / ready / busy / rebooting, which is why "online" and "region up"
bring a device back exactly as it was.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from devicepool.emulator._clock import VirtualClock
from devicepool.emulator._problems import (
    IDEMPOTENCY_KEY_REUSED,
    INVALID_STATE,
    NOT_FOUND,
    QUOTA_EXCEEDED,
    RATE_LIMITED,
    REGION_UNAVAILABLE,
    UNAUTHENTICATED,
    ProblemError,
    invalid,
)
from devicepool.emulator.config import EmulatorConfig

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
PROXY_TYPES = ("http", "https", "socks4", "socks5")

RATE_WINDOW_SECONDS = 60.0
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
MAX_BATCH_IDS = 100
MAX_IDEMPOTENCY_KEY_LENGTH = 255
DEFAULT_TIMEOUT_SECONDS = 60.0

REASON_PROVISION_FAILED = "provision_failed"
REASON_REGION_DOWN = "region_down"
REASON_UNREACHABLE = "unreachable"
REASON_DELETED = "deleted"

# Lifecycle statuses under which a device can be shown `offline`.
_CAN_GO_OFFLINE = frozenset({"provisioning", "ready", "busy", "rebooting"})
_REBOOTABLE = frozenset({"ready", "busy"})
_FAULT_RATES = (
    "rateLimitRate",
    "serverErrorRate",
    "timeoutRate",
    "provisionFailureRate",
    "provisionStallRate",
)


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


@dataclass
class Faults:
    rate_limit_rate: float = 0.0
    server_error_rate: float = 0.0
    latency_ms: float = 0.0
    timeout_rate: float = 0.0
    provision_failure_rate: float = 0.0
    # A stalled device stays `provisioning` forever (a wedged boot).
    provision_stall_rate: float = 0.0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def to_json(self) -> dict[str, float]:
        return {
            "rateLimitRate": self.rate_limit_rate,
            "serverErrorRate": self.server_error_rate,
            "latencyMs": self.latency_ms,
            "timeoutRate": self.timeout_rate,
            "provisionFailureRate": self.provision_failure_rate,
            "provisionStallRate": self.provision_stall_rate,
            "timeoutSeconds": self.timeout_seconds,
        }


@dataclass
class FaultDecision:
    """What the fault injector does to one public request."""

    latency_seconds: float = 0.0
    reject: ProblemError | None = None
    hang_seconds: float | None = None


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Remembered:
    fingerprint: str
    answer: Answer


@dataclass
class _Counters:
    accepted: int = 0
    rate_limited: int = 0
    idempotent_replays: int = 0
    rejected: int = 0
    terminations: int = 0
    reboots: int = 0
    faults_injected: Counter[str] = field(default_factory=Counter)
    accepted_by_account: Counter[str] = field(default_factory=Counter)
    rate_limited_by_account: Counter[str] = field(default_factory=Counter)


def _rng(seed: int | None, purpose: str) -> random.Random:
    # Separate streams so that, for one seed, device ids do not shift when faults are switched on.
    return random.Random() if seed is None else random.Random(f"{seed}:{purpose}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Emulator:
    """The provider: accounts, devices, regions, rate windows, faults and ground-truth stats."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.clock = VirtualClock(speed=config.speed)
        self._account_by_key = {key: name for name, keys in config.accounts.items() for key in keys}
        self.reset()

    def reset(self) -> None:
        """Forget every device, counter, fault and region; the clock keeps running."""
        self.devices: dict[str, Device] = {}
        self.regions: dict[str, str] = dict.fromkeys(DEFAULT_REGIONS, "up")
        self.faults = Faults()
        self._id_rng = _rng(self.config.seed, "ids")
        self._fault_rng = _rng(self.config.seed, "faults")
        self._remembered: dict[tuple[str, str], _Remembered] = {}
        self._windows: dict[str, deque[float]] = {}
        # Every accepted create's virtual time, per account (GET /_emulator/creates).
        self._accepted_at: dict[str, list[float]] = {}
        self._counters = _Counters()

    # ---------------------------------------------------------------- auth

    def authenticate(self, authorization: str | None) -> str:
        scheme, _, key = (authorization or "").strip().partition(" ")
        account = self._account_by_key.get(key.strip()) if scheme.lower() == "bearer" else None
        if account is None:
            detail = (
                "missing Authorization header"
                if not authorization
                else "unknown API key or not a Bearer token"
            )
            raise ProblemError(401, UNAUTHENTICATED, detail, headers={"WWW-Authenticate": "Bearer"})
        return account

    # ------------------------------------------------------------- devices

    def create_device(
        self,
        *,
        authorization: str | None,
        platform: str,
        raw_body: bytes,
        idempotency_key: str | None,
    ) -> Answer:
        try:
            return self._create_device(authorization, platform, raw_body, idempotency_key)
        except ProblemError as error:
            if error.status == 429:
                self._counters.rate_limited += 1
            else:
                self._counters.rejected += 1
            raise

    def _create_device(
        self, authorization: str | None, platform: str, raw_body: bytes, idempotency_key: str | None
    ) -> Answer:
        account = self.authenticate(authorization)
        if platform not in PLATFORMS:
            raise ProblemError(
                404, NOT_FOUND, f"unknown platform {platform!r}; expected one of {list(PLATFORMS)}"
            )
        key = (idempotency_key or "").strip()
        if not key:
            raise invalid("the Idempotency-Key header is required")
        if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
            raise invalid(f"Idempotency-Key is longer than {MAX_IDEMPOTENCY_KEY_LENGTH} characters")
        body = _parse_json(raw_body)
        spec = _CreateSpec.parse(body)

        fingerprint = platform + "\n" + json.dumps(body, sort_keys=True, separators=(",", ":"))
        remembered = self._remembered.get((account, key))
        if remembered is not None:
            if remembered.fingerprint != fingerprint:
                raise ProblemError(
                    422,
                    IDEMPOTENCY_KEY_REUSED,
                    f"Idempotency-Key {key!r} was already used with a different request",
                )
            self._counters.idempotent_replays += 1
            replay = remembered.answer
            return Answer(
                replay.status, replay.body, {**replay.headers, "Idempotent-Replayed": "true"}
            )

        now = self.clock.now()
        # Any region a create names becomes known, so arbitrary manifest regions work.
        region_status = self.regions.setdefault(spec.region, "up")
        if region_status == "down":
            raise ProblemError(503, REGION_UNAVAILABLE, f"region {spec.region!r} is down")
        limit = self.config.max_devices_per_account
        if limit is not None and self._live_count(account) >= limit:
            raise ProblemError(
                402, QUOTA_EXCEEDED, f"account {account!r} already has {limit} live devices"
            )
        window = self._window(account, now)
        if len(window) >= self.config.creates_per_minute:
            self._counters.rate_limited_by_account[account] += 1
            headers = self._rate_headers(window, now)
            headers["Retry-After"] = headers["RateLimit-Reset"]
            raise ProblemError(
                429,
                RATE_LIMITED,
                f"at most {self.config.creates_per_minute} device creations per minute "
                f"for account {account!r}",
                headers=headers,
            )

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
            due_at=(
                None
                if self._draw(self.faults.provision_stall_rate, "provisionStall")
                else now + self.config.provision_seconds
            ),
            will_fail=self._draw(self.faults.provision_failure_rate, "provisionFailure"),
        )
        self.devices[device.id] = device
        window.append(now)
        self._accepted_at.setdefault(account, []).append(now)
        self._counters.accepted += 1
        self._counters.accepted_by_account[account] += 1
        answer = Answer(
            202,
            self._device_json(device),
            {**self._rate_headers(window, now), "Location": f"/api/v1/devices/{device.id}"},
        )
        self._remembered[(account, key)] = _Remembered(fingerprint, answer)
        return answer

    def list_devices(
        self,
        account: str,
        *,
        labels: list[str],
        statuses: list[str],
        page_size: int | None,
        page_token: str | None,
    ) -> dict[str, Any]:
        wanted_labels: dict[str, str] = {}
        for item in labels:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise invalid(f"label filter {item!r} must look like key=value")
            wanted_labels[name] = value
        wanted_statuses: set[str] = set()
        for item in statuses:
            for status in filter(None, (s.strip() for s in item.split(","))):
                if status not in STATUSES:
                    raise invalid(f"unknown status {status!r}; expected one of {list(STATUSES)}")
                wanted_statuses.add(status)
        size = DEFAULT_PAGE_SIZE if page_size is None else page_size
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise invalid(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
        after = _decode_page_token(page_token) if page_token else None

        matches = []
        for device in self._settled(self._owned(account)):
            if any(device.labels.get(k) != v for k, v in wanted_labels.items()):
                continue
            if wanted_statuses and self._effective_status(device) not in wanted_statuses:
                continue
            if after is not None and (device.created_at, device.id) <= after:
                continue
            matches.append(device)
        matches.sort(key=lambda d: (d.created_at, d.id))
        page = matches[:size]
        token = None
        if len(matches) > size:
            last = page[-1]
            token = _encode_page_token(last.created_at, last.id)
        return {"items": [self._device_json(d) for d in page], "nextPageToken": token}

    def get_device(self, account: str, device_id: str) -> dict[str, Any]:
        return self._device_json(self._owned_device(account, device_id))

    def device_status(self, account: str, device_id: str) -> dict[str, Any]:
        return self._status_json(self._owned_device(account, device_id))

    def batch_status(self, account: str, body: Any) -> dict[str, Any]:
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise invalid('body must be {"ids": [string, ...]}')
        if len(ids) > MAX_BATCH_IDS:
            raise invalid(f"at most {MAX_BATCH_IDS} ids per batch, got {len(ids)}")
        items, not_found = [], []
        for device_id in dict.fromkeys(ids):
            device = self.devices.get(device_id)
            if device is None or device.account != account:
                not_found.append(device_id)
            else:
                items.append(self._status_json(self._settle(device)))
        return {"items": items, "notFound": not_found}

    def reboot(self, account: str, device_id: str) -> dict[str, Any]:
        device = self._owned_device(account, device_id)
        if device.status not in _REBOOTABLE:
            raise ProblemError(
                409,
                INVALID_STATE,
                f"device {device_id} is {self._effective_status(device)}; only ready, busy "
                "or offline devices can be rebooted",
            )
        now = self.clock.now()
        device.status = "rebooting"
        device.due_at = now + self.config.provision_seconds / 3
        device.session_active = False
        device.manually_offline = False  # a reboot is what brings a wedged device back
        device.updated_at = now
        self._counters.reboots += 1
        return self._device_json(device)

    def delete(self, account: str, device_id: str) -> dict[str, Any]:
        device = self._owned_device(account, device_id)
        if device.status not in ("terminating", "terminated"):
            now = self.clock.now()
            device.status = "terminating"
            device.reason = REASON_DELETED
            device.due_at = now + self.config.terminate_seconds
            device.session_active = False
            device.manually_offline = False
            device.updated_at = now
            self._counters.terminations += 1
            self._settle(device)  # terminate_seconds may be 0
        return self._device_json(device)

    def list_regions(self) -> list[dict[str, str]]:
        return [{"name": name, "status": status} for name, status in self.regions.items()]

    # ------------------------------------------------------- control plane

    def set_session(self, device_id: str, active: bool) -> dict[str, Any]:
        device = self._any_device(device_id)
        status = self._effective_status(device)
        if status not in ("ready", "busy"):
            raise ProblemError(
                409, INVALID_STATE, f"device {device_id} is {status}; sessions need ready or busy"
            )
        now = self.clock.now()
        new_status = "busy" if active else "ready"
        if new_status != device.status:
            device.updated_at = now
        device.status = new_status
        device.session_active = active
        device.last_activity_at = now
        return self._device_json(device)

    def set_offline(self, device_id: str, offline: bool) -> dict[str, Any]:
        device = self._any_device(device_id)
        if device.status not in _CAN_GO_OFFLINE:
            raise ProblemError(
                409,
                INVALID_STATE,
                f"device {device_id} is {device.status} and cannot go {'off' if offline else 'on'}line",
            )
        self._switch(device, lambda: setattr(device, "manually_offline", offline))
        return self._device_json(device)

    def set_region(self, name: str, status: Any) -> dict[str, str]:
        if status not in REGION_STATUSES:
            raise invalid(f"region status must be one of {list(REGION_STATUSES)}")
        affected = [d for d in self._settled(self.devices.values()) if d.region == name]
        before = {d.id: self._effective_status(d) for d in affected}
        self.regions[name] = status
        now = self.clock.now()
        for device in affected:
            if self._effective_status(device) != before[device.id]:
                device.updated_at = now
        return {"name": name, "status": status}

    def set_faults(self, body: Any) -> dict[str, float]:
        if not isinstance(body, dict):
            raise invalid("faults must be a JSON object")
        known = {*_FAULT_RATES, "latencyMs", "timeoutSeconds"}
        unknown = sorted(set(body) - known)
        if unknown:
            raise invalid(f"unknown fault fields {unknown}; known: {sorted(known)}")
        for name, value in body.items():
            if not _number(value):
                raise invalid(f"{name} must be a number")
            if name in _FAULT_RATES and not 0 <= value <= 1:
                raise invalid(f"{name} must be between 0 and 1")
            if name == "latencyMs" and value < 0:
                raise invalid("latencyMs must be >= 0")
            if name == "timeoutSeconds" and value <= 0:
                raise invalid("timeoutSeconds must be > 0")
        self.faults = Faults(
            rate_limit_rate=float(body.get("rateLimitRate", 0.0)),
            server_error_rate=float(body.get("serverErrorRate", 0.0)),
            latency_ms=float(body.get("latencyMs", 0.0)),
            timeout_rate=float(body.get("timeoutRate", 0.0)),
            provision_failure_rate=float(body.get("provisionFailureRate", 0.0)),
            provision_stall_rate=float(body.get("provisionStallRate", 0.0)),
            timeout_seconds=float(body.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)),
        )
        return self.faults.to_json()

    def draw_faults(self, *, is_create: bool) -> FaultDecision:
        """Decide, with the seeded RNG, what the faults do to one public request."""
        faults = self.faults
        decision = FaultDecision(latency_seconds=faults.latency_ms / 1000)
        if self._draw(faults.rate_limit_rate, "rateLimit"):
            limit = str(self.config.creates_per_minute)
            decision.reject = ProblemError(
                429,
                RATE_LIMITED,
                "rate limited (injected fault)",
                headers={
                    "Retry-After": "1",
                    "RateLimit-Limit": limit,
                    "RateLimit-Remaining": "0",
                    "RateLimit-Reset": "1",
                },
            )
        elif self._draw(faults.server_error_rate, "serverError"):
            decision.reject = ProblemError(500, "server_error", "internal error (injected fault)")
        elif self._draw(faults.timeout_rate, "timeout"):
            decision.hang_seconds = faults.timeout_seconds
        if decision.reject is not None and is_create:
            if decision.reject.status == 429:
                self._counters.rate_limited += 1
            else:
                self._counters.rejected += 1
        return decision

    def clock_json(self) -> dict[str, Any]:
        return {"now": self.clock.isoformat(self.clock.now()), "speed": self.clock.speed}

    def set_clock(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or set(body) - {"speed", "advanceSeconds"}:
            raise invalid('clock body is {"speed": number} and/or {"advanceSeconds": number}')
        speed, advance = body.get("speed"), body.get("advanceSeconds")
        if speed is not None and (not _number(speed) or speed <= 0):
            raise invalid("speed must be a number > 0")
        if advance is not None and (not _number(advance) or advance < 0):
            raise invalid("advanceSeconds must be a number >= 0")
        if speed is not None:
            self.clock.set_speed(speed)
        if advance is not None:
            self.clock.advance(advance)
        return self.clock_json()

    def stats(self) -> dict[str, Any]:
        now = self.clock.now()
        devices = list(self._settled(self.devices.values()))
        live = [d for d in devices if d.status != "terminated"]
        billed = sum(
            (d.terminated_at if d.terminated_at is not None else now) - d.created_at
            for d in devices
        )
        counters = self._counters
        live_by_account = Counter(d.account for d in live)
        accounts = {
            name: {
                "live": live_by_account[name],
                "accepted": counters.accepted_by_account[name],
                "rateLimited": counters.rate_limited_by_account[name],
            }
            for name in self.config.accounts
        }
        return {
            "devices": {
                "live": len(live),
                "byStatus": dict(sorted(Counter(self._effective_status(d) for d in live).items())),
                "byPool": dict(sorted(Counter(d.labels.get("pool", "") for d in live).items())),
            },
            "creates": {
                "accepted": counters.accepted,
                "rateLimited": counters.rate_limited,
                "idempotentReplays": counters.idempotent_replays,
                "rejected": counters.rejected,
            },
            "terminations": counters.terminations,
            "deviceHoursBilled": round(billed / 3600, 4),
            "extra": {
                "reboots": counters.reboots,
                "accounts": accounts,
                "faultsInjected": dict(sorted(counters.faults_injected.items())),
            },
        }

    def creates(self) -> dict[str, Any]:
        """Accepted-create times per account, in virtual seconds since the emulator started."""
        return {
            "windowSeconds": RATE_WINDOW_SECONDS,
            "limit": self.config.creates_per_minute,
            "speed": self.clock.speed,
            "now": self.clock.now(),
            "accounts": {name: list(times) for name, times in sorted(self._accepted_at.items())},
        }

    # ------------------------------------------------------------ internal

    def _new_id(self) -> str:
        while True:
            device_id = f"dev-{self._id_rng.getrandbits(64):016x}"
            if device_id not in self.devices:
                return device_id

    def _draw(self, rate: float, name: str) -> bool:
        # Only consult the RNG when the fault is on, so a seed's sequence is stable.
        if rate <= 0:
            return False
        hit = self._fault_rng.random() < rate
        if hit:
            self._counters.faults_injected[name] += 1
        return hit

    def _window(self, account: str, now: float) -> deque[float]:
        window = self._windows.setdefault(account, deque())
        while window and window[0] <= now - RATE_WINDOW_SECONDS:
            window.popleft()
        return window

    def _rate_headers(self, window: deque[float], now: float) -> dict[str, str]:
        limit = self.config.creates_per_minute
        reset = 0
        if window:
            # Real seconds until the oldest creation leaves the window, rounded up.
            until = self.clock.to_real_seconds(window[0] + RATE_WINDOW_SECONDS - now)
            reset = max(1, math.ceil(until))
        return {
            "RateLimit-Limit": str(limit),
            "RateLimit-Remaining": str(max(0, limit - len(window))),
            "RateLimit-Reset": str(reset),
        }

    def _live_count(self, account: str) -> int:
        return sum(1 for d in self._settled(self._owned(account)) if d.status != "terminated")

    def _owned(self, account: str) -> list[Device]:
        return [d for d in self.devices.values() if d.account == account]

    def _owned_device(self, account: str, device_id: str) -> Device:
        device = self.devices.get(device_id)
        if device is None or device.account != account:
            # Another account's device is indistinguishable from a missing one.
            raise ProblemError(404, NOT_FOUND, f"device {device_id!r} not found")
        return self._settle(device)

    def _any_device(self, device_id: str) -> Device:
        device = self.devices.get(device_id)
        if device is None:
            raise ProblemError(404, NOT_FOUND, f"device {device_id!r} not found")
        return self._settle(device)

    def _settled(self, devices: Iterable[Device]) -> list[Device]:
        return [self._settle(d) for d in devices]

    def _settle(self, device: Device) -> Device:
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

    def _switch(
        self, device: Device, change: Callable[[], None], *, at: float | None = None
    ) -> None:
        """Apply `change`; `updatedAt` moves only when the status a client sees changes.

        So a device that finishes provisioning while offline keeps the `updatedAt`
        of the moment it went offline, which is what "offline for how long" needs.
        """
        before = self._effective_status(device)
        change()
        if self._effective_status(device) != before:
            device.updated_at = self.clock.now() if at is None else at

    def _effective_status(self, device: Device) -> str:
        if device.status in _CAN_GO_OFFLINE and (
            device.manually_offline or self.regions.get(device.region) == "down"
        ):
            return "offline"
        return device.status

    def _effective_reason(self, device: Device) -> str | None:
        if self._effective_status(device) == "offline":
            return (
                REASON_REGION_DOWN
                if self.regions.get(device.region) == "down"
                else REASON_UNREACHABLE
            )
        return device.reason

    def _status_json(self, device: Device) -> dict[str, Any]:
        iso = self.clock.isoformat
        return {
            "id": device.id,
            "status": self._effective_status(device),
            "reason": self._effective_reason(device),
            "sessionActive": device.session_active,
            "lastActivityAt": None
            if device.last_activity_at is None
            else iso(device.last_activity_at),
            "updatedAt": iso(device.updated_at),
        }

    def _device_json(self, device: Device) -> dict[str, Any]:
        status = self._status_json(device)
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


@dataclass
class _CreateSpec:
    region: str
    os_version: str
    name: str
    labels: dict[str, str]
    proxy: dict[str, Any] | None

    @classmethod
    def parse(cls, body: Any) -> _CreateSpec:
        """Validate a create body; unknown top-level fields are ignored."""
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        region = _required_str(body, "region")
        os_version = _required_str(body, "osVersion")
        name = _required_str(body, "name")
        labels = body.get("labels")
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise invalid("labels is required and must be an object of string values")
        for key in labels:
            if not key or "=" in key:
                raise invalid(f"label key {key!r} must be non-empty and contain no '='")
        if not labels.get("pool"):
            raise invalid("labels.pool is required")
        return cls(region, os_version, name, dict(labels), _parse_proxy(body.get("proxy")))


def _required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{name} is required and must be a non-empty string")
    return value


def _parse_proxy(proxy: Any) -> dict[str, Any] | None:
    if proxy is None:
        return None
    if not isinstance(proxy, dict):
        raise invalid("proxy must be an object")
    kind = proxy.get("type")
    if kind not in PROXY_TYPES:
        raise invalid(f"proxy.type must be one of {list(PROXY_TYPES)}")
    host = proxy.get("host")
    if not isinstance(host, str) or not host.strip():
        raise invalid("proxy.host is required")
    port = proxy.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise invalid("proxy.port must be an integer between 1 and 65535")
    for secret in ("username", "password"):
        if proxy.get(secret) is not None and not isinstance(proxy[secret], str):
            raise invalid(f"proxy.{secret} must be a string")
    # The password is used and forgotten: no answer ever carries it.
    return {"type": kind, "host": host, "port": port, "username": proxy.get("username")}


def _parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise invalid("request body is required")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise invalid(f"request body is not valid JSON: {error}") from None


def parse_json_body(raw: bytes, *, empty: Any = None) -> Any:
    """Parse a control-plane or batch body; an empty body becomes `empty`."""
    if not raw.strip():
        if empty is None:
            raise invalid("request body is required")
        return empty
    return _parse_json(raw)


def _encode_page_token(created_at: float, device_id: str) -> str:
    raw = json.dumps([created_at, device_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_page_token(token: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created_at, device_id = json.loads(raw)
        if not _number(created_at) or not isinstance(device_id, str):
            raise ValueError(token)
    except (binascii.Error, ValueError, TypeError):
        raise invalid("page_token is not valid") from None
    return float(created_at), device_id
