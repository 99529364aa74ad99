"""Conversion between DevicePool versions, lossless both ways.

v1alpha1 → v1beta1 always fits: every v1alpha1 field has a v1beta1 home.
v1beta1 → v1alpha1 keeps what v1alpha1 cannot say (per-pool health and
scale-down durations) in the annotation `CONVERSION_ANNOTATION`, as Kubernetes
conversion webhooks do, and the way back reads it again: converting a pool to
v1alpha1 and back gives the same pool (a hypothesis property checks both
directions). `convert` picks the direction from the version asked for.

`stored_spec` reads a spec of either version into the stored one (v1beta1): a
pool started before v1beta1 has a v1alpha1 spec in its workflow input and
keeps running on the new build.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pydantic

from devicepool.api import v1alpha1, v1beta1
from devicepool.api.names import (
    API_GROUP,
    API_VERSION_V1ALPHA1,
    API_VERSION_V1BETA1,
    KIND_DEVICE_POOL,
)

__all__ = [
    "API_VERSIONS",
    "CONVERSION_ANNOTATION",
    "ConversionError",
    "api_version_named",
    "convert",
    "looks_v1alpha1",
    "put_kept",
    "resource_json_in",
    "spec_to_v1alpha1",
    "spec_to_v1beta1",
    "stored_spec",
    "stored_spec_json",
    "take_kept",
    "to_v1alpha1",
    "to_v1beta1",
    "wire_spec",
    "written_in",
]

# Holds, on a v1alpha1 pool, the v1beta1 fields it has no place for (compact JSON).
CONVERSION_ANNOTATION = "mobile.example.com/v1beta1-fields"
# The v1beta1 spec fields v1alpha1 has no place for (each a mapping).
KEPT_FIELDS = frozenset(
    {"health", "scaleDown", "spendCap", "lifetime", "rollout", "disruption", "reserve"}
)
# Kept whenever present (an empty mapping is a choice too).
_WHOLE = ("spendCap", "lifetime", "rollout", "disruption", "reserve")

API_VERSIONS: tuple[str, ...] = (API_VERSION_V1ALPHA1, API_VERSION_V1BETA1)

AnyPool = v1alpha1.DevicePool | v1beta1.DevicePool


class ConversionError(ValueError):
    """The conversion annotation is not what devicepool writes (one line, naming it)."""


# --- specs --------------------------------------------------------------------------


def spec_to_v1beta1(
    spec: v1alpha1.DevicePoolSpec, kept: dict[str, Any] | None = None
) -> v1beta1.DevicePoolSpec:
    """`spec` in v1beta1; `kept`: v1beta1-only fields a conversion to v1alpha1 set aside."""
    kept = kept or {}
    health = {"maxUnhealthy": spec.max_unhealthy, **kept.get("health", {})}
    spend_cap, lifetime, rollout = kept.get("spendCap"), kept.get("lifetime"), kept.get("rollout")
    disruption = kept.get("disruption")
    proxy = None
    if spec.proxy is not None:
        ttl = timedelta(seconds=spec.proxy.sticky_ttl)
        proxy = v1beta1.ProxySpec(pool_ref=spec.proxy.pool_ref, session_ttl=ttl)
    return v1beta1.DevicePoolSpec.model_validate(
        {
            "provider": {"name": spec.provider, "account": spec.provider_credential_ref},
            "platform": spec.platform,
            "region": spec.region,
            "osVersion": spec.os_version,
            "replicas": spec.replicas,
            "proxy": proxy,
            "health": health,
            "scaleDown": kept.get("scaleDown", {}),
            "spendCap": spend_cap,
            "lifetime": lifetime,
            "rollout": rollout,
            "disruption": disruption,
            "reserve": kept.get("reserve"),
        }
    )


def spec_to_v1alpha1(
    spec: v1beta1.DevicePoolSpec,
) -> tuple[v1alpha1.DevicePoolSpec, dict[str, Any]]:
    """`spec` in v1alpha1, and the v1beta1 fields it cannot hold (empty if none)."""
    proxy = None
    if spec.proxy is not None:
        proxy = v1alpha1.ProxySpec(pool_ref=spec.proxy.pool_ref, sticky_ttl=spec.proxy.session_ttl)
    alpha = v1alpha1.DevicePoolSpec(
        provider=spec.provider.name,
        platform=spec.platform,
        region=spec.region,
        os_version=spec.os_version,
        replicas=spec.replicas,
        proxy=proxy,
        provider_credential_ref=spec.provider.account,
        max_unhealthy=spec.health.max_unhealthy,
    )
    health = spec.health.model_dump(mode="json", exclude_none=True, exclude={"max_unhealthy"})
    scale_down = spec.scale_down.model_dump(mode="json", exclude_none=True)
    spend_cap = spec.spend_cap.to_json_dict() if spec.spend_cap is not None else None
    lifetime = spec.lifetime.to_json_dict() if spec.lifetime is not None else None
    rollout = spec.rollout.to_json_dict() if spec.rollout is not None else None
    disruption = spec.disruption.to_json_dict() if spec.disruption is not None else None
    reserve = spec.reserve.to_json_dict() if spec.reserve is not None else None
    fields = (
        ("health", health),
        ("scaleDown", scale_down),
        ("spendCap", spend_cap),
        ("lifetime", lifetime),
        ("rollout", rollout),
        ("disruption", disruption),
        ("reserve", reserve),
    )
    # health and scaleDown: only what is set; the others: present or not.
    kept = {key: value for key, value in fields if value is not None and (value or key in _WHOLE)}
    return alpha, kept


# --- pools --------------------------------------------------------------------------


def to_v1beta1(pool: v1alpha1.DevicePool) -> v1beta1.DevicePool:
    annotations, kept = take_kept(pool.metadata.annotations, fields=KEPT_FIELDS)
    try:
        spec = spec_to_v1beta1(pool.spec, kept)
    except pydantic.ValidationError as exc:
        raise _bad_annotation(exc) from None
    metadata = pool.metadata.model_copy(update={"annotations": annotations})
    converted = v1beta1.DevicePool(metadata=metadata, spec=spec, status=pool.status)
    return converted.read_from(pool.source)


def to_v1alpha1(pool: v1beta1.DevicePool) -> v1alpha1.DevicePool:
    spec, kept = spec_to_v1alpha1(pool.spec)
    annotations = put_kept(pool.metadata.annotations, kept)
    metadata = pool.metadata.model_copy(update={"annotations": annotations})
    converted = v1alpha1.DevicePool(metadata=metadata, spec=spec, status=pool.status)
    return converted.read_from(pool.source)


def convert(pool: AnyPool, api_version: str) -> AnyPool:
    """`pool` in `api_version` (one of `API_VERSIONS`); itself if already in it."""
    if api_version == pool.api_version:
        return pool
    if api_version == API_VERSION_V1BETA1 and isinstance(pool, v1alpha1.DevicePool):
        return to_v1beta1(pool)
    if api_version == API_VERSION_V1ALPHA1 and isinstance(pool, v1beta1.DevicePool):
        return to_v1alpha1(pool)
    raise ConversionError(
        f"apiVersion: unsupported {api_version!r}, supported: {', '.join(API_VERSIONS)}"
    )


def api_version_named(name: str, *, option: str) -> str:
    """The API version `name` stands for (`v1alpha1` or in full); ConversionError naming `option`."""
    version = name if "/" in name else f"{API_GROUP}/{name}"
    if version not in API_VERSIONS:
        raise ConversionError(
            f"{option}: unsupported {name!r}, supported: {', '.join(API_VERSIONS)}"
            " (or v1alpha1, v1beta1)"
        )
    return version


def looks_v1alpha1(spec: Any) -> bool:
    """Whether a spec mapping is written in v1alpha1 (has a field only v1alpha1 has).

    A spec with only the fields both versions share means the same in either.
    """
    if not isinstance(spec, dict):
        return False
    if isinstance(spec.get("provider"), str):
        return True
    alpha_only = {
        "providerCredentialRef",
        "provider_credential_ref",
        "maxUnhealthy",
        "max_unhealthy",
    }
    if alpha_only & spec.keys():
        return True
    proxy = spec.get("proxy")
    return isinstance(proxy, dict) and bool({"stickyTTL", "sticky_ttl"} & proxy.keys())


def stored_spec(value: Any) -> Any:
    """A before-validator: a v1alpha1 spec mapping, read into v1beta1; anything else as is.

    For the messages that carry a spec (a pool's input, the `apply` update):
    pools started before v1beta1, and clients from before it, send v1alpha1.
    """
    if looks_v1alpha1(value):
        # A message between builds: fields this build does not know are ignored,
        # as the payload converter ignores them everywhere else.
        alpha = v1alpha1.DevicePoolSpec.model_validate(value, extra="ignore")
        return spec_to_v1beta1(alpha)
    return value


def stored_spec_json(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec's JSON (a `spec` query's answer) in the stored version.

    A pool still running on a build from before v1beta1 answers in v1alpha1.
    What does not validate is left as it is (a view shows what there is).
    """
    if not looks_v1alpha1(spec):
        return dict(spec)
    try:
        return stored_spec(spec).to_json_dict()  # type: ignore[no-any-return]
    except pydantic.ValidationError:
        return dict(spec)


def resource_json_in(resource: dict[str, Any], *, api_version: str) -> dict[str, Any]:
    """A stored pool's `{metadata, spec}` JSON as `{apiVersion, kind, metadata, spec}` in `api_version`.

    What does not validate (a view built from search attributes when no worker
    answered) is converted field by field as far as it goes.
    """
    if api_version not in API_VERSIONS:
        raise ConversionError(
            f"--api-version: unsupported {api_version!r}, supported: {', '.join(API_VERSIONS)}"
        )
    metadata, spec = dict(resource.get("metadata") or {}), dict(resource.get("spec") or {})
    head = {"apiVersion": api_version, "kind": KIND_DEVICE_POOL}
    if api_version == API_VERSION_V1BETA1:
        return {**head, "metadata": metadata, "spec": spec}
    try:
        pool = v1beta1.DevicePool.model_validate({"metadata": metadata, "spec": spec})
    except pydantic.ValidationError:
        provider = spec.pop("provider", None) or {}
        if isinstance(provider, dict) and "account" in provider:
            spec["providerCredentialRef"] = provider["account"]
        return {**head, "metadata": metadata, "spec": spec}
    converted = to_v1alpha1(pool).to_json_dict()
    return {**head, "metadata": converted["metadata"], "spec": converted["spec"]}


def wire_spec(spec: v1beta1.DevicePoolSpec) -> dict[str, Any]:
    """The JSON a client sends a pool (its input, `apply`): the oldest version that says it all.

    Every build reads both versions (`stored_spec`) and stores v1beta1; a
    v1beta1-only field makes it v1beta1. A spec v1alpha1 can hold goes as
    v1alpha1, so a build from before v1beta1 (a rollback to v0.1.0) still
    reads what a newer client sends it.
    """
    alpha, kept = spec_to_v1alpha1(spec)
    return spec.to_json_dict() if kept else alpha.to_json_dict()


# --- manifests as written --------------------------------------------------------

# Where a v1alpha1 field lives in v1beta1 (JSON paths under `spec`).
_RENAMED: dict[tuple[str, ...], tuple[str, ...]] = {
    ("provider",): ("provider", "name"),
    ("providerCredentialRef",): ("provider", "account"),
    ("maxUnhealthy",): ("health", "maxUnhealthy"),
    ("proxy", "stickyTTL"): ("proxy", "sessionTTL"),
}
_RENAMED_BACK: dict[tuple[str, ...], tuple[str, ...]] = {new: old for old, new in _RENAMED.items()}


def written_in(pool: AnyPool, written: dict[str, Any]) -> dict[str, Any]:
    """`pool` as a manifest, with what its author `written` left to defaults still left out.

    `written` is the manifest `pool` was converted from. A field is kept when it
    is not at its default, or when the author wrote it (under its name in
    either version): `devicepool convert` rewrites what was written, it does not
    spell out every default.
    """
    data = pool.to_json_dict()
    data.pop("status", None)
    renames = _RENAMED if pool.api_version == API_VERSION_V1BETA1 else _RENAMED_BACK
    source_spec: dict[str, Any] = written["spec"] if isinstance(written.get("spec"), dict) else {}
    source_paths = {path for path, _ in _leaves(source_spec)}
    source_paths |= {renames[path] for path in source_paths if path in renames}
    source_paths |= {path[:1] for path in source_paths}  # a written block keeps its key
    model = type(pool).model_fields["spec"].annotation
    defaults = dict(_leaves(_defaults_of(model, data["spec"])))  # type: ignore[arg-type]
    spec: dict[str, Any] = {}
    for path, value in _leaves(data["spec"]):
        if path in source_paths or path[:1] in source_paths or defaults.get(path, _NONE) != value:
            _put(spec, path, value)
    fields = {field.alias or name for name, field in model.model_fields.items()}  # type: ignore[union-attr]
    for key in written_spec_blocks(source_spec, renames):
        if key in fields:
            spec.setdefault(key, {})
    metadata = {
        key: value
        for key, value in data["metadata"].items()
        if value or key in (written.get("metadata") or {})
    }
    return {**data, "metadata": metadata, "spec": spec}


def written_spec_blocks(
    source_spec: dict[str, Any], renames: dict[tuple[str, ...], tuple[str, ...]]
) -> list[str]:
    """The spec blocks (mappings) the author wrote, under their names after conversion."""
    blocks = []
    for key, value in source_spec.items():
        if isinstance(value, dict):
            blocks.append(renames.get((key,), (key,))[0])
    return blocks


_NONE = object()


def _defaults_of(model: type[pydantic.BaseModel], spec: dict[str, Any]) -> dict[str, Any]:
    """The JSON of `model` with only its required fields set (to `spec`'s)."""
    required = {
        (field.alias or name): spec[field.alias or name]
        for name, field in model.model_fields.items()
        if field.is_required() and (field.alias or name) in spec
    }
    try:
        defaults = model.model_validate(required).model_dump(mode="json", exclude_none=True)
    except pydantic.ValidationError:  # pragma: no cover - the spec itself validated
        return {}
    proxy = spec.get("proxy")
    if isinstance(proxy, dict) and "proxy" in model.model_fields:
        proxy_model = model.model_fields["proxy"].annotation
        inner = next(a for a in getattr(proxy_model, "__args__", ()) if a is not type(None))
        defaults["proxy"] = _defaults_of(inner, proxy)
    return defaults


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
    of `fields`, a mapping); ConversionError if it is not what devicepool writes (`kind`:
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
        or not all(isinstance(value, dict) for value in kept.values())
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


def _bad_annotation(exc: pydantic.ValidationError) -> ConversionError:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return ConversionError(
        f"metadata.annotations.{CONVERSION_ANNOTATION}: {where}: {first['msg']}"
        " (remove the annotation or convert the pool again)"
    )
