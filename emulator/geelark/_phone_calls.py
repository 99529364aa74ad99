"""The phone records: `phone/list`, `phone/addNew`, `phone/detail/update`, v2 `phone/newOne`.

Documented: list pages with `page` >= 1 and `pageSize` <= 100 (40008 out of range), `ids`
override paging, items carry the proxy password; `addNew` takes up to 100 items and answers
one `details` entry per item with its own code, groups and tags named there are created; a
Basic plan creates one per call (44001); the plan's profile cap (44002) and daily creation
limit (44004); `newOne` gives a phone a new identity and counts against the daily creation
limit. Our choices where the docs are silent are said beside each.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from devicepool.emulator.geelark import _envelope as codes
from devicepool.emulator.geelark._bodies import (
    Result,
    ids_of,
    optional_int,
    optional_str,
    required_str,
)
from devicepool.emulator.geelark._envelope import GeeLarkError, invalid
from devicepool.emulator.geelark._phones import EXPIRED, Phone

if TYPE_CHECKING:
    from devicepool.emulator.geelark.state import GeeLarkEmulator

MOBILE_TYPES = tuple(f"Android {n}" for n in range(9, 17))
REGIONS = ("cn", "sgp", "us")
# Our choice: a pageSize left out is 10.
DEFAULT_PAGE_SIZE = 10
_PROXY = re.compile(r"^(socks5|http|https)://(?:([^:@/]*):([^@/]*)@)?([^:@/]+):(\d{1,5})$")


def _proxy_of(text: str) -> dict[str, Any] | None:
    """`socks5://user:password@host:port` as a list answer shows it, or None if malformed."""
    match = _PROXY.match(text)
    if match is None or not 1 <= int(match.group(5)) <= 65535:
        return None
    kind, user, password, host, port = match.groups()
    return {
        "type": kind,
        "server": host,
        "port": int(port),
        "username": user or "",
        "password": password or "",
    }


def item_json(em: GeeLarkEmulator, phone: Phone) -> dict[str, Any]:
    """A `phone/list` item, secrets and all (the real API returns the proxy password)."""
    store = em.phones
    return {
        "id": phone.id,
        "serialName": phone.name,
        "serialNo": str(phone.serial_no),
        "group": (
            {"id": store.group_id(phone.group), "name": phone.group, "remark": ""}
            if phone.group
            else None
        ),
        "remark": phone.remark,
        # The docs list 0/1/2 here; an expired phone shows 3, as `phone/status` does.
        "status": phone.status,
        # The docs show tags as `{name}`; we add each tag's id (`detail/update` takes ids).
        "tags": [{"id": store.tag_id(t), "name": t} for t in phone.tags],
        "equipmentInfo": phone.equipment,
        "proxy": dict(phone.proxy) if phone.proxy else None,
        "chargeMode": phone.charge_mode,
        "hasBind": False,
        "monthlyExpire": 0,
        "rpaStatus": 1 if phone.task_running else 0,
        "deviceName": phone.equipment.get("deviceModel", ""),
        "netType": 1,
    }


async def phone_list(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    page = body.get("page", 1)
    size = body.get("pageSize", DEFAULT_PAGE_SIZE)
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        raise invalid("page must be an integer >= 1")
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100:
        raise GeeLarkError(codes.PAGE_SIZE, "pageSize out of range (1..100)")
    phones = em.phones.settle_all(em.now())
    if body.get("ids"):  # an empty list filters nothing (our choice)
        wanted = set(ids_of(body))
        found = [p for p in phones if p.id in wanted]
        return Result(
            {
                "total": len(found),
                "page": 1,
                "pageSize": len(found),
                "items": [item_json(em, p) for p in found],
            }
        )
    found = _filtered(phones, body)
    start = (page - 1) * size
    items = [item_json(em, p) for p in found[start : start + size]]
    return Result({"total": len(found), "page": page, "pageSize": size, "items": items})


def _filtered(phones: list[Phone], body: dict[str, Any]) -> list[Phone]:
    # Our choices: serialName and remark match as substrings, groupName exactly, tags when a
    # phone has any of them; openStatus 1 is started or starting.
    name = optional_str(body, "serialName")
    remark = optional_str(body, "remark")
    group = optional_str(body, "groupName")
    tags = body.get("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)
    ):
        raise invalid("tags must be a list of tag names")
    charge = optional_int(body, "chargeMode", (0, 1))
    open_status = optional_int(body, "openStatus", (0, 1))
    return [
        p
        for p in phones
        if (not name or name in p.name)
        and (not remark or remark in p.remark)
        and (not group or p.group == group)
        and (not tags or set(tags) & set(p.tags))
        and (charge is None or p.charge_mode == charge)
        and (open_status is None or p.on == bool(open_status))
    ]


async def add_new(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    mobile_type = required_str(body, "mobileType")
    if mobile_type not in MOBILE_TYPES:
        raise invalid(f"mobileType must be one of {list(MOBILE_TYPES)}")
    charge_mode = optional_int(body, "chargeMode", (0, 1)) or 0
    region = optional_str(body, "region") or "sgp"  # our choice when left out
    if region not in REGIONS:
        raise invalid(f"region must be one of {list(REGIONS)}")
    if region == "us" and mobile_type != "Android 15":
        raise invalid("region us offers only Android 15")
    rows = body.get("data")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise invalid("data must be a non-empty list of phones")
    if len(rows) > 100:
        raise invalid("data takes at most 100 phones")
    if len(rows) > 1 and em.config.plan == "base":
        raise GeeLarkError(codes.BATCH_NEEDS_PRO)
    capped = _create_capped(em)
    if capped is not None:
        raise GeeLarkError(capped)
    details = [
        _create_one(em, index, row, mobile_type, region, charge_mode)
        for index, row in enumerate(rows, start=1)
    ]
    failed = sum(1 for d in details if d["code"] != 0)
    data = {
        "totalAmount": len(rows),
        "successAmount": len(rows) - failed,
        "failAmount": failed,
        "details": details,
    }
    return Result(data, total=len(rows), failed=failed)


def _create_capped(em: GeeLarkEmulator) -> int | None:
    """The code of a cap a create is past (counted as refused by it), or None."""
    quotas = em.quotas_today()
    if len(em.phones.phones) >= em.config.max_profiles:
        quotas.refused["creates:44002"] += 1
        return codes.PROFILE_CAP
    if quotas.creates_left() == 0:
        quotas.refused["creates:44004"] += 1
        return codes.CREATE_QUOTA
    return None


def _create_one(
    em: GeeLarkEmulator,
    index: int,
    row: dict[str, Any],
    mobile_type: str,
    region: str,
    charge_mode: int,
) -> dict[str, Any]:
    """One `addNew` item: its `details` entry, the phone created if its code is 0."""
    name = row.get("profileName")

    def failed(code: int, msg: str | None = None) -> dict[str, Any]:
        return {
            "index": index,
            "code": code,
            "msg": msg or codes.MESSAGES.get(code, "failed"),
            "id": "",
            "profileName": name if isinstance(name, str) else "",
            "envSerialNo": "",
            "equipmentInfo": None,
        }

    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        return failed(codes.INVALID, "profileName is required (at most 100 characters)")
    proxy = None
    if row.get("proxyInformation") is not None:
        text = row["proxyInformation"]
        proxy = _proxy_of(text) if isinstance(text, str) else None
        if proxy is None:
            return failed(45004, "proxy validation failed")
    group, tags, note = (
        row.get("profileGroup"),
        row.get("profileTags", []),
        row.get("profileNote", ""),
    )
    if group is not None and (not isinstance(group, str) or not group):
        return failed(codes.INVALID, "profileGroup must be a non-empty string")
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        return failed(codes.INVALID, "profileTags must be a list of tag names")
    if not isinstance(note, str) or len(note) > 1500:
        return failed(codes.INVALID, "profileNote must be a string of at most 1500 characters")
    # Our choice: items past a cap fail one by one with the cap's code; the others are made.
    capped = _create_capped(em)
    if capped is not None:
        return failed(capped)
    if charge_mode == 1 and em.balance_left() < em.config.monthly_price:
        return failed(codes.BALANCE)
    injected = em.dice.item_failure(em.faults)
    if injected is not None:
        return failed(injected)
    em.quotas.creates += 1
    phone = em.phones.add(
        Phone(
            id=em.phones.new_id(),
            serial_no=0,
            name=name,
            mobile_type=mobile_type,
            region=region,
            charge_mode=charge_mode,
            created_at=em.now(),
            remark=note,
            group=group,
            tags=list(dict.fromkeys(tags)),
            proxy=proxy,
            rental=em.config.monthly_price if charge_mode == 1 else 0.0,
        )
    )
    return {
        "index": index,
        "code": 0,
        "msg": "success",
        "id": phone.id,
        "profileName": name,
        "envSerialNo": str(phone.serial_no),
        "equipmentInfo": phone.equipment,
    }


async def update(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    phone = em.phone(required_str(body, "id"))
    name = optional_str(body, "name", limit=100)
    remark = optional_str(body, "remark", limit=1500)
    group_id = optional_str(body, "groupID")
    tag_ids = body.get("tagIDs")
    if tag_ids is not None and (
        not isinstance(tag_ids, list) or not all(isinstance(t, str) for t in tag_ids)
    ):
        raise invalid("tagIDs must be a list of tag ids")
    group = None
    if group_id:
        group = em.phones.group_named(group_id)
        if group is None:
            raise GeeLarkError(codes.NOT_FOUND, "group not found")
    proxy = _proxy_config(body.get("proxyConfig"))
    fails = [
        {"code": codes.TAG_NOT_FOUND, "id": t, "msg": codes.MESSAGES[codes.TAG_NOT_FOUND]}
        for t in tag_ids or []
        if em.phones.tag_named(t) is None
    ]
    if fails:  # documented answer: the failures, nothing changed (our choice: nothing at all)
        return Result({"failDetails": fails})
    if name is not None:
        phone.name = name
    if remark is not None:
        phone.remark = remark
    if group is not None:
        phone.group = group
    if tag_ids is not None:
        phone.tags = [n for t in tag_ids if (n := em.phones.tag_named(t))]
    if proxy is not None:
        phone.proxy = proxy
    em.phones.touch(phone, em.now())
    return Result(None)


def _proxy_config(config: Any) -> dict[str, Any] | None:
    if config is None:
        return None
    kinds = {1: "socks5", 2: "http", 3: "https"}
    if not isinstance(config, dict) or config.get("typeId") not in kinds:
        raise invalid("proxyConfig.typeId must be 1 (socks5), 2 (http) or 3 (https)")
    server, port = config.get("server"), config.get("port")
    if not isinstance(server, str) or not server:
        raise invalid("proxyConfig.server is required")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise invalid("proxyConfig.port must be an integer between 1 and 65535")
    user, password = config.get("username", ""), config.get("password", "")
    if not isinstance(user, str) or not isinstance(password, str):
        raise invalid("proxyConfig.username and password must be strings")
    return {
        "type": kinds[config["typeId"]],
        "server": server,
        "port": port,
        "username": user,
        "password": password,
    }


async def new_one(em: GeeLarkEmulator, body: dict[str, Any]) -> Result:
    phone = em.phone(required_str(body, "id"))
    if phone.status == EXPIRED:
        raise GeeLarkError(codes.EXPIRED)
    if phone.task_running:
        raise GeeLarkError(codes.TASK_RUNNING)
    if phone.remote:
        raise GeeLarkError(codes.REMOTE_CONTROL)
    quotas = em.quotas_today()
    if quotas.creates_left() == 0:
        quotas.refused["creates:44004"] += 1
        raise GeeLarkError(codes.CREATE_QUOTA)
    quotas.creates += 1
    phone.equipment = em.phones.equipment(phone.mobile_type)
    em.phones.counters["newIdentities"] += 1
    return Result(None)


ROUTES = {
    "open/v1/phone/list": phone_list,
    "open/v1/phone/addNew": add_new,
    "open/v1/phone/detail/update": update,
    "open/v2/phone/newOne": new_one,
}
