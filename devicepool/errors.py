"""The root of the errors a devicepool user can meet (the tree is drawn in `devicepool.client.errors`)."""

from __future__ import annotations

import re
from pathlib import Path

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_BAD_INPUT = 2

# `host:port`, `[v6]:port`; the port is what a bare host lacks.
_HOST_PORT = re.compile(r"^(?:\[[^\]]+\]|[^:\[\]/]+):(?P<port>\d+)$")
# The Web UI's and the server's ports of `temporal server start-dev` and `devicepool dev`.
DEV_UI_PORT = 8233
DEV_SERVER_PORT = 7233
# What the lock of `devicepool dev`'s default data dir says while it runs (client/_dev_stack.py):
# a stack started with other ports names them there.
DEV_LOCK = Path(".devicepool") / "lock"
_LOCK_PORTS = re.compile(r"Temporal (?P<server>[^,\s]+), Web UI port (?P<ui>\d+)")


class DevicePoolError(Exception):
    exit_code = EXIT_RUNTIME


class TemporalUnreachable(DevicePoolError):
    """The frontend did not answer; the message says why when the SDK's `detail` tells.

    The SDK wraps every transport failure in one text ("Failed client connect:
    ... dns error ..."): a host name that does not resolve, an address without a
    port (the SDK then tries port 80) and a refused connection each get their
    own line, since each has its own fix.
    """

    def __init__(self, address: str, detail: str = "", *, tls_from_scheme: bool = False) -> None:
        self.address = address
        self.detail = detail
        if tls_from_scheme:  # `https://host:port`: the one sign of TLS the user gave
            cause = _tls_cause(detail) or _cause(address, detail)
            super().__init__(
                f"cannot reach Temporal at {address} over TLS (on because of https://){cause}"
            )
        else:
            super().__init__(f"cannot reach Temporal at {address}{_cause(address, detail)}")


def without_scheme(address: str) -> tuple[str, bool]:
    """`http://host:port/` as the `host:port` it means, and whether it said `https`.

    The SDK warns on a scheme (a Python warning in the user's terminal) and will refuse it.
    """
    address = address.strip()
    scheme, sep, rest = address.partition("://")
    if not sep or scheme.lower() == "dns":  # `dns:///host:port`: `address_problem` names it
        return address, False
    return rest.rstrip("/"), scheme.lower() == "https"


def address_problem(address: str) -> str:
    """What is wrong with a `host:port` target, or "" when nothing is."""
    address = address.strip()
    if _HOST_PORT.match(address):
        return ""
    if address.lower().startswith("dns:"):  # gRPC's resolver form, which the SDK cannot take
        return (
            "the gRPC resolver form dns:/// is not taken; "
            f"give host:port ({address[4:].lstrip('/') or '127.0.0.1:7233'})"
        )
    if "/" in address:
        return f"the address is host:port; a path (/{address.partition('/')[2]}) is not allowed"
    if ":" in address.rsplit("]", 1)[-1]:
        return "the address needs host:port, with a port number"
    return f"the address needs host:port, e.g. {address or '127.0.0.1'}:7233"


def _tls_cause(detail: str) -> str:
    """Why a TLS connection failed, when the SDK's `detail` tells: a plain server answered."""
    lowered = detail.lower()
    if "invalidcontenttype" in lowered or "invalidmessage" in lowered or "wrong version" in lowered:
        return ": the server does not speak TLS — drop https:// from TEMPORAL_ADDRESS"
    return ""


def _cause(address: str, detail: str) -> str:
    problem = address_problem(address)
    if problem:
        return f": {problem}"
    lowered = detail.lower()
    if "dns error" in lowered or "name or service not known" in lowered:
        host = address.rsplit(":", 1)[0].strip("[]")
        return f": cannot resolve host {host!r} — check TEMPORAL_ADDRESS"
    ui_hint = _web_ui_hint(address)
    if ui_hint:
        return f" — {ui_hint}"
    # Connected, then no gRPC answer (an HTTP/1 server: "h2 protocol error", or a broken pipe).
    if "after connection" in lowered or "h2 protocol error" in lowered:
        return (
            ": something answers there, but not Temporal's gRPC (a Web UI or an HTTP port?) "
            "— check TEMPORAL_ADDRESS"
        )
    if "connection refused" in lowered:
        return " — is `devicepool dev` running? (connection refused)"
    return " — is `devicepool dev` running?"


def _web_ui_hint(address: str) -> str:
    """ "that is the Web UI's port; the server's is 7233 (...)" when `address` is a Web UI's port:
    the default one, or the one a `devicepool dev` in this directory says it took."""
    host, _, port = address.rpartition(":")
    ui_ports = {DEV_UI_PORT: f"{host}:{DEV_SERVER_PORT}"}
    try:
        found = _LOCK_PORTS.search(DEV_LOCK.read_text(errors="replace")[:1000])
    except OSError:
        found = None
    if found is not None:
        ui_ports[int(found["ui"])] = found["server"]
    server = ui_ports.get(int(port)) if port.isdigit() else None
    if server is None:
        return ""
    return f"that is the Web UI's port; the server's is {server.rpartition(':')[2]} ({server})"
