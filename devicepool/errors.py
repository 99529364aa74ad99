"""The root of the errors a devicepool user can meet (the tree is drawn in `devicepool.client.errors`)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_BAD_INPUT = 2


class DevicePoolError(Exception):
    exit_code = EXIT_RUNTIME


class TemporalUnreachable(DevicePoolError):
    def __init__(self, address: str, detail: str = "") -> None:
        self.address = address
        self.detail = detail
        super().__init__(f"cannot reach Temporal at {address} — is `devicepool dev` running?")
