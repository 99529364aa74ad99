"""The errors a devicepool user can meet, and the exit code each one maps to.

    DevicePoolError            base; `exit_code` 1 (a runtime failure)
    ├── TemporalUnreachable    the Temporal frontend did not answer
    ├── PoolNotFound           no running pool workflow with that name
    ├── WaitTimeout            `--wait` ran out of time before the pool got there
    └── BadInput               exit_code 2: a manifest, flag or value was rejected
                               locally (nothing was started or updated) or by the
                               workflow's update validator

`str()` of each is one line: the CLI prints it on stderr as is.
"""

from __future__ import annotations

from devicepool.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_RUNTIME,
    DevicePoolError,
    TemporalUnreachable,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "BadInput",
    "DevicePoolError",
    "PoolNotFound",
    "TemporalUnreachable",
    "WaitTimeout",
]


class PoolNotFound(DevicePoolError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'pool "{name}" not found (no running workflow devicepool/{name})')


class WaitTimeout(DevicePoolError):
    pass


class BadInput(DevicePoolError):
    exit_code = EXIT_BAD_INPUT
