"""How a lease's holder reaches its device: `ConnectInfo` (ADB for a cloud phone, CDP for a
browser profile), and the `lease_connect` activities' inputs.

The ADB password (`code`) and the CDP websocket URL (its path is the browser's only key) are
secrets of the holder: never in `repr`/`str` (so never in a log line), never in a validation
error (`hide_input_in_errors`). They travel in the activity's result and the `lease_connect`
update's answer only, which a worker refuses to write while its history is not encrypted
(docs/leases.md, "Connect info").
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ConfigDict, Field

from devicepool.api.base import CamelModel

__all__ = [
    "NOT_ENCRYPTED",
    "AdbLogin",
    "CdpEndpoint",
    "ConnectInfo",
    "LeaseConnectInput",
    "NodeConnectInput",
    "parse_adb",
]

# Why connect info is refused while payloads are written in clear (the alternative named).
NOT_ENCRYPTED = (
    "connect info is sent only through encrypted history (this worker has no payload"
    " codec: `encryption.keyFiles`); read it outside Temporal with `devicepool connect"
    " POOL LEASE --config WORKER_CONFIG`"
)
# Longest field kept from a provider's answer (an address, a URL): more is not an address.
_MAX_TEXT = 2048

# Answers a newer worker may extend: an older client ignores what it does not know.
_SECRET = ConfigDict(
    **{**CamelModel.model_config, "extra": "ignore", "hide_input_in_errors": True, "frozen": True}
)


class AdbLogin(CamelModel):
    """`adb connect IP:PORT`, then the password `code` (the BitBrowser client's word)."""

    model_config = _SECRET

    ip: str = Field(max_length=_MAX_TEXT)
    port: int = Field(ge=1, le=65535)
    code: str = Field(default="", repr=False, max_length=_MAX_TEXT)


class CdpEndpoint(CamelModel):
    """Where the Chrome DevTools Protocol drives an open browser: `ws` (the browser's
    websocket URL, its own key) and `http` (`host:port`, as `/browser/open` answers it)."""

    model_config = _SECRET

    ws: str = Field(default="", repr=False, max_length=_MAX_TEXT)
    http: str = Field(default="", max_length=_MAX_TEXT)


class ConnectInfo(CamelModel):
    """One device's connect info: `adb` (cloud phones, REST devices), `cdp` (browser
    profiles), or neither and why not (`message`: ADB off, browser not open)."""

    model_config = _SECRET

    adb: AdbLogin | None = None
    cdp: CdpEndpoint | None = None
    message: str = ""

    def empty(self) -> bool:
        return self.adb is None and self.cdp is None


class LeaseConnectInput(CamelModel):
    """Activity `lease_connect`: one device of `pool` on `account`."""

    account: str
    pool: str
    device: str


class NodeConnectInput(CamelModel):
    """Node activity `node_lease_connect`: one profile, its browser opened if it is not."""

    id: str


def parse_adb(value: Any) -> AdbLogin | None:
    """The ADB login a provider answered: a mapping `{ip, port, code}` or the Local API's
    JSON *string* of one (`"{\\"code\\":...,\\"port\\":21136,\\"ip\\":...}"`). None for
    anything else ("", garbage, a port out of range, `nan`): never an error that could
    quote the password."""
    if isinstance(value, str):
        if not value.strip() or len(value) > 4 * _MAX_TEXT:
            return None
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # `[[[[...`: too deep to be a login
            return None
    if not isinstance(value, dict):
        return None
    ip, port, code = value.get("ip"), value.get("port"), value.get("code", "")
    port = _port(port)
    if not isinstance(ip, str) or not ip.strip() or port is None:
        return None
    if code is None:
        code = ""
    if not isinstance(code, str | int) or isinstance(code, bool):
        return None
    ip, code = ip.strip(), str(code)
    if len(ip) > _MAX_TEXT or len(code) > _MAX_TEXT:
        return None
    return AdbLogin(ip=ip, port=port, code=code)


def _port(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 1 <= value <= 65535:
        return value
    return None
