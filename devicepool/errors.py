"""The root of the errors a devicepool user can meet (the tree is drawn in `devicepool.client.errors`)."""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_BAD_INPUT = 2

# `host:port`, `[v6]:port`; the port is what a bare host lacks.
_HOST_PORT = re.compile(r"^(?:\[[^\]]+\]|[^:\[\]/]+):(?P<port>\d+)$")


class DevicePoolError(Exception):
    exit_code = EXIT_RUNTIME


class TemporalUnreachable(DevicePoolError):
    """The frontend did not answer; the message says why when the SDK's `detail` tells.

    The SDK wraps every transport failure in one text ("Failed client connect:
    ... dns error ..."): a host name that does not resolve, an address without a
    port (the SDK then tries port 80) and a refused connection each get their
    own line, since each has its own fix.
    """

    def __init__(self, address: str, detail: str = "") -> None:
        self.address = address
        self.detail = detail
        super().__init__(f"cannot reach Temporal at {address}{_cause(address, detail)}")


def address_problem(address: str) -> str:
    """What is wrong with a `host:port` target, or "" when nothing is."""
    address = address.strip()
    if _HOST_PORT.match(address) or "://" in address:  # a URL: the SDK still takes it
        return ""
    if ":" in address.rsplit("]", 1)[-1]:
        return "the address needs host:port, with a port number"
    return f"the address needs host:port, e.g. {address or '127.0.0.1'}:7233"


def _cause(address: str, detail: str) -> str:
    problem = address_problem(address)
    if problem:
        return f": {problem}"
    lowered = detail.lower()
    if "dns error" in lowered or "name or service not known" in lowered:
        host = address.rsplit(":", 1)[0].strip("[]")
        return f": cannot resolve host {host!r} — check TEMPORAL_ADDRESS"
    if "connection refused" in lowered:
        return " — is `devicepool dev` running? (connection refused)"
    return " — is `devicepool dev` running?"
