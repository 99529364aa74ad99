"""Browser profiles and their groups: the account-wide store every node lists.

A profile is a record of user fields (`DEFAULTS` names them, with the value a
field takes when a create leaves it out) plus what the vendor sets (`id`,
`seq`, times). `/browser/update` without an id creates; with an id it replaces
the whole record, so a body that leaves out a field the record holds a value in
would wipe it: that body is refused (`REPLACE_NEEDS_WHOLE_RECORD`).
`/browser/update/partial` merges. List and detail answers carry every field
the vendor documents for `/browser/detail`, secrets included (`SECRET_FIELDS`):
the user fields, and what the vendor keeps itself (`VENDOR_FIELDS`, with the
values a profile nobody touched in the desktop client holds; `lastIp` and
`lastCountry` are those of its last open, an exit address stable per proxy
session).
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._bodies import Page, as_int, optional_int, optional_str
from devicepool.emulator.bitbrowser._envelope import LocalApiError

PROXY_METHODS = (2, 3)
PROXY_TYPES = ("noproxy", "http", "https", "socks5", "ssh")
SECRET_FIELDS = ("password", "cookie", "proxyPassword", "faSecretKey")
API_GROUP_NAME = "API"

# The user fields of a profile and their values when a create leaves them out.
DEFAULTS: dict[str, Any] = {
    "groupId": "",
    "platform": "",
    "platformIcon": "",
    "url": "",
    "name": "",
    "remark": "",
    "userName": "",
    "password": "",
    "faSecretKey": "",
    "cookie": "",
    "isSynOpen": False,
    "proxyMethod": 2,
    "proxyType": "noproxy",
    "host": "",
    "port": "",
    "proxyUserName": "",
    "proxyPassword": "",
    "refreshProxyUrl": "",
    "ipCheckService": "ip-api",  # documented: "default ip-api"
    "isIpv6": False,
    "isIpNoChange": False,
    "ip": "",
    "country": "",
    "province": "",
    "city": "",
    "dynamicIpUrl": "",
    "dynamicIpChannel": "",
    "isDynamicIpChangeIp": False,
    "isGlobalProxyInfo": False,
    "workbench": "localserver",
    "abortImage": False,
    "abortMedia": False,
    "muteAudio": False,
    "stopWhileNetError": False,
    "stopWhileIpChange": False,
    "stopWhileCountryChange": False,
    "syncTabs": True,
    "syncCookies": True,
    "syncIndexedDb": False,
    "syncLocalStorage": False,
    "syncBookmarks": False,
    "syncAuthorization": False,
    "syncHistory": False,
    "syncExtensions": False,
    "credentialsEnableService": False,
    "allowedSignin": True,  # documented: "default true"
    "syncUserExtensions": False,
    "syncGoogleAccount": False,
    "syncSessions": False,
    "syncPaymentsAndAddress": False,
    "clearCacheWithoutExtensions": False,
    "enableBackgroundMode": False,
    "isValidUsername": False,
    "otherCookie": "",
    "clearCacheFilesBeforeLaunch": False,
    "clearCookiesBeforeLaunch": False,
    "clearHistoriesBeforeLaunch": False,
    "randomFingerprint": False,
    "disableGpu": False,
    "disableTranslatePopup": False,
    "disableNotifications": False,
    "disableClipboard": False,
    "memorySaver": False,
    "browserFingerPrint": {},
}

# What the vendor keeps of a profile itself (never taken from a body), as a profile
# made through the API and never touched in the desktop client holds them.
EMULATED_USER_ID = "2c9c29a27e230d14017e23c151ce0036"
VENDOR_FIELDS: dict[str, Any] = {
    "agentId": "",
    "operUserName": "",
    "delReason": "",
    "isMostCommon": 0,
    "isRemove": 0,
    "tempStr": None,
    "createdBy": EMULATED_USER_ID,
    "userId": EMULATED_USER_ID,
    "mainUserId": EMULATED_USER_ID,
    "recycleBinRemark": "",
    "abortImageMaxSize": None,
    "createdName": None,
    "belongUserName": None,
    "updateName": None,
    "agentIpCount": None,
    "belongToMe": False,
    "seqExport": None,
    "groupIDs": None,
    "browserShareID": None,
    "share": None,
    "shareUserName": None,
    "isShare": 0,
    "createNum": 0,
    "isRandomFinger": True,
    "remarkType": 1,
    "duplicateCheck": 0,
    "ossExtend": None,
    "randomKey": None,
    "randomKeyUser": None,
    "syncBrowserAccount": None,
    "cookieBak": "",
    "passwordBak": None,
    "manual": 0,
    "proxyPasswordBak": None,
    "proxyAgreementType": None,
    "extendIds": [],
    "coreProduct": None,
    "ostype": None,
    "os": None,
    "sort": 0,
    "checkPassword": None,
}
# The exit of a profile without a proxy: the desktop's own address.
_DESKTOP_IP = "198.51.100.7"

_CORE_VERSIONS = ("130", "128", "126", "124")
_OS_BY_TYPE = {"PC": "Win32", "Android": "Linux armv81", "IOS": "iPhone"}


@dataclass
class Profile:
    id: str
    seq: int
    fields: dict[str, Any]
    created: str
    updated: str
    # Where its last open went out from ("" until opened), as the vendor records it.
    last_ip: str = ""
    last_country: str = ""

    def to_json(self) -> dict[str, Any]:
        """What `/browser/list` and `/browser/detail` answer: every field, secrets included."""
        return {
            "id": self.id,
            "seq": self.seq,
            **copy.deepcopy(VENDOR_FIELDS),
            **copy.deepcopy(self.fields),
            "lastIp": self.last_ip,
            "lastCountry": self.last_country,
            "status": 0,
            "isDelete": 0,
            "createdTime": self.created,
            "updateTime": self.updated,
        }

    def opened(self) -> None:
        """Record the exit of an open: the proxy's, stable per host and session user."""
        if self.fields["proxyType"] == "noproxy" or not self.fields["host"]:
            self.last_ip, self.last_country = _DESKTOP_IP, "美国"
            return
        key = f"{self.fields['host']}|{self.fields['proxyUserName']}".encode()
        a, b, c, d = hashlib.sha256(key).digest()[:4]
        self.last_ip, self.last_country = f"{100 + a % 100}.{b}.{c}.{1 + d % 254}", "美国"

    def secrets(self) -> list[str]:
        return [str(self.fields[k]) for k in SECRET_FIELDS if self.fields.get(k)]


@dataclass
class Group:
    id: str
    name: str
    sort_num: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "groupName": self.name, "sortNum": self.sort_num}


@dataclass
class ProfileStore:
    """The account's profiles and groups; ids and fingerprints from a seeded RNG."""

    rng: random.Random
    profiles: dict[str, Profile] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    next_seq: int = 1

    def new_id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    # ------------------------------------------------------------ groups

    def add_group(self, body: dict[str, Any]) -> Group:
        name = optional_str(body, "groupName")
        if name is None:
            raise LocalApiError(text.GROUP_NAME_REQUIRED)
        group = Group(self.new_id(), name, optional_int(body, "sortNum") or 0)
        self.groups[group.id] = group
        return group

    def api_group(self) -> Group:
        """The group a profile created without `groupId` lands in (made on first use)."""
        for group in self.groups.values():
            if group.name == API_GROUP_NAME:
                return group
        group = Group(self.new_id(), API_GROUP_NAME, 0)
        self.groups[group.id] = group
        return group

    def list_groups(self, page: Page) -> dict[str, Any]:
        groups = sorted(self.groups.values(), key=lambda g: (g.sort_num, g.name))
        return page.answer([g.to_json() for g in groups])

    # ---------------------------------------------------------- profiles

    def get(self, profile_id: Any) -> Profile:
        profile = self.profiles.get(profile_id) if isinstance(profile_id, str) else None
        if profile is None:
            raise LocalApiError(text.PROFILE_NOT_FOUND)
        return profile

    def create(self, body: dict[str, Any], now: str) -> Profile:
        fields = self._whole_record(body)
        profile = Profile(self.new_id(), self.next_seq, fields, now, now)
        self.next_seq += 1
        self.profiles[profile.id] = profile
        return profile

    def replace(self, profile: Profile, body: dict[str, Any], now: str) -> Profile:
        """`/browser/update` with an id: the body becomes the whole record."""
        missing = [
            name
            for name, value in profile.fields.items()
            if name not in body and not self._is_default(name, value)
        ]
        if missing:
            raise LocalApiError(text.REPLACE_NEEDS_WHOLE_RECORD.format(missing=", ".join(missing)))
        profile.fields = self._whole_record(body)
        profile.updated = now
        return profile

    def update_partial(self, profiles: list[Profile], body: dict[str, Any], now: str) -> None:
        changes = {k: v for k, v in body.items() if k in DEFAULTS}
        for profile in profiles:
            merged = {**profile.fields, **changes}
            if isinstance(changes.get("browserFingerPrint"), dict):
                merged["browserFingerPrint"] = {
                    **profile.fields["browserFingerPrint"],
                    **changes["browserFingerPrint"],
                }
            self._check(merged)
            profile.fields = merged
            profile.updated = now

    def delete(self, profile: Profile) -> None:
        del self.profiles[profile.id]

    def listing(self, body: dict[str, Any]) -> dict[str, Any]:
        """`/browser/list`: filters, newest first unless `sort: asc`, then one page."""
        page = Page.parse(body)
        group_id = optional_str(body, "groupId")
        name = optional_str(body, "name")
        remark = optional_str(body, "remark")
        seq, min_seq, max_seq = (optional_int(body, k) for k in ("seq", "minSeq", "maxSeq"))
        chosen = [
            p
            for p in self.profiles.values()
            if (group_id is None or p.fields["groupId"] == group_id)
            and (name is None or name in p.fields["name"])
            and (remark is None or remark in p.fields["remark"])
            and (seq is None or p.seq == seq)
            and (min_seq is None or p.seq > min_seq)
            and (max_seq is None or p.seq < max_seq)
        ]
        chosen.sort(key=lambda p: p.seq, reverse=body.get("sort") != "asc")
        return page.answer([p.to_json() for p in chosen])

    def duplicates(self, key: str) -> dict[str, int]:
        counts = Counter(p.fields[key] for p in self.profiles.values() if p.fields[key])
        return {value: n for value, n in sorted(counts.items()) if n > 1}

    # ------------------------------------------------------------ fields

    def _whole_record(self, body: dict[str, Any]) -> dict[str, Any]:
        if "proxyMethod" not in body or body["proxyMethod"] in (None, ""):
            raise LocalApiError(text.PROXY_METHOD_REQUIRED)
        if body.get("proxyType") in (None, ""):
            raise LocalApiError(text.PROXY_TYPE_REQUIRED)
        if not isinstance(body.get("browserFingerPrint"), dict):
            raise LocalApiError(text.FINGERPRINT_REQUIRED)
        fields = copy.deepcopy(DEFAULTS)
        fields.update({k: copy.deepcopy(v) for k, v in body.items() if k in DEFAULTS})
        if not fields["groupId"]:
            fields["groupId"] = self.api_group().id
        fields["browserFingerPrint"] = self._fingerprint(fields["browserFingerPrint"])
        self._check(fields)
        return fields

    def _check(self, fields: dict[str, Any]) -> None:
        method = as_int(fields["proxyMethod"])
        if method not in PROXY_METHODS:
            raise LocalApiError(text.PROXY_METHOD_REQUIRED)
        fields["proxyMethod"] = method
        if fields["proxyType"] not in PROXY_TYPES:
            raise LocalApiError(text.PROXY_TYPE_REQUIRED)
        if fields["port"] not in ("", None):
            port = as_int(fields["port"])
            if port is None or not 0 < port < 65536:
                raise LocalApiError(f"port {text.BAD_FIELD}")
            fields["port"] = port
        if not isinstance(fields["groupId"], str) or fields["groupId"] not in self.groups:
            raise LocalApiError(text.GROUP_NOT_FOUND)
        for name, default in DEFAULTS.items():
            value = fields[name]
            if isinstance(default, bool) and not isinstance(value, bool):
                raise LocalApiError(f"{name} {text.BAD_FIELD}")
            if isinstance(default, str) and name != "port" and not isinstance(value, str):
                raise LocalApiError(f"{name} {text.BAD_FIELD}")
            if name == "browserFingerPrint" and not isinstance(value, dict):
                raise LocalApiError(text.FINGERPRINT_REQUIRED)

    def _is_default(self, name: str, value: Any) -> bool:
        if name == "groupId":
            return value == self.api_group().id
        if name == "browserFingerPrint":
            return False  # always generated: a replace must send one ({} = random again)
        return bool(value == DEFAULTS[name])

    def _fingerprint(self, given: dict[str, Any]) -> dict[str, Any]:
        """Fill what `given` leaves empty at random, as the vendor does for `{}`."""
        ostype = given.get("ostype") or "PC"
        core = given.get("coreVersion") or self.rng.choice(_CORE_VERSIONS)
        filled = {
            "coreProduct": "chrome",
            "coreVersion": core,
            "ostype": ostype,
            "os": _OS_BY_TYPE.get(str(ostype), "Win32"),
            "version": core,
            "userAgent": (
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
                f"(KHTML, like Gecko) Chrome/{core}.0.{self.rng.randrange(6000, 7000)}.100 "
                "Safari/537.36"
            ),
            "isIpCreateTimeZone": True,
            "webRTC": "3",
            "hardwareConcurrency": str(self.rng.choice((4, 8, 12, 16))),
            "deviceMemory": str(self.rng.choice((4, 8))),
            "canvasValue": str(self.rng.randrange(10_000, 1_000_000)),
            "computerName": f"DESKTOP-{self.rng.getrandbits(32):08X}",
        }
        filled.update({k: v for k, v in given.items() if v not in ("", None)})
        return filled
