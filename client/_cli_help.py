"""How `devicepool --help` and each command's `--help` name things: one style for all.

A command's summary is its docstring's first sentence, whole (click would cut it at ~45
characters, and a first line may end mid-sentence). Every value is named in capitals, as
click and kubectl name them (`NAME`, `DURATION`, `KEY=VALUE`), never as typer shows a Python
type (`<str>`, `<list[str]>`): `Command` is the class every command is made with
(``cli.py``); tests/client/test_client_help_text.py walks them all."""

from __future__ import annotations

import inspect
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperOption

__all__ = ["Command", "summary"]


def summary(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join(inspect.cleandoc(doc).split("\n\n", 1)[0].split())
    depth = 0
    for at, char in enumerate(paragraph):
        depth += {"(": 1, ")": -1}.get(char, 0)
        after = paragraph[at + 1 : at + 3]  # the end, or a space and a capital (not "e.g. x")
        if char == "." and depth == 0 and (not after or (after[0] == " " and after[1:].isupper())):
            return paragraph[: at + 1]
    return paragraph


# One metavar style, click's and kubectl's: what the value is, in capitals, never a Python
# type (typer shows `<str>`, `<list[str]>`). An option's own `metavar=` wins; these name the
# rest, by flag; then `--*-port` is PORT, `--*-seconds` SECONDS, a number N or NUMBER.
_METAVARS = {
    "--filename": "PATH",
    "--output": "FORMAT",
    "--api-version": "VERSION",
    "--to": "VERSION",
    "--config": "FILE",
    "--key-file": "FILE",
    "--bitbrowser-key-file": "FILE",
    "--apply": "PATH",
    "--data-dir": "DIR",
    "--bitbrowser-url": "URL",
    "--cors-origin": "URL",
    "--node-label": "KEY=VALUE",
    "--selector": "KEY=VALUE",
    "--for": "DURATION",
    "--since": "DURATION",
    "--host": "HOST",
    "--node": "NAME",
    "--node-account": "NAME",
    "--deployment-name": "NAME",
    "--build-id": "ID",
}


def _metavar(param: TyperArgument | TyperOption) -> str:
    if isinstance(param, TyperArgument):
        return (param.name or "value").upper()
    flag = max(param.opts, key=len)
    if flag in _METAVARS:
        return _METAVARS[flag]
    if flag.endswith("port"):
        return "PORT"
    if flag.endswith("-seconds"):
        return "SECONDS"
    kind = getattr(param, "type_descriptor", None)
    annotation = getattr(kind, "annotation", None)
    if annotation is int:
        return "N"
    if annotation is float:
        return "NUMBER"
    return flag.lstrip("-").replace("-", "_").upper()


class _Argument(TyperArgument):
    """An argument shown by its metavar alone, as click does (`POOL`, `[NAME]`), without
    typer's type (`pool <str>`) or braces (`{pool}`)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name if self.nargs == 1 else f"{name}..."


class Command(TyperCommand):
    """A command whose options and arguments show their values in the one metavar style."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                param.__class__ = _Argument
            elif not isinstance(param, TyperOption) or param.is_flag or param.count:
                continue
            if param.metavar is None or param.metavar.startswith("<"):
                param.metavar = _metavar(param)
