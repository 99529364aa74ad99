"""How a problem with a manifest is said: `ManifestError` and the one-line `where: rule` form.

    pools.yaml[1]: spec.replicas: must be <= 500, got 501

Where is in the field names the user wrote (camelCase, dotted, `[i]`); values as YAML would
write them (`null`, `true`, `'ios'`); long strings, unprintable characters and lines past
`MAX_LINE` are shortened or escaped, so every problem stays one short line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "MAX_LINE",
    "MAX_SHOWN",
    "Loc",
    "ManifestError",
    "WrittenFloat",
    "loc_path",
    "one_line",
    "problem_line",
    "shorten",
    "show_value",
    "written",
]

# A field's place in a manifest: keys and list indexes, outermost first.
Loc = tuple[int | str, ...]

# The most characters of one string (a value, a key) a problem line quotes.
MAX_SHOWN = 60

# The most characters of a problem line after its source (`pools.yaml[1]: `).
MAX_LINE = 200


class ManifestError(ValueError):
    """One or more problems with a manifest; `str()` is one problem a line (`joined`)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: list[str] = list(problems)
        super().__init__(joined(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        # The default would call ManifestError(joined_string), splitting it into characters.
        return (type(self), (self.problems,))


# What `str(ManifestError)` (what the CLI prints after `error: `) lists at most:
# one problem a line, then how many more (`ManifestError.problems` holds them all).
MAX_ERROR_LINES = 20


def joined(problems: Sequence[str]) -> str:
    """The one problem, or `N problems:` and then one indented problem a line.

    At most `MAX_ERROR_LINES` are listed, then `and N more problem(s)`.
    """
    if len(problems) == 1:
        return problems[0]
    shown = [f"  {problem}" for problem in problems[:MAX_ERROR_LINES]]
    rest = len(problems) - len(shown)
    more = [f"  and {rest} more problem(s)"] if rest else []
    return "\n".join([f"{len(problems)} problems:", *shown, *more])


class WrittenFloat(float):
    """A number as the manifest's text wrote it: YAML reads `osVersion: 14.10` as 14.1,
    and a message that quotes "14.1" back repeats the misreading."""

    written: str

    def __new__(cls, value: float, written: str) -> WrittenFloat:
        self = super().__new__(cls, value)
        self.written = written
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (float(self), self.written))


def written(value: float) -> str:
    """`value` as the user wrote it, when the parser kept that, else as Python shows it."""
    return value.written if isinstance(value, WrittenFloat) else str(value)


def problem_line(prefix: str, loc: Loc, rule: str) -> str:
    """`{prefix}{field.path}: {rule}`, or `{prefix}{rule}` for the document itself."""
    path = loc_path(loc)
    # Every part is short already; one_line holds the bound when several long ones meet.
    return prefix + one_line(f"{path}: {rule}" if path else rule)


def one_line(text: str) -> str:
    """`text` with what does not print escaped, cut at `MAX_LINE` characters."""
    return shorten(_escaped(text), MAX_LINE)


def loc_path(loc: Loc) -> str:
    """`("spec", "proxy", "poolRef")` → `spec.proxy.poolRef`; indexes as `[i]`."""
    out = ""
    for segment in loc:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            segment = _shown_key(segment)
            out += f".{segment}" if out else segment
    return out


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """`text`, or its first `limit - 1` characters and `…` when it is longer."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def show_value(value: Any) -> str:
    """A value as the user would have written it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        shown = written(value) if isinstance(value, float) else str(value)
        if len(shown) > MAX_SHOWN:
            return f"{shorten(shown)} ({len(shown)} digits)"
        return shown
    if isinstance(value, str):
        # Quotes included; a character that does not print takes its escape's length.
        if len(shown := repr(value)) <= MAX_SHOWN + 2:
            return shown
        return f"{_fitting(value, MAX_SHOWN + 2, repr)!r} ({len(value)} characters)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _shown_key(key: str) -> str:
    """A key as a path segment: unquoted, escaped where it does not print, short."""
    if len(shown := _escaped(key)) <= MAX_SHOWN:
        return shown
    return _escaped(_fitting(key, MAX_SHOWN, _escaped))


def _fitting(text: str, limit: int, show: Callable[[str], str]) -> str:
    """The longest start of `text`, plus `…`, that `show` shows in at most `limit` characters."""
    keep = min(len(text), limit - 1)
    while keep > 0 and len(show(f"{text[:keep]}…")) > limit:
        keep -= 1
    return f"{text[:keep]}…"


def _escaped(text: str) -> str:
    """`text` with the characters that do not print (line breaks among them) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
