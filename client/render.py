"""One renderer for every read command: `-o table|json|yaml`, of plain camelCase dicts.

The default is `table` on a terminal and `json` otherwise; `-o table` off a terminal prints
plain, space-aligned columns, like kubectl."""

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
from rich.text import Text

from devicepool.client._results import parse_time


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def resolve_output(output: Output | None) -> Output:
    if output is not None:
        return output
    return Output.TABLE if _isatty(sys.stdout) else Output.JSON


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def print_data(data: Any, output: Output) -> None:
    if output == Output.JSON:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(json_shaped(data), sort_keys=False, allow_unicode=True))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if not _isatty(sys.stdout):
        RowStream(headers).print_rows(rows)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        # `Text`, not a string: rich reads `[...]` in a string as markup (a provider's
        # `[/phone/list]` raised, `[red]` vanished); a cell prints as written.
        table.add_row(*(Text(cell(v)) for v in row))
    Console().print(table)


class RowStream:
    """A plain table: the header once, then rows as they come, in steady columns (`print_table`
    off a terminal; `get --watch` on one too).

    A watched row is printed by itself, long after the first ones, so it cannot be
    laid out with the others: the first rows set the widths and later rows pad to
    them (a longer cell widens its column from then on).
    """

    def __init__(self, headers: Sequence[str]) -> None:
        self.headers = list(headers)
        self.widths: list[int] | None = None
        self.headed = False

    def head_again(self) -> None:
        """The next rows come under the header again (`get -w` after another kind's rows)."""
        self.headed = False

    def print_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        cells = [[cell(v) for v in row] for row in rows]
        if self.widths is None:
            self.widths = [len(h) for h in self.headers]
        if not self.headed:
            self.headed = True
            cells.insert(0, self.headers)
        for row in cells:
            self.widths = [max(w, len(c)) for w, c in zip(self.widths, row, strict=False)]
        for row in cells:
            line = "   ".join(c.ljust(w) for c, w in zip(row, self.widths, strict=False))
            sys.stdout.write(line.rstrip() + "\n")
        sys.stdout.flush()


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max((len(k) for k, _ in pairs), default=0) + 1
    for key, value in pairs:
        sys.stdout.write(f"{(key + ':').ljust(width + 1)} {cell(value)}\n")


def age(value: Any, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 5h, 3d."""
    when = parse_time(value)
    if when is None:
        return "-"
    return span(((now or datetime.now(UTC)) - when).total_seconds())


def span(seconds: float) -> str:
    """kubectl-style: 45s, 12m, 5h, 3d (nothing below 0)."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def cell(value: Any) -> str:
    """A value as a table shows it: `-` for nothing, `yes`/`no` for a bool."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def json_shaped(data: Any) -> Any:
    """JSON-shaped data for yaml.safe_dump (datetimes as strings, tuples as lists)."""
    return json.loads(json.dumps(data, default=str))
