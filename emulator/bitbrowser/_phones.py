"""Cloud phones (`/phone/*`): profiles, their power state, billing and the recover quota.

A phone profile exists powered off. `openphone` boots it (`boot_seconds` from
off, `resume_seconds` from suspended); `running` is true only once it is up
and resumed (booting, suspended or offline: false); `suspend` closes the
window and keeps it powered; `shutdown` powers it off, `shutdown_seconds` after
the call (0: at once; meanwhile it is listed and runs as before). There is no delete.

Billing by compute type: monthly (2) is billed from creation, whatever its
power; temporary (1) and smart (0, undocumented: taken as temporary) are billed
from the power-on call until the shutdown, suspended time included.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._bodies import (
    Page,
    as_int,
    optional_int,
    optional_str,
    required_id,
)
from devicepool.emulator.bitbrowser._envelope import LocalApiError

Power = Literal["off", "booting", "running", "suspended"]
STATUS_CODES: dict[str, int] = {"off": 0, "booting": 1, "running": 2, "suspended": 3}
COMPUTE_TYPES = (0, 1, 2)
MONTHLY = 2
IP_CHECK_SERVICES = ("ip123in", "ip-api")
NAME_LIMIT, REMARK_LIMIT, PROXY_LIMIT = 30, 500, 200
SECRET_FIELDS = ("proxyPassword",)

_FIELDS: dict[str, Any] = {
    "name": "",
    "remark": "",
    "groupId": "",
    "regionId": "",
    "computeType": 0,
    "host": "",
    "port": 0,
    "proxyUserName": "",
    "proxyPassword": "",
    "ipCheckService": "ip123in",
    "udp": 1,
    "cloudPhonesFingerPrint": {},
}


@dataclass
class Phone:
    id: str
    seq: int
    fields: dict[str, Any]
    created_at: float
    created: str
    updated: str
    power: Power = "off"
    ready_at: float = 0.0
    offline: bool = False
    billed_seconds: float = 0.0
    billing_since: float | None = None
    recovers: dict[str, int] = field(default_factory=dict)
    adb_code: str = ""
    # When an accepted shutdown takes effect (None: none pending).
    off_at: float | None = None

    def running(self) -> bool:
        return self.power == "running" and not self.offline

    def billed(self, now: float) -> float:
        since = self.billing_since
        return self.billed_seconds + (now - since if since is not None else 0.0)

    def to_json(self, *, adb_enabled: bool = True) -> dict[str, Any]:
        """A `/phone/list` item (fields undocumented; chosen): secrets included. `adb` only
        while ADB is enabled for the environment (`POST /_emulator/adb`) and it runs."""
        adb = ""
        if adb_enabled and self.running():
            # The docs: a JSON string, `code` being the adb password.
            adb = json.dumps({"code": self.adb_code, "port": 20000 + self.seq, "ip": "10.0.0.1"})
        return {
            "id": self.id,
            "seq": self.seq,
            **copy.deepcopy(self.fields),
            "status": STATUS_CODES[self.power],
            "adb": adb,
            "createdTime": self.created,
            "updateTime": self.updated,
        }

    def secrets(self) -> list[str]:
        found = [str(self.fields[k]) for k in SECRET_FIELDS if self.fields.get(k)]
        return [*found, self.adb_code] if self.adb_code else found


@dataclass
class PhoneTimes:
    boot: float
    resume: float
    restart: float
    shutdown: float = 0.0


class PhoneStore:
    """The account's cloud phones and phone groups."""

    def __init__(
        self,
        rng: random.Random,
        *,
        times: PhoneTimes,
        regions: list[str] | None,
        recovers_per_month: int,
        month_of: Callable[[float], str],
    ) -> None:
        self._rng = rng
        self.times = times
        self._regions = regions
        self._recovers_per_month = recovers_per_month
        self._month_of = month_of
        self.phones: dict[str, Phone] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        # created, power_ons, resumes, suspends, shutdowns, restarts, recovers
        self.counters: Counter[str] = Counter()
        self.next_seq = 1
        # ADB enabled for the environment (the client's setting): `/phone/list` answers logins.
        self.adb_enabled = True

    def _new_id(self) -> str:
        return f"{self._rng.getrandbits(128):032x}"

    # ----------------------------------------------------------- records

    def get(self, body: dict[str, Any], now: float) -> Phone:
        phone_id = body.get("id")
        if not isinstance(phone_id, str) or not phone_id:
            raise LocalApiError(text.PHONE_ID_REQUIRED)
        phone = self.phones.get(phone_id)
        if phone is None:
            raise LocalApiError(text.PHONE_NOT_FOUND)
        return self.settle(phone, now)

    def settle(self, phone: Phone, now: float) -> Phone:
        if phone.off_at is not None and now >= phone.off_at:
            self._power_off(phone, phone.off_at)
        if phone.power == "booting" and not phone.offline and now >= phone.ready_at:
            phone.power = "running"
        return phone

    def add(self, body: dict[str, Any], now: float, stamp: str) -> Phone:
        fields = copy.deepcopy(_FIELDS)
        fields.update({k: copy.deepcopy(v) for k, v in body.items() if k in _FIELDS})
        if body.get("computeType") in (None, ""):
            fields["computeType"] = 0
        self._check(fields, body)
        phone = Phone(self._new_id(), self.next_seq, fields, now, stamp, stamp)
        phone.adb_code = f"{self._rng.getrandbits(72):018x}"
        if fields["computeType"] == MONTHLY:
            phone.billing_since = now
        self.next_seq += 1
        self.phones[phone.id] = phone
        self.counters["created"] += 1
        return phone

    def update(self, phone: Phone, body: dict[str, Any], stamp: str) -> Phone:
        """`/phone/profile/update`: a partial body; the compute type cannot change."""
        region = body.get("regionId")
        if region not in (None, "") and region != phone.fields["regionId"]:
            raise LocalApiError(text.PHONE_REGION_FROZEN)
        if "computeType" in body and as_int(body["computeType"]) != phone.fields["computeType"]:
            raise LocalApiError(text.PHONE_REGION_FROZEN)
        merged = {**phone.fields, **{k: v for k, v in body.items() if k in _FIELDS}}
        merged["regionId"] = phone.fields["regionId"]
        self._check(merged, merged)
        phone.fields = merged
        phone.updated = stamp
        return phone

    def listing(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        page = Page.parse(body)
        group_id, name, host = (optional_str(body, k) for k in ("groupId", "name", "host"))
        seq, min_seq, max_seq = (optional_int(body, k) for k in ("seq", "minSeq", "maxSeq"))
        chosen = [
            self.settle(p, now)
            for p in self.phones.values()
            if (group_id is None or p.fields["groupId"] == group_id)
            and (name is None or name in p.fields["name"])
            and (host is None or p.fields["host"] == host)
            and (seq is None or p.seq == seq)
            and (min_seq is None or p.seq > min_seq)
            and (max_seq is None or p.seq < max_seq)
        ]
        chosen.sort(key=lambda p: p.seq, reverse=True)
        return page.answer([p.to_json(adb_enabled=self.adb_enabled) for p in chosen])

    def _check(self, fields: dict[str, Any], body: dict[str, Any]) -> None:
        region = fields["regionId"]
        if not isinstance(region, str) or not region:
            raise LocalApiError(text.PHONE_REGION_REQUIRED)
        if self._regions is not None and region not in self._regions:
            raise LocalApiError(text.PHONE_REGION_UNKNOWN)
        compute = as_int(fields["computeType"])
        if compute not in COMPUTE_TYPES:
            raise LocalApiError(text.PHONE_COMPUTE_TYPE)
        fields["computeType"] = compute
        for name in ("host", "port", "proxyUserName", "proxyPassword"):
            if body.get(name) in (None, "") or fields[name] in (None, ""):
                raise LocalApiError(text.PHONE_PROXY_REQUIRED.format(field=name))
        port = as_int(fields["port"])
        if port is None or not 0 < port < 65536:
            raise LocalApiError(f"port {text.BAD_FIELD}")
        fields["port"] = port
        for name, limit in (
            ("name", NAME_LIMIT),
            ("remark", REMARK_LIMIT),
            ("proxyUserName", PROXY_LIMIT),
            ("proxyPassword", PROXY_LIMIT),
            ("host", PROXY_LIMIT),
        ):
            if not isinstance(fields[name], str):
                raise LocalApiError(f"{name} {text.BAD_FIELD}")
            if len(fields[name]) > limit:
                raise LocalApiError(text.PHONE_TOO_LONG.format(field=name, limit=limit))
        if fields["ipCheckService"] not in IP_CHECK_SERVICES:
            raise LocalApiError(f"ipCheckService {text.BAD_FIELD}")
        if as_int(fields["udp"]) not in (0, 1):
            raise LocalApiError(f"udp {text.BAD_FIELD}")
        if not isinstance(fields["cloudPhonesFingerPrint"], dict):
            raise LocalApiError(f"cloudPhonesFingerPrint {text.BAD_FIELD}")
        if fields["groupId"] and (
            not isinstance(fields["groupId"], str) or fields["groupId"] not in self.groups
        ):
            raise LocalApiError(text.GROUP_NOT_FOUND)

    # ------------------------------------------------------------- power

    def _billing_on(self, phone: Phone, now: float) -> None:
        if phone.billing_since is None:
            phone.billing_since = now

    def _billing_off(self, phone: Phone, now: float) -> None:
        if phone.fields["computeType"] != MONTHLY and phone.billing_since is not None:
            phone.billed_seconds += now - phone.billing_since
            phone.billing_since = None

    def open(self, phone: Phone, now: float) -> None:
        """`openphone`: asynchronous; a phone already up or booting is left as it is."""
        phone.off_at = None  # a shutdown still pending is called off
        if phone.power in ("running", "booting"):
            return
        seconds = self.times.resume if phone.power == "suspended" else self.times.boot
        if phone.power == "suspended":
            self.counters["resumes"] += 1
        self.counters["power_ons"] += 1
        self._billing_on(phone, now)
        phone.power = "booting"
        phone.ready_at = now + seconds

    def suspend(self, phone: Phone) -> None:
        if phone.power == "suspended":
            return
        if phone.power != "running":
            raise LocalApiError(text.PHONE_NOT_ON)
        phone.power = "suspended"
        self.counters["suspends"] += 1

    def shutdown(self, phone: Phone, now: float) -> None:
        """Asynchronous, as the vendor's power calls are: off `times.shutdown` seconds
        later (0: at once); a shutdown already pending keeps its time."""
        if phone.power == "off" or phone.off_at is not None:
            return
        self.counters["shutdowns"] += 1
        if self.times.shutdown > 0:
            phone.off_at = now + self.times.shutdown
        else:
            self._power_off(phone, now)

    def _power_off(self, phone: Phone, now: float) -> None:
        phone.off_at = None
        phone.power = "off"
        self._billing_off(phone, now)

    def restart(self, phone: Phone, now: float) -> None:
        if phone.power == "off":
            raise LocalApiError(text.PHONE_NOT_ON)
        phone.power = "booting"
        phone.ready_at = now + self.times.restart
        self.counters["restarts"] += 1

    def recover(self, phone: Phone, now: float) -> None:
        """A fresh start: a new fingerprint and adb password; a powered phone boots again, and an
        offline one is back (a reset is what fixes a wedged phone, if anything does)."""
        month = self._month_of(now)
        if phone.recovers.get(month, 0) >= self._recovers_per_month:
            raise LocalApiError(text.PHONE_RECOVER_QUOTA)
        phone.recovers[month] = phone.recovers.get(month, 0) + 1
        phone.fields["cloudPhonesFingerPrint"] = {}
        phone.adb_code = f"{self._rng.getrandbits(72):018x}"
        phone.offline = False
        if phone.power != "off":
            phone.power = "booting"
            phone.ready_at = now + self.times.boot
        self.counters["recovers"] += 1

    # ------------------------------------------------------------ groups

    def add_group(self, body: dict[str, Any]) -> dict[str, Any]:
        name = optional_str(body, "groupName")
        if name is None:
            raise LocalApiError(text.GROUP_NAME_REQUIRED)
        group_id = self._new_id()
        group = {"id": group_id, "groupName": name, "sortNum": optional_int(body, "sortNum") or 0}
        self.groups[group_id] = group
        return group

    def edit_group(self, body: dict[str, Any]) -> dict[str, Any]:
        group = self.groups.get(required_id(body, text.GROUP_NOT_FOUND))
        if group is None:
            raise LocalApiError(text.GROUP_NOT_FOUND)
        name = optional_str(body, "groupName")
        if name is None:
            raise LocalApiError(text.GROUP_NAME_REQUIRED)
        group.update(groupName=name, sortNum=optional_int(body, "sortNum") or 0)
        return group

    def delete_group(self, body: dict[str, Any]) -> None:
        group_id = required_id(body, text.GROUP_NOT_FOUND)
        if self.groups.pop(group_id, None) is None:
            raise LocalApiError(text.GROUP_NOT_FOUND)
        for phone in self.phones.values():
            if phone.fields["groupId"] == group_id:
                phone.fields["groupId"] = ""

    def list_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        groups = sorted(self.groups.values(), key=lambda g: (g["sortNum"], g["groupName"]))
        return Page.parse(body).answer([dict(g) for g in groups])

    def phones_of(self, body: dict[str, Any]) -> list[Phone]:
        ids = body.get("phoneIds")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise LocalApiError(text.PHONE_IDS_REQUIRED)
        missing = [i for i in ids if i not in self.phones]
        if missing:
            raise LocalApiError(f"{text.PHONE_NOT_FOUND}：{missing[0]}")
        return [self.phones[i] for i in dict.fromkeys(ids)]
