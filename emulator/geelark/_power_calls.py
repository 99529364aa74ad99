"""Power and reach: `phone/start`, `stop`, `status`, `delete`, `restart`, ADB, and money.

Documented: `start` takes up to 200 ids and boots asynchronously, failing items with 42001,
43004, 45002, 47002 (and 43008 past the daily open limit, 47001 past the device concurrency,
41001 without balance); `stop` is refused while a task runs (43005) or someone is remotely
connected (43006); `delete` is refused while started (43009), starting (43010) or in use
(43021); ADB is switched on with `adb/setStatus` and read with `adb/getData` after about 3
seconds (42002 when the phone is not running, 49001 when ADB is off). Our choices: starting a
phone that is already on, or stopping one that is off, succeeds and changes nothing; a start
that fails counts against no quota; ADB data not yet ready answers 49001.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devicepool.emulator.geelark import _envelope as codes
from devicepool.emulator.geelark._bodies import Batch, Result, ids_of, optional_int, required_str
from devicepool.emulator.geelark._envelope import GeeLarkError, invalid
from devicepool.emulator.geelark._limits import DailyQuotas
from devicepool.emulator.geelark._phones import EXPIRED, STARTED, STARTING, Phone

if TYPE_CHECKING:
    from devicepool.emulator.geelark.state import GeeLarkEmulator

START_IDS = 200
CHARGING = {0: "Per-minute usage", 1: "Monthly rental"}


def _batch_result(batch: Batch, *, with_success: bool = True) -> Result:
    return Result(batch.data(with_success=with_success), total=batch.total, failed=len(batch.fail))


def _each(em: GeeLarkEmulator, ids: list[str], batch: Batch) -> list[tuple[str, Phone]]:
    """The phones `ids` name, settled; an unknown id fails its item with 42001."""
    now, found = em.now(), []
    for id_ in ids:
        phone = em.phones.phones.get(id_)
        if phone is None:
            batch.failed(id_, codes.PHONE_NOT_FOUND)
        else:
            found.append((id_, em.phones.settle(phone, now)))
    return found


async def start(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    ids = ids_of(body, limit=START_IDS)
    width = body.get("width")
    if width is not None and (
        not isinstance(width, int) or isinstance(width, bool) or not 200 <= width <= 600
    ):
        raise invalid("width must be an integer between 200 and 600")
    optional_int(body, "center", (0, 1))
    saving = optional_int(body, "energySavingMode", (0, 1)) == 1
    batch, quotas, now = Batch(len(ids)), em.quotas_today(), em.now()
    # Once per call: every phone settled (one the provider stopped frees its slot), the wallet.
    account = _Account(
        running=sum(1 for p in em.phones.settle_all(now) if p.on), balance=em.balance_left()
    )
    for id_, phone in _each(em, ids, batch):
        code = _start_refusal(em, phone, quotas, account)
        if code is not None:
            batch.failed(id_, code)
            continue
        if not phone.on:
            quotas.opens += 1
            account.running += 1
            em.phones.start(phone, now, energy_saving=saving)
        batch.success.append(
            {
                "id": id_,
                "url": f"https://emulator.geelark.invalid/phone/{id_}",
                "chargingMethod": CHARGING[phone.charge_mode],
            }
        )
    return _batch_result(batch)


@dataclass
class _Account:
    running: int
    balance: float


def _start_refusal(
    em: GeeLarkEmulator, phone: Phone, quotas: DailyQuotas, account: _Account
) -> int | None:
    if phone.status == EXPIRED:
        return codes.EXPIRED
    if phone.on:
        return None
    if quotas.opens_left() == 0:
        quotas.refused["opens:43008"] += 1
        return codes.OPEN_QUOTA
    limit = em.config.max_running
    if limit and account.running >= limit:
        return codes.DEVICE_CONCURRENCY
    if phone.charge_mode == 0 and account.balance < em.config.price_per_minute:
        return codes.BALANCE
    injected = em.dice.start_failure(em.faults)
    if injected is None:
        injected = em.dice.item_failure(em.faults)
    return injected


async def stop(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    ids = ids_of(body)
    batch, now = Batch(len(ids)), em.now()
    for id_, phone in _each(em, ids, batch):
        code = (
            codes.TASK_RUNNING
            if phone.task_running
            else codes.REMOTE_CONTROL
            if phone.remote
            else em.dice.item_failure(em.faults)
        )
        if code is not None:
            batch.failed(id_, code)
            continue
        if phone.on:
            em.phones.stop(phone, now, by="api")
        batch.success.append({"id": id_, "serialName": phone.name, "status": phone.status})
    return _batch_result(batch)


async def status(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    ids = ids_of(body)
    batch = Batch(len(ids))
    for id_, phone in _each(em, ids, batch):
        batch.success.append({"id": id_, "serialName": phone.name, "status": phone.status})
    return _batch_result(batch)


async def delete(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    ids = ids_of(body)
    batch = Batch(len(ids))
    for id_, phone in _each(em, ids, batch):
        if id_ not in em.phones.phones:  # listed twice: the first one deleted it
            batch.failed(id_, codes.PHONE_NOT_FOUND)
            continue
        code = (
            codes.ALREADY_STARTED
            if phone.status == STARTED
            else codes.STARTING
            if phone.status == STARTING
            else codes.IN_USE
            if phone.task_running or phone.remote
            else em.dice.item_failure(em.faults)
        )
        if code is not None:
            batch.failed(id_, code)
            continue
        em.phones.delete(phone)
    return _batch_result(batch, with_success=False)


async def restart(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    phone = em.phone(required_str(body, "id"))
    if phone.status != STARTED:
        raise GeeLarkError(codes.NOT_RUNNING)
    if phone.task_running:
        raise GeeLarkError(codes.TASK_RUNNING)
    em.phones.restart(phone, em.now())
    return Result(None)


async def adb_set_status(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    ids = ids_of(body)
    open_ = body.get("open")
    if not isinstance(open_, bool):
        raise invalid("open must be true or false")
    batch, now = Batch(len(ids)), em.now()
    for id_, phone in _each(em, ids, batch):
        if phone.status != STARTED:
            batch.failed(id_, codes.NOT_RUNNING)
            continue
        phone.adb_open = open_
        if open_:
            phone.adb_ready_at = now + em.config.adb_ready_seconds
            phone.adb_password = f"adb-{em.phones.new_id()[:8]}"
        else:
            phone.adb_password = ""
        em.phones.touch(phone, now)
        batch.success.append({"id": id_})
    return _batch_result(batch)


async def adb_get_data(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    ids = ids_of(body)
    items, now = [], em.now()
    for id_ in ids:
        phone = em.phones.phones.get(id_)
        if phone is not None:
            em.phones.settle(phone, now)
        code = (
            codes.PHONE_NOT_FOUND
            if phone is None
            else codes.NOT_RUNNING
            if phone.status != STARTED
            else codes.ADB_NOT_ENABLED
            if not phone.adb_open or phone.adb_ready_at > now
            else 0
        )
        if code or phone is None:
            items.append({"code": code, "id": id_, "ip": "", "port": 0, "pwd": ""})
            continue
        em.phones.touch(phone, now)
        items.append(
            {
                "code": 0,
                "id": id_,
                "ip": f"10.{phone.serial_no // 256 % 256}.{phone.serial_no % 256}.2",
                "port": 5555,
                "pwd": phone.adb_password,
            }
        )
    return Result({"items": items})


async def wallet(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    return Result({"balance": round(em.balance_left(), 4), "giftMoney": 0, "availableTimeAddOn": 0})


async def plan_info(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    config = em.config
    phones = em.phones.phones.values()
    monthly = sum(1 for p in phones if p.charge_mode == 1)
    return Result(
        {
            "plan": 1 if config.plan == "pro" else 0,
            "profiles": config.max_profiles,
            "monthlyRental": monthly,
            "parallels": 0,
            "expirationTime": 0,
            "monthlyFee": 19 if config.plan == "pro" else 5,
            "availableProfiles": max(0, config.max_profiles - len(em.phones.phones)),
            "availableMonthlyRentals": 0,
        }
    )


ROUTES = {
    "open/v1/phone/start": start,
    "open/v1/phone/stop": stop,
    "open/v1/phone/status": status,
    "open/v1/phone/delete": delete,
    "open/v1/phone/restart": restart,
    "open/v1/adb/setStatus": adb_set_status,
    "open/v1/adb/getData": adb_get_data,
    "open/v1/pay/wallet": wallet,
    "open/v1/pay/plan/info": plan_info,
}
