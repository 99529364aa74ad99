"""The in-memory BitCloudPhone provider that the emulator's HTTP layer serves.

All state lives in one `Emulator` object (reachable as `app.state.emulator`),
which composes the parts (`_devices`, `_listing`, `_idempotency`, `_ratelimit`,
`_faults`, `_stats`, `_clock`, `_bodies`, `_statefile`) and applies the
cross-cutting rules of a create: auth, idempotency, region, quota, rate window,
counters.

Every method is synchronous: the app calls them from `async` handlers on one
event loop, so each create's check-then-act is atomic without locks. A method
that changes state stages what it changed and commits it to the state file
before it returns (`_commit`).
"""

from __future__ import annotations

from typing import Any

from devicepool.emulator import _listing
from devicepool.emulator._base import ControlPlane, seeded_rng
from devicepool.emulator._bodies import CreateSpec, parse_json, parse_json_body
from devicepool.emulator._clock import VirtualClock
from devicepool.emulator._devices import PLATFORMS, Device, DeviceStore
from devicepool.emulator._faults import FaultDecision, FaultDice, Faults
from devicepool.emulator._idempotency import (
    Answer,
    IdempotencyCache,
    fingerprint,
    idempotency_key,
)
from devicepool.emulator._problems import (
    NOT_FOUND,
    QUOTA_EXCEEDED,
    REGION_UNAVAILABLE,
    UNAUTHENTICATED,
    ProblemError,
    invalid,
)
from devicepool.emulator._ratelimit import RateWindows
from devicepool.emulator._statefile import open_state
from devicepool.emulator._stats import Counters, stats_json
from devicepool.emulator.config import EmulatorConfig

__all__ = ["Answer", "Device", "Emulator", "FaultDecision", "Faults", "parse_json_body"]

MAX_BATCH_IDS = 100


class Emulator(ControlPlane):
    """The provider: accounts, devices, regions, rate windows, faults and ground-truth stats."""

    faults_type = Faults

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        # Raises StateFileError when the file cannot be used (another emulator holds it, ...).
        self._disk = open_state(config.state_file)
        self._closed = False
        self.clock: VirtualClock = self._disk.load_clock(speed=config.speed)
        self._account_by_key = {key: name for name, keys in config.accounts.items() for key in keys}
        self._new_parts()
        self._disk.load_into(
            store=self._store,
            idempotency=self._idempotency,
            rates=self._rates,
            counters=self._counters,
        )
        self._commit()

    def reset(self) -> None:
        """Forget every device, counter, fault and region; the clock keeps running."""
        self._new_parts()
        self._disk.wipe()
        self._commit()

    def close(self) -> None:
        """Write the clock one last time and release the state file (if any); idempotent."""
        if self._closed:
            return
        self._commit()
        self._disk.close()
        self._closed = True

    def _new_parts(self) -> None:
        self._store = DeviceStore(self.clock, seeded_rng(self.config.seed, "ids"))
        self.faults = Faults()
        self._counters = Counters()
        self._dice = FaultDice(
            seeded_rng(self.config.seed, "faults"), self._counters.faults_injected
        )
        self._idempotency = IdempotencyCache()
        self._rates = RateWindows(self.clock, self.config)

    @property
    def devices(self) -> dict[str, Device]:
        return self._store.devices

    @property
    def regions(self) -> dict[str, str]:
        return self._store.regions

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
            self._counters.count_rejected_create(error.status)
            raise
        finally:
            self._commit()

    def _create_device(
        self,
        authorization: str | None,
        platform: str,
        raw_body: bytes,
        idempotency_header: str | None,
    ) -> Answer:
        account = self.authenticate(authorization)
        if platform not in PLATFORMS:
            raise ProblemError(
                404, NOT_FOUND, f"unknown platform {platform!r}; expected one of {list(PLATFORMS)}"
            )
        key = idempotency_key(idempotency_header)
        body = parse_json(raw_body)
        spec = CreateSpec.parse(body)
        request = fingerprint(platform, body)
        replay = self._idempotency.replay(account, key, request)
        if replay is not None:
            self._counters.idempotent_replays += 1
            return replay

        now = self.clock.now()
        self._admit(account, spec.region, now)
        stalled = self._dice.draw(self.faults.provision_stall_rate, "provisionStall")
        device = self._store.add(
            account=account,
            platform=platform,
            spec=spec,
            now=now,
            provision_seconds=None if stalled else self.config.provision_seconds,
            will_fail=self._dice.draw(self.faults.provision_failure_rate, "provisionFailure"),
        )
        rate_headers = self._rates.record(account, now)
        self._counters.accepted += 1
        self._counters.accepted_by_account[account] += 1
        answer = Answer(
            202,
            self._store.device_json(device),
            {**rate_headers, "Location": f"/api/v1/devices/{device.id}"},
        )
        self._idempotency.remember(account, key, request, answer)
        self._disk.stage_device(device)
        self._disk.stage_create(
            account=account, key=key, fingerprint=request, answer=answer, at=now
        )
        return answer

    def _admit(self, account: str, region: str, now: float) -> None:
        """Refuse a new create if its region is down, the quota is used up or the window full."""
        # Any region a create names becomes known, so arbitrary manifest regions work.
        if self.regions.setdefault(region, "up") == "down":
            raise ProblemError(503, REGION_UNAVAILABLE, f"region {region!r} is down")
        limit = self.config.max_devices_per_account
        if limit is not None and self._store.live_count(account) >= limit:
            raise ProblemError(
                402, QUOTA_EXCEEDED, f"account {account!r} already has {limit} live devices"
            )
        if self._rates.is_full(account, now):
            self._counters.rate_limited_by_account[account] += 1
            raise self._rates.limited(account, now)

    def list_devices(self, account: str, **query: Any) -> dict[str, Any]:
        """A page of `account`'s devices: `_listing.list_devices`'s labels, statuses, page."""
        return _listing.list_devices(self._store, account, **query)

    def get_device(self, account: str, device_id: str) -> dict[str, Any]:
        """The detail: the device, and its `connect` block once it is up (listings have none)."""
        device = self._store.owned_device(account, device_id)
        answer = self._store.device_json(device)
        connect = self._store.connect_json(device)
        if connect is not None:
            answer["connect"] = connect
        return answer

    def device_status(self, account: str, device_id: str) -> dict[str, Any]:
        return self._store.status_json(self._store.owned_device(account, device_id))

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
                items.append(self._store.status_json(self._store.settle(device)))
        return {"items": items, "notFound": not_found}

    def reboot(self, account: str, device_id: str) -> dict[str, Any]:
        device = self._store.owned_device(account, device_id)
        self._store.reboot(device, seconds=self.config.provision_seconds / 3)
        self._counters.reboots += 1
        self._commit(device)
        return self._store.device_json(device)

    def delete(self, account: str, device_id: str) -> dict[str, Any]:
        device = self._store.owned_device(account, device_id)
        if self._store.terminate(device, seconds=self.config.terminate_seconds):
            self._counters.terminations += 1
            self._commit(device)
        return self._store.device_json(device)

    def list_regions(self) -> list[dict[str, str]]:
        return [{"name": name, "status": status} for name, status in self.regions.items()]

    # ------------------------------------------------------- control plane

    def set_session(self, device_id: str, active: bool) -> dict[str, Any]:
        device = self._store.any_device(device_id)
        self._store.set_session(device, active)
        self._commit(device)
        return self._store.device_json(device)

    def set_offline(self, device_id: str, offline: bool) -> dict[str, Any]:
        device = self._store.any_device(device_id)
        self._store.set_offline(device, offline)
        self._commit(device)
        return self._store.device_json(device)

    def set_region(self, name: str, status: Any) -> dict[str, str]:
        answer = self._store.set_region(name, status)
        # Its devices' `updatedAt` moved if what a client sees of them changed.
        self._commit(*(d for d in self.devices.values() if d.region == name))
        return answer

    def draw_faults(self, *, is_create: bool) -> FaultDecision:
        """Decide, with the seeded RNG, what the faults do to one public request."""
        injected = self._counters.faults_injected.total()
        decision = self._dice.decide(self.faults, rate_limit=self.config.creates_per_minute)
        if decision.reject is not None and is_create:
            self._counters.count_rejected_create(decision.reject.status)
        if self._counters.faults_injected.total() != injected:
            self._commit()
        return decision

    def set_clock(self, body: Any) -> dict[str, Any]:
        answer = super().set_clock(body)
        self._commit()  # a jump or a new speed re-anchors the clock on disk too
        return answer

    def stats(self) -> dict[str, Any]:
        now = self.clock.now()
        return stats_json(
            counters=self._counters,
            devices=self._store.settled(self.devices.values()),
            status_of=self._store.effective_status,
            accounts=self.config.accounts,
            now=now,
        )

    def creates(self) -> dict[str, Any]:
        """Accepted-create times per account, in virtual seconds since the emulator started."""
        return self._rates.creates_json()

    # ------------------------------------------------------------ on disk

    def _commit(self, *changed: Device) -> None:
        """Write `changed` devices, the counters, regions and clock to the state file, if any."""
        for device in changed:
            self._disk.stage_device(device)
        self._disk.commit(counters=self._counters, regions=self.regions, clock=self.clock)
