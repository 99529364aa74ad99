"""One device, and a pool's remediation: `replace`, `protect`, `unprotect`, `pause`, `resume`.

Each is a validated update of the pool: a device the pool does not have, or a
pool being deleted, is refused with one line and exit 2, and nothing changes.
The pool's own answer is printed (`devicepool/NAME: d-12 is replaced now`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from devicepool.api.durations import format_duration
from devicepool.client._cli_support import duration_or_exit, open_pools, run

PoolArg = Annotated[str, typer.Argument(help="the pool's name")]
DeviceArg = Annotated[str, typer.Argument(help="a device id of the pool (devicepool devices POOL)")]


def _answer(pool: str, call: Callable[[Any], Awaitable[str]]) -> None:
    async def body() -> None:
        from devicepool.client._validation import validate_name

        validate_name(pool)  # before connecting: bad input changes nothing
        message = await call(await open_pools())
        typer.echo(f"devicepool/{pool}: {message}")

    run(body)


def replace(
    pool: PoolArg,
    device: DeviceArg,
    when_idle: Annotated[
        bool,
        typer.Option(
            "--when-idle",
            help="once the device is idle (its replacement is created first, unless a "
            "spendCap leaves no room beside it: then it goes first)",
        ),
    ] = False,
) -> None:
    """Replace one device now, busy or not (or --when-idle)."""
    _answer(pool, lambda c: c.replace_device(pool, device, when_idle=when_idle))


def protect(
    pool: PoolArg,
    device: DeviceArg,
    duration: Annotated[
        str | None,
        typer.Option("--for", help="how long (2h, 90m, 2d); default: until unprotect"),
    ] = None,
) -> None:
    """Keep a device from scale-down and expiry (health still replaces it if it dies)."""
    if duration is not None:  # `2d` too, as the pool's own words (`48h`)
        duration = format_duration(duration_or_exit("--for", duration))
    _answer(pool, lambda c: c.protect_device(pool, device, duration=duration))


def unprotect(pool: PoolArg, device: DeviceArg) -> None:
    """Take a device's protection away."""
    _answer(pool, lambda c: c.unprotect_device(pool, device))


def pause(pool: PoolArg) -> None:
    """Pause the pool's remediation: unhealthy devices are shown, not replaced."""
    _answer(pool, lambda c: c.pause_remediation(pool))


def resume(pool: PoolArg) -> None:
    """Resume the pool's remediation."""
    _answer(pool, lambda c: c.resume_remediation(pool))
