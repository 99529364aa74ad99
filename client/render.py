"""One renderer for every read command: `-o table|json|yaml`.

Commands produce data (plain dicts in the resource's camelCase JSON shape);
this module prints it. The default is `table` when stdout is a terminal and
`json` otherwise, so scripts get a stable, parseable format without asking.
`-o table` on a non-terminal prints plain, space-aligned columns (no colour,
no box drawing), like kubectl.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO

import yaml
from rich.console import Console
from rich.table import Table


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def resolve_output(output: Output | None, stream: TextIO | None = None) -> Output:
    if output is not None:
        return output
    stream = stream or sys.stdout
    return Output.TABLE if _isatty(stream) else Output.JSON


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def print_data(data: Any, output: Output) -> None:
    if output == Output.JSON:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "") -> None:
    cells = [[cell(v) for v in row] for row in rows]
    if _isatty(sys.stdout):
        table = Table(box=None, header_style="bold", pad_edge=False, title=title or None)
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    if title:
        sys.stdout.write(f"{title}\n")
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
    for row in [list(headers), *cells]:
        line = "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
        sys.stdout.write(line + "\n")


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max((len(k) for k, _ in pairs), default=0) + 1
    for key, value in pairs:
        sys.stdout.write(f"{(key + ':').ljust(width + 1)} {cell(value)}\n")


def age(value: Any, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 5h, 3d."""
    when = _parse_time(value)
    if when is None:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - when).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def cell(value: Any) -> str:
    """A value as a table shows it: `-` for nothing, `yes`/`no` for a bool."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _plain(data: Any) -> Any:
    """JSON-shaped data for yaml.safe_dump (datetimes as strings, tuples as lists)."""
    return json.loads(json.dumps(data, default=str))
