"""What every `devicepool` command shares: its common options, one-line errors, the pool client.

`run` maps the devicepool error tree (and a bad manifest or worker config) to `error: ...` on
stderr and the exit code."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer

from devicepool.api.durations import MAX_SECONDS, format_duration, parse_duration
from devicepool.client.errors import EXIT_BAD_INPUT, DevicePoolError
from devicepool.client.render import Output

T = TypeVar("T")

OutputOpt = Annotated[
    Output | None,
    typer.Option(
        "--output",
        "-o",
        help="table, json or yaml (default: table on a terminal, json otherwise)",
        case_sensitive=False,
    ),
]


def timeout_seconds(value: str | float) -> float:
    """`--timeout`: seconds (`120`, `0.5`) or a duration (`120s`, `2m`, `1h30m`), as kubectl
    takes it; 0 or more."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)  # the default
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                seconds = parse_duration(text, days=True)
            except ValueError:
                said = f"must be seconds (120) or a duration (120s, 2m, 1h30m), got {text!r}"
                raise typer.BadParameter(said) from None
    if not 0 <= seconds <= MAX_SECONDS:  # nan too
        most = format_duration(MAX_SECONDS)
        raise typer.BadParameter(f"must be 0s to {most}, got {value!r}")
    return seconds


TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        parser=timeout_seconds,
        metavar="DURATION",
        help="how long --wait waits before giving up: seconds or a duration (120, 120s, 2m)",
    ),
]


def fail(message: str, code: int) -> typer.Exit:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run an async command body; map devicepool errors to one line + exit code."""
    from devicepool.api.loader import ManifestError
    from devicepool.worker.config import ConfigError

    try:
        return asyncio.run(body())
    except DevicePoolError as err:
        raise fail(str(err), err.exit_code) from None
    except (ManifestError, ConfigError) as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None


async def open_pools(name: str | None = None) -> Any:
    """A `PoolClient`; `name` is validated first, so a bad one never reaches Temporal."""
    from devicepool.client._validation import validate_name
    from devicepool.client.pool_client import PoolClient
    from devicepool.connect import connect

    if name is not None:
        validate_name(name)
    return PoolClient(await connect())


def duration_or_exit(flag: str, text: str) -> float:
    """Seconds of a duration (2h, 90m, 2d), more than 0; else exit 2."""
    from devicepool.api.durations import parse_duration

    try:
        if (seconds := parse_duration(text, days=True)) <= 0:
            raise ValueError(f"must be more than 0s, got {text!r}")
    except ValueError as err:
        raise fail(f"{flag}: {err}", EXIT_BAD_INPUT) from None
    return seconds


def load_resources_or_exit(path: str) -> list[Any]:
    """The manifests' pools of either kind; a bad manifest exits 2 before anything is contacted.
    A directory's worker configs are passed by with a note (`_manifest_files`)."""
    from devicepool.api.loader import ManifestError, load_resource_texts
    from devicepool.client._manifest_files import manifest_sources

    try:
        return load_resource_texts(
            [(name, text) for _, name, text in manifest_sources(path, verb="apply")]
        )
    except ManifestError as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
