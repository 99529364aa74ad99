"""Durations as kubectl writes them (Go's `time.ParseDuration`): `90s`, `3m`, `1h30m`, `500ms`.

A bare number is refused (no unit; kubectl refuses it too). `format_duration` writes the
shortest form Go also reads, so `get -o yaml` applies again. The command line's durations
(`cost --since 2d`) also take days, `parse_duration(..., days=True)`; a manifest's do not."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from devicepool.api.problems import show_value

__all__ = ["MAX_SECONDS", "format_duration", "parse_duration"]

_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "μs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
# The command line's: days too (`cost --since 2d`), never a manifest's.
_UNITS_AND_DAYS = {**_UNITS, "d": Decimal(86400)}
_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d)")
# Go's longest duration (2^63 - 1 nanoseconds, about 292 years), in whole seconds.
MAX_SECONDS = (2**63 - 1) // 10**9

_EXAMPLE = "a duration such as '90s', '3m' or '1h30m'"
_EXAMPLE_DAYS = "a duration such as '90s', '3m', '1h30m' or '2d'"


def parse_duration(value: Any, *, days: bool = False) -> float:
    """Seconds in `value` (a duration string); ValueError in the manifest's words if not one.
    `days`: `d` (24h) is a unit too, as the CLI's flags take it."""
    units, example = (_UNITS_AND_DAYS, _EXAMPLE_DAYS) if days else (_UNITS, _EXAMPLE)
    if isinstance(value, bool) or not isinstance(value, str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(f"must be {example} (a number has no unit), got {show_value(value)}")
        raise ValueError(f"must be {example}, got {show_value(value)}")
    text = value.strip()
    total = Decimal(0)
    position = 0
    for match in _TERM.finditer(text):
        if match.start() != position or match.group(2) not in units:
            break
        total += Decimal(match.group(1)) * units[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        unitless = " (a number has no unit)" if re.fullmatch(r"[\d.]+", text) else ""
        raise ValueError(f"must be {example}{unitless}, got {show_value(value)}")
    if total > MAX_SECONDS:
        raise ValueError(f"must be at most {format_duration(MAX_SECONDS)}, got {show_value(value)}")
    return float(total)


def format_duration(seconds: float) -> str:
    """`seconds` in the shortest form Go reads back: 900 -> '15m', 5400 -> '1h30m', 0 -> '0s'."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {seconds}")
    exact = Decimal(repr(float(seconds)))
    hours, rest = divmod(exact, 3600)
    minutes, rest = divmod(rest, 60)
    parts = [f"{int(count)}{unit}" for count, unit in ((hours, "h"), (minutes, "m")) if count]
    if rest or not parts:
        parts.append(f"{format(rest.normalize(), 'f')}s")
    return "".join(parts)
