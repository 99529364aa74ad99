"""Reading DevicePool manifests from YAML/JSON and explaining what is wrong with them.

Every problem is reported as one line that names where it is and the rule it
breaks, in the field names the user wrote (camelCase, dotted, `[i]` for list
items)::

    pools.yaml[1]: spec.replicas: must be <= 500, got 501
    pools.yaml: line 7, column 3: mapping values are not allowed here

The source (a file name, `<stdin>`, `<input>`) comes first, with the index of
the document when the source holds several. All problems of all documents are
collected before anything is raised, so one run shows every mistake.

Errors: everything this module refuses is a `ManifestError` (a `ValueError`)
carrying the list of problem lines in `.problems`; no pydantic, YAML or OS
exception escapes it.
"""

from __future__ import annotations

import difflib
import json
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic_core import ErrorDetails

from devicepool.api.base import CamelModel
from devicepool.api.names import API_VERSION_V1ALPHA1, KIND_DEVICE_POOL
from devicepool.api.v1alpha1 import DevicePool

SUPPORTED_API_VERSIONS: tuple[str, ...] = (API_VERSION_V1ALPHA1,)
SUPPORTED_KINDS: tuple[str, ...] = (KIND_DEVICE_POOL,)
MANIFEST_SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".json")

__all__ = [
    "ManifestError",
    "format_validation_error",
    "load_manifests",
    "load_manifests_text",
    "parse_pool",
]

Loc = tuple[int | str, ...]
_Where = tuple[str, Loc]  # (message prefix, base loc) of a pool, for duplicate reports


class ManifestError(ValueError):
    """One or more problems with a manifest; `str()` is a single line."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: list[str] = list(problems)
        super().__init__("; ".join(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        # The default would call ManifestError(joined_string), splitting it into characters.
        return (type(self), (self.problems,))


# --- public API -------------------------------------------------------------------


def parse_pool(data: Any, *, source: str = "<input>") -> DevicePool:
    """Validate one already-parsed manifest (a mapping) into a `DevicePool`."""
    pool, problems = _parse_document(data, prefix=f"{source}: ", base=())
    if pool is None:
        raise ManifestError(problems)
    return pool


def load_manifests_text(text: str, *, source: str = "<stdin>") -> list[DevicePool]:
    """Every DevicePool in `text`: YAML (one or many documents) or JSON.

    A JSON list of objects and a Kubernetes `kind: List` with `items` are
    unpacked. Empty documents are skipped; text without any document is an error.
    """
    return _check_unique(_load_text(text, source=source))


def load_manifests(path: str | Path) -> list[DevicePool]:
    """Every DevicePool in a file, in a directory's `*.yaml|*.yml|*.json` files
    (sorted by name, not recursive), or on stdin when `path` is `-`."""
    if str(path) == "-":
        return load_manifests_text(sys.stdin.read(), source="<stdin>")
    path = Path(path)
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.suffix.lower() in MANIFEST_SUFFIXES and p.is_file()
        )
        if not files:
            raise ManifestError(
                [f"{path}: no manifest files ({', '.join('*' + s for s in MANIFEST_SUFFIXES)})"]
            )
    else:
        files = [path]
    found: list[tuple[_Where, DevicePool]] = []
    problems: list[str] = []
    for file in files:
        try:
            found.extend(_load_text(_read(file), source=str(file)))
        except ManifestError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ManifestError(problems)
    return _check_unique(found)


def format_validation_error(exc: pydantic.ValidationError, *, prefix: str = "") -> list[str]:
    """One line per pydantic error: `{prefix}{field.path}: {rule}`.

    `prefix` is prepended verbatim (e.g. `"pools.yaml: "`). Field paths use the
    JSON names (`spec.proxy.stickyTTL`) with `[i]` for list indexes.
    """
    return _format_errors(exc.errors(), model=_model_named(exc.title), prefix=prefix, base=())


# --- loading ----------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: `replicas` twice is a mistake,
    not "the last one wins"."""


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
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,  # type: ignore[arg-type]
)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ManifestError([f"{path}: no such file or directory"]) from None
    except UnicodeDecodeError as exc:
        raise ManifestError([f"{path}: not UTF-8 text ({exc.reason})"]) from None
    except OSError as exc:
        raise ManifestError([f"{path}: {exc.strerror or exc}"]) from None


def _parse_documents(text: str, *, source: str) -> list[Any]:
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
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        if json_error is not None:
            raise ManifestError(
                [f"{source}: line {json_error.lineno}, column {json_error.colno}: {json_error.msg}"]
            ) from None
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ManifestError([f"{source}: {where}{exc.problem or exc.context}"]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise ManifestError(
            [f"{source}: line {line}, column {column}: {exc.reason}: {character!r}"]
        ) from None
    except yaml.YAMLError as exc:
        raise ManifestError([f"{source}: {' '.join(str(exc).split())}"]) from None
    return [doc for doc in documents if doc is not None]


def _expand(documents: list[Any]) -> list[Any]:
    """A top-level JSON list stands for its elements."""
    if len(documents) == 1 and isinstance(documents[0], list):
        return documents[0]
    return documents


def _load_text(text: str, *, source: str) -> list[tuple[_Where, DevicePool]]:
    """(where, pool) for every pool in `text`."""
    documents = _expand(_parse_documents(text, source=source))
    if not documents:
        raise ManifestError([f"{source}: no documents (expected a DevicePool manifest)"])
    found: list[tuple[_Where, DevicePool]] = []
    problems: list[str] = []
    for index, document in enumerate(documents):
        prefix = f"{source}[{index}]: " if len(documents) > 1 else f"{source}: "
        for base, item in _items(document):
            pool, item_problems = _parse_document(item, prefix=prefix, base=base)
            problems.extend(item_problems)
            if pool is not None:
                found.append(((prefix, base), pool))
    if problems:
        raise ManifestError(problems)
    return found


def _items(document: Any) -> Iterator[tuple[Loc, Any]]:
    """A `kind: List` document stands for its `items`; anything else for itself."""
    if (
        isinstance(document, dict)
        and document.get("kind") == "List"
        and isinstance(document.get("items"), list)
    ):
        for i, item in enumerate(document["items"]):
            yield ("items", i), item
    else:
        yield (), document


def _check_unique(found: list[tuple[_Where, DevicePool]]) -> list[DevicePool]:
    first: dict[str, _Where] = {}
    problems: list[str] = []
    for (prefix, base), pool in found:
        if pool.name in first:
            first_prefix, first_base = first[pool.name]
            first_at = f"{first_prefix}{_path(first_base)}".rstrip(": ")
            rule = f"duplicate pool name {pool.name!r} (first defined in {first_at})"
            problems.append(_line(prefix, (*base, "metadata", "name"), rule))
        else:
            first[pool.name] = (prefix, base)
    if problems:
        raise ManifestError(problems)
    return [pool for _, pool in found]


def _parse_document(data: Any, *, prefix: str, base: Loc) -> tuple[DevicePool | None, list[str]]:
    """The pool, or None and the problems (each a full message line)."""
    if not isinstance(data, dict):
        rule = f"must be a mapping with apiVersion, kind, metadata and spec, got {_show(data)}"
        return None, [_line(prefix, base, rule)]
    # apiVersion and kind first: for a Deployment, "spec.platform: required" is noise.
    problems: list[str] = []
    for key, supported in (("apiVersion", SUPPORTED_API_VERSIONS), ("kind", SUPPORTED_KINDS)):
        if key not in data:
            problems.append(_line(prefix, (*base, key), "required"))
        elif data[key] not in supported:
            rule = f"unsupported {_show(data[key])}, supported: {', '.join(supported)}"
            problems.append(_line(prefix, (*base, key), rule))
    if problems:
        return None, problems
    try:
        return DevicePool.model_validate(data), []
    except pydantic.ValidationError as exc:
        return None, _format_errors(exc.errors(), model=DevicePool, prefix=prefix, base=base)


# --- formatting pydantic errors ---------------------------------------------------


def _format_errors(
    errors: list[ErrorDetails], *, model: type[pydantic.BaseModel] | None, prefix: str, base: Loc
) -> list[str]:
    # An `invalid_key` error's loc ends in the bad key itself: report it at the mapping.
    locs = [
        _user_loc(error)[:-1] if error["type"] == "invalid_key" else _user_loc(error)
        for error in errors
    ]
    # `replica: 5` is one mistake, not two: when an unknown field looks like a
    # missing one, "spec.replicas: required" is left out.
    suggested = {
        (*loc[:-1], suggestion)
        for error, loc in zip(errors, locs, strict=True)
        if error["type"] == "extra_forbidden"
        and (suggestion := _suggestion(model, loc)) is not None
    }
    lines: list[str] = []
    for error, loc in zip(errors, locs, strict=True):
        if error["type"] == "missing" and loc in suggested:
            continue
        line = _line(prefix, base + loc, _rule(error, model=model, loc=loc))
        if line not in lines:
            lines.append(line)
    return lines


def _user_loc(error: ErrorDetails) -> Loc:
    # pydantic adds union member tags ("int", "function-after[...]") to `loc`;
    # the user wrote nothing by those names, so they are dropped.
    return tuple(
        segment
        for segment in error["loc"]
        if not (
            isinstance(segment, str)
            and ("[" in segment or "(" in segment or segment in _UNION_TAGS)
        )
    )


# Tags pydantic uses for members of `int | str` style unions. A manifest field
# with one of these names would be misreported; none of ours has one.
_UNION_TAGS = frozenset({"int", "str", "float", "bool", "list", "dict", "none", "bytes"})


def _line(prefix: str, loc: Loc, rule: str) -> str:
    path = _path(loc)
    return f"{prefix}{path}: {rule}" if path else f"{prefix}{rule}"


def _path(loc: Loc) -> str:
    out = ""
    for segment in loc:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            out += f".{segment}" if out else str(segment)
    return out


def _rule(error: ErrorDetails, *, model: type[pydantic.BaseModel] | None, loc: Loc) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    got = f"got {_show(value)}"
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        if loc[-2:] == ("metadata", "namespace"):
            # Copied from a Kubernetes manifest; "did you mean 'name'?" would mislead.
            return "unknown field (pools have no namespace; the Temporal namespace scopes them)"
        return _unknown_field(model, loc)
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error["msg"])).removeprefix("Value error, ")
    if kind in ("less_than_equal", "greater_than_equal", "less_than", "greater_than"):
        op, key = {
            "less_than_equal": ("<=", "le"),
            "greater_than_equal": (">=", "ge"),
            "less_than": ("<", "lt"),
            "greater_than": (">", "gt"),
        }[kind]
        return f"must be {op} {ctx.get(key)}, {got}"
    if kind in ("int_type", "int_parsing", "int_from_float", "int_parsing_size"):
        return f"must be an integer, {got}"
    if kind == "finite_number":
        return f"must be a finite number, {got}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, {got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, {got}"
    if kind in ("string_type", "string_unicode"):
        if isinstance(value, bool):
            # YAML 1.1: `region: no` is the boolean false, not the string "no".
            return f"must be a string, {got} (quote it: YAML reads yes/no/on/off as booleans)"
        return f"must be a string, {got}"
    if kind == "invalid_key":
        return f"keys must be strings, {got}"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"must be at least {ctx.get('min_length')} characters, {got}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters, {got}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}, {got}"
    if kind in ("enum", "literal_error"):
        choices = _choices(str(ctx.get("expected", "")))
        return f"must be one of {', '.join(choices)}, {got}"
    if kind in ("model_type", "model_attributes_type", "dict_type", "mapping_type"):
        return f"must be a mapping, {got}"
    if kind in ("list_type", "tuple_type", "iterable_type"):
        return f"must be a list, {got}"
    if kind.startswith(("datetime_", "date_", "timezone_")):
        return f"must be an RFC 3339 timestamp such as '2025-01-31T12:00:00Z', {got}"
    message = error["msg"]
    return f"{message[:1].lower()}{message[1:]}, {got}"


def _choices(expected: str) -> list[str]:
    # pydantic spells them "'android' or 'ios'" / "'a', 'b' or 'c'".
    parts = [p.strip().strip("'\"") for p in expected.replace(" or ", ", ").split(", ")]
    return [p for p in parts if p]


def _unknown_field(model: type[pydantic.BaseModel] | None, loc: Loc) -> str:
    suggestion = _suggestion(model, loc)
    if suggestion is not None:
        return f"unknown field (did you mean {suggestion!r}?)"
    known = _known_fields(model, loc[:-1]) if model is not None else []
    if known:
        return f"unknown field (known fields: {', '.join(known)})"
    return "unknown field"


def _suggestion(model: type[pydantic.BaseModel] | None, loc: Loc) -> str | None:
    """The known field an unknown one at `loc` was probably meant to be."""
    if model is None or not loc:
        return None
    known = _known_fields(model, loc[:-1])
    name = str(loc[-1])
    # Case slips (`stickyTtl`, `OSVersion`) first: they are the likeliest typo.
    close = [k for k in known if k.lower() == name.lower()]
    close = close or difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def _known_fields(model: type[pydantic.BaseModel], loc: Loc) -> list[str]:
    """The JSON names of the fields of the model found at `loc` under `model`."""
    current: type[pydantic.BaseModel] | None = model
    for segment in loc:
        if current is None:
            return []
        if isinstance(segment, int):
            continue  # a list index: the element model was already resolved
        field = _field_by_json_name(current, segment)
        current = _model_in(field.annotation) if field is not None else None
    if current is None:
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _field_by_json_name(
    model: type[pydantic.BaseModel], name: str
) -> pydantic.fields.FieldInfo | None:
    for field_name, info in model.model_fields.items():
        if name in (info.alias, field_name):
            return info
    return None


def _model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model inside `X`, `X | None`, `list[X]`, `dict[str, X]`, ..."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType or origin in (list, dict, tuple):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _model_named(title: str) -> type[pydantic.BaseModel] | None:
    stack: list[type[pydantic.BaseModel]] = [CamelModel]
    while stack:
        cls = stack.pop()
        if cls.__name__ == title:
            return cls
        stack.extend(cls.__subclasses__())
    return None


def _show(value: Any) -> str:
    """A value as the user would have written it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__
