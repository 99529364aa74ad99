"""The conversion engine: a pool kind's versions, converted losslessly both ways.

A kind brings a `Converter` (its two models, its spec rules each way, the fields it keeps, its
rename table); the engine does the rest for every kind: whole pools, `convert`, `stored_spec`
(a before-validator: a pool started before v1beta1 keeps running on the new build),
`resource_json_in` (`get -o yaml`) and `written_in` (`devicepool convert`). What v1alpha1
cannot say rides in `CONVERSION_ANNOTATION`: docs/pools.md, 'Versions: v1alpha1 and v1beta1'."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pydantic

from devicepool.api.names import API_GROUP, API_VERSION_V1ALPHA1, API_VERSION_V1BETA1
from devicepool.api.v1alpha1 import PoolResource

__all__ = [
    "API_VERSIONS",
    "CONVERSION_ANNOTATION",
    "ConversionError",
    "Converter",
    "api_version_named",
    "put_kept",
    "take_kept",
    "written_in",
]

# Holds, on a v1alpha1 pool, the v1beta1 fields it has no place for (compact JSON).
CONVERSION_ANNOTATION = "mobile.example.com/v1beta1-fields"

API_VERSIONS: tuple[str, ...] = (API_VERSION_V1ALPHA1, API_VERSION_V1BETA1)

# JSON paths under `spec`: where a v1alpha1 field lives in v1beta1.
Renames = Mapping[tuple[str, ...], tuple[str, ...]]

Alpha = TypeVar("Alpha", bound=PoolResource)
Stored = TypeVar("Stored", bound=PoolResource)


class ConversionError(ValueError):
    """The conversion annotation is not what devicepool writes (one line, naming it)."""


def api_version_named(name: str, *, option: str) -> str:
    """The API version `name` stands for (`v1alpha1` or in full); ConversionError naming `option`."""
    version = name if "/" in name else f"{API_GROUP}/{name}"
    if version not in API_VERSIONS:
        raise _unsupported(option, name, " (or v1alpha1, v1beta1)")
    return version


def _unsupported(option: str, version: str, more: str = "") -> ConversionError:
    supported = ", ".join(API_VERSIONS)
    return ConversionError(f"{option}: unsupported {version!r}, supported: {supported}{more}")


# --- the engine -----------------------------------------------------------------


@dataclass(frozen=True)
class Converter(Generic[Alpha, Stored]):
    """How one kind converts between v1alpha1 (`alpha`) and its stored v1beta1 (`stored`)."""

    alpha: type[Alpha]
    stored: type[Stored]
    # (v1alpha1 spec, the fields the annotation kept) -> the v1beta1 spec
    spec_to_stored: Callable[[Any, dict[str, Any]], Any]
    # v1beta1 spec -> (the v1alpha1 spec, the fields it cannot hold)
    spec_to_alpha: Callable[[Any], tuple[Any, dict[str, Any]]]
    # Whether a spec mapping is written in v1alpha1 (has a field only v1alpha1 has).
    looks_alpha: Callable[[Any], bool]
    kept_fields: frozenset[str]
    renames: Renames
    # The first problem of a kept field that does not validate, in this kind's words.
    annotation_problem: Callable[[pydantic.ValidationError], str]
    # A stored spec that does not validate, in v1alpha1 as far as it goes (`resource_json_in`).
    alpha_as_it_goes: Callable[[dict[str, Any]], dict[str, Any]] = dict
    # The kind, as a refused annotation names it ("" to name none).
    named_in_errors: str = ""

    def to_v1beta1(self, pool: Alpha) -> Stored:
        annotations, kept = take_kept(
            pool.metadata.annotations, fields=self.kept_fields, kind=self.named_in_errors
        )
        try:
            spec = self.spec_to_stored(pool.spec, kept)  # type: ignore[attr-defined]
        except pydantic.ValidationError as exc:
            raise ConversionError(
                f"metadata.annotations.{CONVERSION_ANNOTATION}: {self.annotation_problem(exc)}"
                " (remove the annotation or convert the pool again)"
            ) from None
        metadata = pool.metadata.model_copy(update={"annotations": annotations})
        converted = self.stored(metadata=metadata, spec=spec, status=pool.status)  # type: ignore[call-arg,attr-defined]
        return converted.read_from(pool.source)

    def to_v1alpha1(self, pool: Stored) -> Alpha:
        spec, kept = self.spec_to_alpha(pool.spec)  # type: ignore[attr-defined]
        annotations = put_kept(pool.metadata.annotations, kept)
        metadata = pool.metadata.model_copy(update={"annotations": annotations})
        converted = self.alpha(metadata=metadata, spec=spec, status=pool.status)  # type: ignore[call-arg,attr-defined]
        return converted.read_from(pool.source)

    def convert(self, pool: Alpha | Stored, api_version: str) -> Alpha | Stored:
        """`pool` in `api_version` (one of `API_VERSIONS`); itself if already in it."""
        if api_version == pool.api_version:  # type: ignore[union-attr]
            return pool
        if api_version == API_VERSION_V1BETA1 and isinstance(pool, self.alpha):
            return self.to_v1beta1(pool)
        if api_version == API_VERSION_V1ALPHA1 and isinstance(pool, self.stored):
            return self.to_v1alpha1(pool)
        raise _unsupported("apiVersion", api_version)

    def stored_spec(self, value: Any) -> Any:
        """A before-validator: a v1alpha1 spec mapping, read into v1beta1; anything else as is.

        For the messages that carry a spec (a pool's input, the `apply` update):
        pools started before v1beta1, and clients from before it, send v1alpha1.
        """
        if self.looks_alpha(value):
            # A message between builds: fields this build does not know are ignored,
            # as the payload converter ignores them everywhere else.
            spec_model: Any = self.alpha.model_fields["spec"].annotation
            return self.spec_to_stored(spec_model.model_validate(value, extra="ignore"), {})
        return value

    def stored_spec_json(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A spec's JSON (a `spec` query's answer) in the stored version.

        A pool still running on a build from before v1beta1 answers in v1alpha1.
        What does not validate is left as it is (a view shows what there is).
        """
        if not self.looks_alpha(spec):
            return dict(spec)
        try:
            return self.stored_spec(spec).to_json_dict()  # type: ignore[no-any-return]
        except pydantic.ValidationError:
            return dict(spec)

    def resource_json_in(self, resource: dict[str, Any], *, api_version: str) -> dict[str, Any]:
        """A stored pool's `{metadata, spec}` JSON as `{apiVersion, kind, metadata, spec}` in
        `api_version`.

        What does not validate (a view built from search attributes when no worker
        answered) is converted field by field as far as it goes.
        """
        if api_version not in API_VERSIONS:
            raise _unsupported("--api-version", api_version)
        metadata, spec = dict(resource.get("metadata") or {}), dict(resource.get("spec") or {})
        head = {"apiVersion": api_version, "kind": self.stored.model_fields["kind"].default}
        if api_version == API_VERSION_V1BETA1:
            return {**head, "metadata": metadata, "spec": spec}
        try:
            pool = self.stored.model_validate({"metadata": metadata, "spec": spec})
        except pydantic.ValidationError:
            return {**head, "metadata": metadata, "spec": self.alpha_as_it_goes(spec)}
        converted = self.to_v1alpha1(pool).to_json_dict()  # type: ignore[attr-defined]
        return {**head, "metadata": converted["metadata"], "spec": converted["spec"]}

    def written_in(self, pool: Alpha | Stored, written: dict[str, Any]) -> dict[str, Any]:
        """`pool` as a manifest, with what its author `written` left to defaults still left out.

        `written` is the manifest `pool` was converted from. A field is kept when it
        is not at its default, or when the author wrote it (under its name in
        either version, camelCase or snake_case): `devicepool convert` rewrites what
        was written, it does not spell out every default (`account: default`,
        `sessionTTL: 0s` inside a block the author wrote are defaults too).
        """
        data = pool.to_json_dict()  # type: ignore[attr-defined]
        data.pop("status", None)
        renames = (
            self.renames
            if pool.api_version == API_VERSION_V1BETA1  # type: ignore[union-attr]
            else {new: old for old, new in self.renames.items()}
        )
        source_spec: dict[str, Any] = (
            written["spec"] if isinstance(written.get("spec"), dict) else {}
        )
        written_model = (
            (self.alpha if written.get("apiVersion") == API_VERSION_V1ALPHA1 else self.stored)
            .model_fields["spec"]
            .annotation
        )
        source_paths = {_json_path(written_model, path) for path, _ in _leaves(source_spec)}  # type: ignore[arg-type]
        source_paths |= {renames[path] for path in source_paths if path in renames}
        model = type(pool).model_fields["spec"].annotation
        defaults = dict(_leaves(_defaults_of(model, data["spec"])))  # type: ignore[arg-type]
        spec: dict[str, Any] = {}
        for path, value in _leaves(data["spec"]):
            if path in source_paths or defaults.get(path, _NONE) != value:
                _put(spec, path, value)
        # A block set that is unset by default (`leases: {}`) stays, even with nothing in it
        # but defaults: set, it means something unset does not.
        for key, value in data["spec"].items():
            if key not in spec and isinstance(value, dict) and _unset_by_default(model, key):  # type: ignore[arg-type]
                spec[key] = {}
        # A block (mapping) the author wrote stays, even empty, under its name after conversion
        # (a block still: v1beta1's `provider` mapping is v1alpha1's `provider` string).
        for key, value in source_spec.items():
            block = renames.get(_json_path(written_model, (key,)), (key,))[0]  # type: ignore[arg-type]
            if isinstance(value, dict) and _is_block(model, block):  # type: ignore[arg-type]
                spec.setdefault(block, {})
        metadata = {
            key: value
            for key, value in data["metadata"].items()
            if value or key in (written.get("metadata") or {})
        }
        return {**data, "metadata": metadata, "spec": spec}


def written_in(pool: PoolResource, written: dict[str, Any]) -> dict[str, Any]:
    """`Converter.written_in` of `pool`'s kind."""
    from devicepool.api.kinds import kind_named  # the registry imports every kind's rules

    return kind_named(pool.kind).conversion.written_in(pool, written)  # type: ignore[attr-defined]


_NONE = object()


def _defaults_of(model: type[pydantic.BaseModel], spec: dict[str, Any]) -> dict[str, Any]:
    """The JSON of `model` at its defaults: each optional field's default, each block (a nested
    model) `spec` sets at its own defaults too. Required fields have no default: left out."""
    required = {
        (field.alias or name): spec[field.alias or name]
        for name, field in model.model_fields.items()
        if field.is_required() and (field.alias or name) in spec
    }
    try:
        defaults = model.model_validate(required).model_dump(mode="json", exclude_none=True)
    except pydantic.ValidationError:  # a rule across fields: nothing counts as a default
        return {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        inner = _model_in(field.annotation)
        if field.is_required():
            defaults.pop(key, None)
        elif inner is not None and isinstance(spec.get(key), dict):
            defaults[key] = _defaults_of(inner, spec[key])
    return defaults


def _model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model of a block field (`X` or `X | None`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if _is_union(annotation):
        return next(filter(None, map(_model_in, typing.get_args(annotation))), None)
    return None


def _field(model: type[pydantic.BaseModel], key: str) -> Any:
    """The field `key` (its JSON or its Python name) of `model`, or None."""
    return next((f for n, f in model.model_fields.items() if key in (f.alias, n)), None)


def _json_path(model: type[pydantic.BaseModel] | None, path: tuple[str, ...]) -> tuple[str, ...]:
    """`path` as written (`proxy.pool_ref` validates too) in the JSON names (`proxy.poolRef`)."""
    named: list[str] = []
    for key in path:
        field = _field(model, key) if model is not None else None
        named.append(field.alias or key if field is not None else key)
        model = _model_in(field.annotation) if field is not None else None
    return tuple(named)


def _is_block(model: type[pydantic.BaseModel], key: str) -> bool:
    """Whether field `key` of `model` is a mapping (a nested model, or a dict)."""
    field = _field(model, key)
    if field is None:
        return False
    annotation = field.annotation
    arms = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    return any(_model_in(arm) is not None or typing.get_origin(arm) is dict for arm in arms)


def _is_union(annotation: Any) -> bool:
    return isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union


def _unset_by_default(model: type[pydantic.BaseModel], key: str) -> bool:
    field = _field(model, key)
    return field is not None and field.default_factory is None and field.default is None


def _leaves(data: dict[str, Any], base: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found: list[tuple[tuple[str, ...], Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            found.extend(_leaves(value, (*base, key)))
        else:
            found.append(((*base, key), value))
    return found


def _put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


# --- the annotation -----------------------------------------------------------------


def take_kept(
    annotations: Mapping[str, str], *, fields: frozenset[str], kind: str = ""
) -> tuple[dict[str, str], dict[str, Any]]:
    """`annotations` without `CONVERSION_ANNOTATION`, and the v1beta1 fields it kept (each
    of `fields`, a mapping; `schedule` a list); ConversionError if it is not what devicepool writes (`kind`:
    the resource, said in that message)."""
    rest = dict(annotations)
    raw = rest.pop(CONVERSION_ANNOTATION, None)
    if raw is None:
        return rest, {}
    try:
        kept = json.loads(raw)
    except ValueError:
        kept = None
    if (
        not isinstance(kept, dict)
        or not set(kept) <= fields
        or not all(
            isinstance(value, list if key == "schedule" else dict) for key, value in kept.items()
        )
    ):
        raise ConversionError(
            f"metadata.annotations.{CONVERSION_ANNOTATION}: not what devicepool writes"
            f"{f' for a {kind}' if kind else ''} (a JSON object with"
            f" {', '.join(sorted(fields))}); remove it or convert the pool again"
        )
    return rest, kept


def put_kept(annotations: Mapping[str, str], kept: Mapping[str, Any]) -> dict[str, str]:
    """`annotations` with `kept` (fields v1alpha1 cannot hold) in `CONVERSION_ANNOTATION`."""
    written = dict(annotations)
    if kept:
        written[CONVERSION_ANNOTATION] = json.dumps(kept, separators=(",", ":"), sort_keys=True)
    return written
