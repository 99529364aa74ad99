"""From manifest text (or a file) to its parsed documents, with syntax errors located.

JSON is tried first when the text looks like JSON (a JSON author wants JSON's
own error message), then YAML, all documents of a stream. YAML mappings refuse
duplicate keys: `replicas` twice is a mistake, not "the last one wins". Every
failure is a `ManifestError` whose line names the source and, when known, the
line and column; no YAML, JSON or OS exception escapes (not even Python's
refusal to read an integer of more than 4,300 digits).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from devicepool.api.problems import ManifestError, one_line, show_value

__all__ = ["parse_documents", "read_text"]


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key; SafeLoader reports it itself
            continue
        if duplicate:
            shown = show_value(key) if isinstance(key, str) else repr(key)
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {shown}", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> Any:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:  # more digits than Python reads (sys.get_int_max_str_digits)
        digits = sum(c.isdigit() for c in str(node.value))
        raise yaml.constructor.ConstructorError(
            None, None, _too_long(digits), node.start_mark
        ) from None


def _too_long(digits: int) -> str:
    return f"a number of {digits} digits is too long"


_Loader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,  # type: ignore[arg-type]
)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)  # type: ignore[arg-type]


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a BOM tolerated), or a `ManifestError` naming the file."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ManifestError([f"{path}: no such file or directory"]) from None
    except UnicodeDecodeError as exc:
        raise ManifestError([f"{path}: not UTF-8 text ({exc.reason})"]) from None
    except OSError as exc:
        raise ManifestError([f"{path}: {exc.strerror or exc}"]) from None


def parse_documents(text: str, *, source: str) -> list[Any]:
    """The non-empty documents of `text` (JSON first, when it looks like JSON)."""
    text = text.removeprefix("\ufeff")
    json_error: json.JSONDecodeError | None = None
    if text.lstrip()[:1] in ("{", "["):
        # JSON is YAML, but PyYAML chokes on some valid JSON (tabs), and a JSON
        # author wants JSON's own error message.
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            json_error = exc
        except ValueError:  # an integer of more digits than Python reads
            raise ManifestError([_too_long_in_json(text, source=source)]) from None
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        if json_error is not None:
            where = f"line {json_error.lineno}, column {json_error.colno}: "
            raise ManifestError([_problem(source, where, json_error.msg)]) from None
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ManifestError([_problem(source, where, f"{exc.problem or exc.context}")]) from None
    except yaml.reader.ReaderError as exc:
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        where = _line_column(text, exc.position)
        raise ManifestError([_problem(source, where, f"{exc.reason}: {character!r}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([_problem(source, "", " ".join(str(exc).split()))]) from None
    return [doc for doc in documents if doc is not None]


def _problem(source: str, where: str, problem: str) -> str:
    """The problem line: the parser's words can quote a 5,000-character tag or alias."""
    return f"{source}: {one_line(where + problem)}"


def _line_column(text: str, position: int) -> str:
    line = text.count("\n", 0, position) + 1
    column = position - text.rfind("\n", 0, position)
    return f"line {line}, column {column}: "


def _too_long_in_json(text: str, *, source: str) -> str:
    """The problem line of JSON text holding a number longer than Python reads."""
    limit = sys.get_int_max_str_digits() or 4300
    found = re.search(rf"\d{{{limit + 1},}}", text)
    if found is None:
        return f"{source}: a number is too long"
    return _problem(source, _line_column(text, found.start()), _too_long(len(found.group())))
