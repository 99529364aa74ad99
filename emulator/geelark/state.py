"""The emulated GeeLark team: its phones, limits, quotas, money, faults and clock.

One `GeeLarkEmulator` holds everything; the Open API calls are `_phone_calls` and
`_power_calls` (routed by `ROUTES`), the limits `_limits`, billing `_billing`, faults
`_faults`; the app (`app`) only translates HTTP. Handlers run on one event loop: each call's
check-then-act is atomic between awaits. State is lazy: a phone's boot ending, the provider
stopping an idle phone, the day's quotas rolling over are all worked out from the virtual
clock when something looks (`settle`), so a jump of the clock is seen at once.

In memory, or kept in a state file (`_statefile`, `--state FILE`): written after every call,
so an emulator started again on it is the same team.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from devicepool.emulator._base import ControlPlane, seeded_rng
from devicepool.emulator._clock import clock_from
from devicepool.emulator._problems import NOT_FOUND, ProblemError, invalid
from devicepool.emulator.geelark import _envelope as codes
from devicepool.emulator.geelark import _phone_calls, _power_calls
from devicepool.emulator.geelark._billing import Bill, Days, bill, seconds_by_day
from devicepool.emulator.geelark._bodies import Result
from devicepool.emulator.geelark._envelope import GeeLarkError
from devicepool.emulator.geelark._faults import Dice, Faults
from devicepool.emulator.geelark._limits import DailyQuotas, Windows
from devicepool.emulator.geelark._phones import EXPIRED, Phone, PhoneStore
from devicepool.emulator.geelark._statefile import (
    StateFile,
    StateFileError,
    restore,
    snapshot,
)
from devicepool.emulator.geelark.config import GeeLarkConfig

__all__ = ["ROUTES", "GeeLarkEmulator", "StateFileError"]

Handler = Callable[["GeeLarkEmulator", dict[str, Any]], Awaitable[Result]]
_ROUTES: dict[str, Handler] = {**_phone_calls.ROUTES, **_power_calls.ROUTES}
ROUTES = tuple(_ROUTES)


class GeeLarkEmulator(ControlPlane):
    """The team: phones, request windows and locks, quotas, billing, faults, ground truth."""

    faults_type = Faults

    def __init__(self, config: GeeLarkConfig) -> None:
        """Raises StateFileError when `config.state_file` cannot be used."""
        self.config = config
        self._disk: StateFile | None = None
        saved = None
        if config.state_file is not None:
            disk = StateFile(config.state_file)
            try:
                saved = disk.load()
            except BaseException:
                disk.close()
                raise
            self._disk = disk
        self.clock = clock_from(saved, config.speed)
        self.days = Days(self.clock.epoch)
        self._new_parts()
        if saved is not None:
            restore(self, saved)
        self.commit()

    def commit(self) -> None:
        """Write the team to its state file now, if it has one."""
        if self._disk is not None:
            self._disk.save(snapshot(self))

    def close(self) -> None:
        """Write the team one last time and let its state file go; idempotent."""
        disk, self._disk = self._disk, None
        if disk is not None:
            disk.save(snapshot(self))
            disk.close()

    def _new_parts(self) -> None:
        config = self.config
        self.phones = PhoneStore(
            seeded_rng(config.seed, "phones"),
            boot_seconds=config.boot_seconds,
            idle_seconds=config.idle_minutes * 60,
        )
        self.windows = Windows(
            per_minute=config.requests_per_minute,
            per_hour=config.requests_per_hour,
            lock_seconds=config.lock_seconds,
            offset=self.clock.epoch.timestamp(),
        )
        self.quotas = DailyQuotas(
            creates_per_day=config.creates_per_day, opens_per_day=config.opens_per_day
        )
        self.faults = Faults()
        self.dice = Dice(seeded_rng(config.seed, "faults"))
        self.unknown_paths = 0

    def reset(self) -> None:
        """Forget every phone, window, lock, quota, bill and fault; the clock runs on."""
        self._new_parts()

    # ------------------------------------------------------------ time

    def quotas_today(self) -> DailyQuotas:
        self.quotas.roll(self.days.day_of(self.now()))
        return self.quotas

    # ------------------------------------------------------------ the Open API

    def knows(self, path: str) -> bool:
        return path in _ROUTES

    async def call(self, path: str, body: dict[str, Any]) -> tuple[Any, int]:
        """One authenticated, admitted call: its `data` and envelope code (0, or 40006/40009
        for a batch with failed items when `batch_envelope` is "coded")."""
        result = await _ROUTES[path](self, body)
        code = codes.OK
        if result.failed and self.config.batch_envelope == "coded":
            code = codes.ALL_FAILED if result.failed == result.total else codes.PARTIAL
        return result.data, code

    def phone(self, phone_id: str) -> Phone:
        """A phone by id, settled, or 42001 in the envelope."""
        phone = self.phones.phones.get(phone_id)
        if phone is None:
            raise GeeLarkError(codes.PHONE_NOT_FOUND)
        return self.phones.settle(phone, self.now())

    # ------------------------------------------------------------ money

    def bills(self) -> dict[str, Bill]:
        """Every phone's bill so far, deleted ones included (by id)."""
        now, config = self.now(), self.config
        self.phones.settle_all(now)
        return {
            p.id: bill(
                seconds_by_day(p.intervals(now), self.days),
                price=config.price_per_minute,
                cap=config.daily_cap,
                per_minute=p.charge_mode == 0,
                rental=p.rental,
            )
            for p in [*self.phones.gone, *self.phones.phones.values()]
        }

    def balance_left(self) -> float:
        return self.config.balance - sum(b.money for b in self.bills().values())

    # ------------------------------------------------------------ control plane

    def _control_phone(self, phone_id: str) -> Phone:
        phone = self.phones.phones.get(phone_id)
        if phone is None:
            raise ProblemError(404, NOT_FOUND, f"no cloud phone {phone_id!r}")
        return self.phones.settle(phone, self.now())

    def provider_stop(self, phone_id: str) -> dict[str, Any]:
        """The provider shuts a phone down on its own (as energySavingMode does)."""
        phone = self._control_phone(phone_id)
        if phone.on:
            self.phones.stop(phone, self.now(), by="provider")
        return self.phone_json(phone)

    def expire(self, phone_id: str) -> dict[str, Any]:
        phone = self._control_phone(phone_id)
        if phone.on:
            self.phones.stop(phone, self.now(), by="provider")
        phone.status = EXPIRED
        return self.phone_json(phone)

    def set_busy(self, phone_id: str, body: Any) -> dict[str, Any]:
        """`{"task": bool, "remote": bool}`: an RPA task runs on it / someone is connected."""
        phone = self._control_phone(phone_id)
        if (
            not isinstance(body, dict)
            or not body
            or set(body) - {"task", "remote"}
            or not all(isinstance(v, bool) for v in body.values())
        ):
            raise invalid('body is {"task": true|false} and/or {"remote": true|false}')
        now = self.now()
        phone.task_running = body.get("task", phone.task_running)
        phone.remote = body.get("remote", phone.remote)
        self.phones.touch(phone, now)  # busy until now: idle counts from here
        return self.phone_json(phone)

    def touch(self, phone_id: str) -> dict[str, Any]:
        """Activity on a phone (someone used it): its idle time starts again."""
        phone = self._control_phone(phone_id)
        self.phones.touch(phone, self.now())
        return self.phone_json(phone)

    def phone_json(self, phone: Phone) -> dict[str, Any]:
        return {
            "id": phone.id,
            "name": phone.name,
            "status": phone.status,
            "energySaving": phone.energy_saving,
            "stoppedBy": phone.stopped_by,
            "task": phone.task_running,
            "remote": phone.remote,
        }

    def secrets(self) -> list[str]:
        """Every secret a list or ADB answer would carry now (for leak checks)."""
        return sorted({s for p in self.phones.phones.values() for s in p.secrets()})

    def stats(self) -> dict[str, Any]:
        now = self.now()
        phones = self.phones.settle_all(now)
        counters = self.phones.counters
        bills = self.bills()
        config = self.config
        return {
            "phones": {
                "total": len(phones),
                "running": sum(1 for p in phones if p.on),
                "starting": sum(1 for p in phones if p.status == 1),
                "started": sum(1 for p in phones if p.status == 0),
                "shutDown": sum(1 for p in phones if p.status == 2),
                "expired": sum(1 for p in phones if p.status == EXPIRED),
                "created": counters["created"],
                "starts": counters["starts"],
                "stops": counters["stops"],
                "autoStops": counters["autoStops"],
                "providerStops": counters["providerStops"],
                "restarts": counters["restarts"],
                "newIdentities": counters["newIdentities"],
                "deleted": counters["deleted"],
                "duplicateNames": self.phones.duplicates(),
            },
            "requests": {**self.windows.to_json(now), "unknownPaths": self.unknown_paths},
            "quotas": {
                **self.quotas_today().to_json(),
                "profiles": len(phones),
                "maxProfiles": config.max_profiles,
                "maxRunning": config.max_running,
            },
            "minutesBilled": sum(b.minutes for b in bills.values()),
            "moneyBilled": round(sum(b.money for b in bills.values()), 4),
            "billing": {
                "pricePerMinute": config.price_per_minute,
                "dailyCap": config.daily_cap,
                "capAppliedDays": sum(b.capped_days for b in bills.values()),
                "rental": round(sum(b.rental for b in bills.values()), 4),
                "balance": round(config.balance - sum(b.money for b in bills.values()), 4),
                "byPhone": {
                    pid: {"minutes": b.minutes, "money": round(b.money, 4)}
                    for pid, b in bills.items()
                },
            },
            "secrets": {"live": len(self.secrets())},
            "faultsInjected": dict(sorted(self.dice.injected.items())),
        }
