"""What the Local API client returns: allow-lists of the vendor's answers, without their secrets.

A list or detail answer carries secrets (passwords, cookies, the 2FA key, the adb
password). These models name the fields devicepool reads and ignore every other,
so a secret never becomes part of a returned object (field, `model_extra`, `repr`):
add a field a caller needs by name, never by letting extras through. Validation is
tolerant (numbers as strings, `""` absent, unknown fields ignored); `id` is required.
"""

from __future__ import annotations

import json
import re
from enum import IntEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, SecretStr, field_validator

from devicepool.api.base import CamelModel

# The documented page-size cap of `/browser/list` and `/phone/list` (more is cut to it).
MAX_PAGE_SIZE = 100


# An integer as the vendor sends one: ASCII digits (`"²".isdigit()` is true, `int("²")`
# fails), few enough that `int()` takes them and a 64-bit field holds them.
_INTEGER = re.compile(r"-?[0-9]{1,18}")
_MAX_INT = 2**63


def _optional_int(value: Any) -> Any:
    """`""`, None and garbage are absent; `"59059"` is 59059 (the docs send ports as both).

    Never raises: one odd field must not fail a whole page of a listing."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and -_MAX_INT < value < _MAX_INT:
        return value
    return None


def _text(value: Any) -> Any:
    """A free-text field: None is `""`, a number is its text."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


OptionalInt = Annotated[int | None, BeforeValidator(_optional_int)]
Text = Annotated[str, BeforeValidator(_text)]


class _Answer(CamelModel):
    """An answer of the vendor: unknown fields ignored (so never kept), frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _Identified(_Answer):
    """What a listed profile of either family starts with."""

    id: str = Field(min_length=1)
    seq: OptionalInt = None
    name: Text = ""
    remark: Text = ""
    group_id: Text = ""

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class BrowserProfile(_Identified):
    """A browser profile as `/browser/list` or `/browser/detail` shows it, secrets left out."""

    host: Text = ""
    port: OptionalInt = None
    last_ip: Text = ""
    status: OptionalInt = None


class BrowserPage(_Answer):
    """One page of `/browser/list`: `total` is None when the answer does not say."""

    items: list[BrowserProfile]
    total: OptionalInt = None


class OpenedBrowser(_Answer):
    """What `/browser/open` answers: where to drive the browser, and its process."""

    id: str
    ws: Text = ""
    # `host:port` without a scheme, as the vendor answers it.
    http: Text = ""
    pid: OptionalInt = None
    core_version: Text = ""
    seq: OptionalInt = None


class ComputeType(IntEnum):
    """`computeType` of a cloud phone: what it is billed by."""

    SMART = 0
    TEMPORARY = 1
    MONTHLY = 2


class PhoneStatus(IntEnum):
    """`status` of a `/phone/list` item, as far as it is known (undocumented: check it)."""

    OFF = 0
    BOOTING = 1
    RUNNING = 2
    SUSPENDED = 3


class AdbEndpoint(_Answer):
    """Where adb reaches a running phone. The vendor's `code` (the adb password) is not kept."""

    ip: Text = ""
    port: OptionalInt = None


def _adb(value: Any) -> Any:
    """`adb` is a JSON *string* (`{"code", "port", "ip"}`) while adb is on, else `""`."""
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    # Only what AdbEndpoint names: the password never reaches a model, even an ignored extra.
    return {k: value[k] for k in ("ip", "port") if k in value}


class Phone(_Identified):
    """A cloud-phone profile as `/phone/list` shows it, secrets (proxy, adb password) left out."""

    region_id: Text = ""
    compute_type: OptionalInt = None
    # An int of `PhoneStatus`, kept raw: a status the vendor adds still loads.
    status: OptionalInt = None
    host: Text = ""
    port: OptionalInt = None
    adb: Annotated[AdbEndpoint | None, BeforeValidator(_adb)] = None


class PhonePage(_Answer):
    items: list[Phone]
    total: OptionalInt = None


class MarkedCreate(_Answer):
    """The answer of a create checked by its mark.

    `created` is False when an earlier attempt had made it; `duplicates` are the
    ids of other objects holding the same mark (an answer lost on the way, a
    create the server finished after the look-up): the caller removes them.
    """

    id: str
    created: bool
    duplicates: list[str] = Field(default_factory=list)


class ProfileProxy(CamelModel):
    """A browser profile's proxy (`proxyMethod` 2, custom). Worker-side only: it holds a password."""

    model_config = ConfigDict(frozen=True)

    type: str = "socks5"  # noproxy | http | https | socks5 | ssh
    host: str = ""
    port: int | None = None
    username: str = ""
    password: SecretStr = SecretStr("")


class PhoneProxy(CamelModel):
    """A cloud phone's proxy (all four are required by `/phone/profile/add`). Worker-side only."""

    model_config = ConfigDict(frozen=True)

    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    username: str = Field(max_length=200)
    password: SecretStr

    def fields(self) -> dict[str, Any]:
        """The proxy as `/phone/profile/add` and `/phone/profile/update` take it."""
        return {
            "host": self.host,
            "port": self.port,
            "proxyUserName": self.username,
            "proxyPassword": self.password.get_secret_value(),
        }
