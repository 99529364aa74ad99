"""From manifest text (or a file) to its parsed documents, with syntax errors located.

Every failure is a `ManifestError` whose line names the source and, when known, the line and
column; no YAML, JSON, OS or recursion error escapes. What is refused and why (duplicate keys,
nesting past `MAX_DEPTH`): docs/operations.md, 'The CLI in detail'."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from devicepool.api.problems import ManifestError, WrittenFloat, one_line, show_value

__all__ = ["MAX_DEPTH", "parse_documents", "read_text"]

# The most levels of lists and mappings a manifest may nest (a DevicePool
# needs 5). Far below where Python's recursion limit stops either parser.
MAX_DEPTH = 100

_TOO_DEEP = f"nesting deeper than {MAX_DEPTH} levels"

# A JSON string (escapes included) or a bracket; brackets inside strings do not count.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and nesting deeper than `MAX_DEPTH`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner reads up to 1,024 characters ahead for a key, at a cost
        # growing with the flow level (half a second for `a: [[[…`): it stops
        # at the level too many as well. Its count (flow levels and block
        # indents) is never more than the real depth, so what it says is true.
        if self.flow_level + len(self.indents) >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(None, None, _TOO_DEEP, self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # Composing recurses once per level: count the levels and stop at the
        # one too many, with its line and column, before Python does.
        event = self.peek_event()
        if not isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        if self._depth == MAX_DEPTH:
            mark = event.start_mark  # the pure-Python parser's Mark (the stubs allow libyaml's)
            raise yaml.composer.ComposerError(None, None, _TOO_DEEP, mark)  # type: ignore[arg-type]
        self._depth += 1
        try:
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1


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


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> Any:
    # Keep the digits as written: `14.10` is read as 14.1, and a message must say 14.10.
    value = loader.construct_yaml_float(node)
    return WrittenFloat(value, str(node.value))


def _too_long(digits: int) -> str:
    return f"a number of {digits} digits is too long"


_Loader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,  # type: ignore[arg-type]
)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)  # type: ignore[arg-type]
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)  # type: ignore[arg-type]


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
            document = json.loads(text, parse_float=_json_float)
        except json.JSONDecodeError as exc:
            json_error = exc
        except ValueError:  # an integer of more digits than Python reads
            raise ManifestError([_too_long_in_json(text, source=source)]) from None
        except RecursionError:
            # What was read so far is JSON, so the scan finds where it got too deep.
            raise ManifestError(
                [_too_deep_in_json(text, source=source) or _problem(source, "", _TOO_DEEP)]
            ) from None
        else:
            too_deep = _too_deep_in_json(text, source=source)
            if too_deep is not None:
                raise ManifestError([too_deep])
            return [document]
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        if json_error is not None:
            where = f"line {json_error.lineno}, column {json_error.colno}: "
            raise ManifestError([_problem(source, where, json_error.msg)]) from None
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        said = f"{exc.problem or exc.context}"
        hint = _indentation_hint(said, text, mark.line, mark.column) if mark else ""
        raise ManifestError([_problem(source, where, said + hint)]) from None
    except yaml.reader.ReaderError as exc:
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        where = _line_column(text, exc.position)
        raise ManifestError([_problem(source, where, f"{exc.reason}: {character!r}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([_problem(source, "", " ".join(str(exc).split()))]) from None
    except RecursionError:
        # No text is deeper than MAX_DEPTH by now, but aliases can nest an
        # anchored mapping inside another, and construction recurses through them.
        raise ManifestError([_problem(source, "", _TOO_DEEP)]) from None
    return [doc for doc in documents if doc is not None]


def _indentation_hint(problem: str, text: str, line: int, column: int) -> str:
    """What to look at when PyYAML's words mean a key is indented wrong (0-based mark)."""
    if problem.startswith("mapping values are not allowed"):
        lines = text.splitlines()
        before = lines[line][:column] if line < len(lines) else ""
        if ": " in before:  # `region: us-west: x`: a second key on one line
            return " (quote a value that holds ': ')"
        # Else `bad: indent` then `    what: here`: a key deeper than its siblings.
    elif not problem.startswith(("expected <block end>", "did not find expected key")):
        return ""
    return f" (check the indentation of line {line + 1})"


def _json_float(text: str) -> WrittenFloat:
    return WrittenFloat(float(text), text)


def _problem(source: str, where: str, problem: str) -> str:
    """The problem line: the parser's words can quote a 5,000-character tag or alias."""
    return f"{source}: {one_line(where + problem)}"


def _line_column(text: str, position: int) -> str:
    line = text.count("\n", 0, position) + 1
    column = position - text.rfind("\n", 0, position)
    return f"line {line}, column {column}: "


def _too_deep_in_json(text: str, *, source: str) -> str | None:
    """The problem line of JSON text nesting deeper than `MAX_DEPTH`, or None.

    Exact for JSON (and for a JSON prefix): a linear scan, no recursion.
    """
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return _problem(source, _line_column(text, token.start()), _TOO_DEEP)
        elif bracket in ("]", "}"):
            depth -= 1
    return None


def _too_long_in_json(text: str, *, source: str) -> str:
    """The problem line of JSON text holding a number longer than Python reads."""
    limit = sys.get_int_max_str_digits() or 4300
    found = re.search(rf"\d{{{limit + 1},}}", text)
    if found is None:
        return f"{source}: a number is too long"
    return _problem(source, _line_column(text, found.start()), _too_long(len(found.group())))
