"""Pydantic validation errors in the manifest author's words: one `field.path: rule` line each.

Field paths use the JSON names the user wrote (`spec.proxy.stickyTTL`), never
pydantic's union tags; rules read like the schema (`must be <= 500, got 501`).
An unknown field that looks like a known one is answered with "did you mean",
and then the "required" error of the field it was meant to be is left out:
`replica: 5` is one mistake, not two.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

import pydantic
from pydantic_core import ErrorDetails

from devicepool.api.base import CamelModel
from devicepool.api.problems import Loc, problem_line, show_value

__all__ = ["format_errors", "format_validation_error"]

# Tags pydantic uses for members of `int | str` style unions. A manifest field
# with one of these names would be misreported; none of ours has one.
_UNION_TAGS = frozenset({"int", "str", "float", "bool", "list", "dict", "none", "bytes"})

# Error kinds answered by a fixed "what it must be", followed by what it got.
_EXPECTED = {
    kind: expected
    for kinds, expected in (
        (("int_type", "int_parsing", "int_from_float", "int_parsing_size"), "must be an integer"),
        (("finite_number",), "must be a finite number"),
        (("float_type", "float_parsing"), "must be a number"),
        (("bool_type", "bool_parsing"), "must be true or false"),
        (("invalid_key",), "keys must be strings"),
        (("model_type", "model_attributes_type", "dict_type", "mapping_type"), "must be a mapping"),
        (("list_type", "tuple_type", "iterable_type"), "must be a list"),
    )
    for kind in kinds
}

# Bound errors: the operator to show and the `ctx` key holding the bound.
_BOUNDS = {
    "less_than_equal": ("<=", "le"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "greater_than": (">", "gt"),
}


def format_validation_error(exc: pydantic.ValidationError, *, prefix: str = "") -> list[str]:
    """One line per pydantic error: `{prefix}{field.path}: {rule}`.

    `prefix` is prepended verbatim (e.g. `"pools.yaml: "`). Field paths use the
    JSON names (`spec.proxy.stickyTTL`) with `[i]` for list indexes.
    """
    return format_errors(exc.errors(), model=_model_named(exc.title), prefix=prefix, base=())


def format_errors(
    errors: list[ErrorDetails], *, model: type[pydantic.BaseModel] | None, prefix: str, base: Loc
) -> list[str]:
    """The problem lines of `errors` raised by `model` for the document at `base`."""
    # An `invalid_key` error's loc ends in the bad key itself: report it at the mapping.
    # So does a `dict[str, ...]` key that is no string (`{1: x}`), or it would read
    # as a list index (`labels[1]`).
    locs = [
        _user_loc(error)[:-1] if _is_key_type_error(error) else _user_loc(error) for error in errors
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
        line = problem_line(prefix, base + loc, _rule(error, model=model, loc=loc))
        if line not in lines:
            lines.append(line)
    return lines


def _is_key_type_error(error: ErrorDetails) -> bool:
    if error["type"] == "invalid_key":
        return True
    return error["type"] == "string_type" and error["loc"][-1:] == ("[key]",)


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


def _rule(error: ErrorDetails, *, model: type[pydantic.BaseModel] | None, loc: Loc) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error.get("input")
    got = f"got {show_value(value)}"
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        if loc[-2:] == ("metadata", "namespace"):
            # Copied from a Kubernetes manifest; "did you mean 'name'?" would mislead.
            return "unknown field (pools have no namespace; the Temporal namespace scopes them)"
        return _unknown_field(model, loc)
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error["msg"])).removeprefix("Value error, ")
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        return f"must be {op} {ctx.get(key)}, {got}"
    if kind in _EXPECTED:
        return f"{_EXPECTED[kind]}, {got}"
    if kind == "string_type" and error["loc"][-1:] == ("[key]",):
        return f"keys must be strings, {got}"
    if kind in ("string_type", "string_unicode"):
        if isinstance(value, bool):
            # YAML 1.1: `region: no` is the boolean false, not the string "no".
            return f"must be a string, {got} (quote it: YAML reads yes/no/on/off as booleans)"
        return f"must be a string, {got}"
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
    return next((i for n, i in model.model_fields.items() if name in (i.alias, n)), None)


def _model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model inside `X`, `X | None`, `list[X]`, `dict[str, X]`, ..."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType or origin in (list, dict, tuple):
        inner = (_model_in(arg) for arg in typing.get_args(annotation))
        return next((found for found in inner if found is not None), None)
    return None


def _model_named(title: str) -> type[pydantic.BaseModel] | None:
    """The `CamelModel` subclass a `ValidationError` titled `title` came from."""
    stack: list[type[pydantic.BaseModel]] = [CamelModel]
    while stack:
        cls = stack.pop()
        if cls.__name__ == title:
            return cls
        stack.extend(cls.__subclasses__())
    return None
