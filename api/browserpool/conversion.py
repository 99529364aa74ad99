"""Conversion between BrowserPool versions, lossless both ways (as `api.conversion` for DevicePool).

v1alpha1 → v1beta1 always fits. v1beta1 → v1alpha1 keeps what v1alpha1 cannot
say (`health`) in the same annotation as DevicePool, `CONVERSION_ANNOTATION`,
and the way back reads it again (a hypothesis property checks both directions).

`stored_spec` reads a spec of either version into the stored one, for the
messages that carry a spec. There is no `wire_spec` here: no build that knows
BrowserPool predates v1beta1, so a client always sends the stored version.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pydantic

from devicepool.api.browserpool import v1alpha1, v1beta1
from devicepool.api.conversion import (
    API_VERSIONS,
    CONVERSION_ANNOTATION,
    ConversionError,
    put_kept,
    take_kept,
)
from devicepool.api.names import API_VERSION_V1ALPHA1, API_VERSION_V1BETA1, KIND_BROWSER_POOL
from devicepool.api.v1alpha1 import ProxySpec as AlphaProxySpec
from devicepool.api.v1beta1 import ProxySpec as BetaProxySpec
from devicepool.api.validation_messages import format_errors

__all__ = [
    "KEPT_FIELDS",
    "convert",
    "looks_v1alpha1",
    "resource_json_in",
    "spec_to_v1alpha1",
    "spec_to_v1beta1",
    "stored_spec",
    "stored_spec_json",
    "to_v1alpha1",
    "to_v1beta1",
]

# The v1beta1 spec fields a v1alpha1 BrowserPool has no place for (each a mapping).
KEPT_FIELDS = frozenset({"health"})

AnyBrowserPool = v1alpha1.BrowserPool | v1beta1.BrowserPool


# --- specs --------------------------------------------------------------------------


def spec_to_v1beta1(
    spec: v1alpha1.BrowserPoolSpec, kept: dict[str, Any] | None = None
) -> v1beta1.BrowserPoolSpec:
    """`spec` in v1beta1; `kept`: v1beta1-only fields a conversion to v1alpha1 set aside."""
    kept = kept or {}
    proxy = None
    if spec.proxy is not None:
        ttl = timedelta(seconds=spec.proxy.sticky_ttl)
        proxy = BetaProxySpec(pool_ref=spec.proxy.pool_ref, session_ttl=ttl)
    return v1beta1.BrowserPoolSpec.model_validate(
        {
            "replicas": spec.replicas,
            "nodeSelector": spec.node_selector,
            "fingerprint": spec.fingerprint,
            "proxy": proxy,
            "groupId": spec.group_id,
            "open": spec.open,
            "health": kept.get("health", {}),
        }
    )


def spec_to_v1alpha1(
    spec: v1beta1.BrowserPoolSpec,
) -> tuple[v1alpha1.BrowserPoolSpec, dict[str, Any]]:
    """`spec` in v1alpha1, and the v1beta1 fields it cannot hold (empty if none)."""
    proxy = None
    if spec.proxy is not None:
        proxy = AlphaProxySpec(pool_ref=spec.proxy.pool_ref, sticky_ttl=spec.proxy.session_ttl)
    alpha = v1alpha1.BrowserPoolSpec(
        replicas=spec.replicas,
        node_selector=spec.node_selector,
        fingerprint=spec.fingerprint,
        proxy=proxy,
        group_id=spec.group_id,
        open=spec.open,
    )
    # Only what differs from the defaults: a pool that sets nothing keeps no annotation.
    health = spec.health.model_dump(mode="json", exclude_defaults=True)
    return alpha, ({"health": health} if health else {})


# --- pools --------------------------------------------------------------------------


def to_v1beta1(pool: v1alpha1.BrowserPool) -> v1beta1.BrowserPool:
    annotations, kept = take_kept(
        pool.metadata.annotations, fields=KEPT_FIELDS, kind=KIND_BROWSER_POOL
    )
    try:
        spec = spec_to_v1beta1(pool.spec, kept)
    except pydantic.ValidationError as exc:
        raise _bad_annotation(exc) from None
    metadata = pool.metadata.model_copy(update={"annotations": annotations})
    converted = v1beta1.BrowserPool(metadata=metadata, spec=spec, status=pool.status)
    return converted.read_from(pool.source)


def to_v1alpha1(pool: v1beta1.BrowserPool) -> v1alpha1.BrowserPool:
    spec, kept = spec_to_v1alpha1(pool.spec)
    annotations = put_kept(pool.metadata.annotations, kept)
    metadata = pool.metadata.model_copy(update={"annotations": annotations})
    converted = v1alpha1.BrowserPool(metadata=metadata, spec=spec, status=pool.status)
    return converted.read_from(pool.source)


def convert(pool: AnyBrowserPool, api_version: str) -> AnyBrowserPool:
    """`pool` in `api_version` (one of `API_VERSIONS`); itself if already in it."""
    if api_version == pool.api_version:
        return pool
    if api_version == API_VERSION_V1BETA1 and isinstance(pool, v1alpha1.BrowserPool):
        return to_v1beta1(pool)
    if api_version == API_VERSION_V1ALPHA1 and isinstance(pool, v1beta1.BrowserPool):
        return to_v1alpha1(pool)
    raise ConversionError(
        f"apiVersion: unsupported {api_version!r}, supported: {', '.join(API_VERSIONS)}"
    )


def looks_v1alpha1(spec: Any) -> bool:
    """Whether a BrowserPool spec mapping is written in v1alpha1 (`proxy.stickyTTL`).

    A spec with only the fields both versions share means the same in either.
    """
    if not isinstance(spec, dict):
        return False
    proxy = spec.get("proxy")
    return isinstance(proxy, dict) and bool({"stickyTTL", "sticky_ttl"} & proxy.keys())


def stored_spec(value: Any) -> Any:
    """A before-validator: a v1alpha1 BrowserPool spec mapping, read into v1beta1; else as is.

    For the messages that carry a spec (a pool's input, its `apply` update):
    `Annotated[v1beta1.BrowserPoolSpec, BeforeValidator(stored_spec)]`.
    """
    if looks_v1alpha1(value):
        # A message between builds: fields this build does not know are ignored.
        alpha = v1alpha1.BrowserPoolSpec.model_validate(value, extra="ignore")
        return spec_to_v1beta1(alpha)
    return value


def stored_spec_json(spec: dict[str, Any]) -> dict[str, Any]:
    """A BrowserPool spec's JSON in the stored version; what does not validate, as it is."""
    if not looks_v1alpha1(spec):
        return dict(spec)
    try:
        return stored_spec(spec).to_json_dict()  # type: ignore[no-any-return]
    except pydantic.ValidationError:
        return dict(spec)


def resource_json_in(resource: dict[str, Any], *, api_version: str) -> dict[str, Any]:
    """A stored BrowserPool's `{metadata, spec}` JSON as a manifest in `api_version`.

    What does not validate (a view built from search attributes when no worker
    answered) is shown with only its version and kind changed.
    """
    if api_version not in API_VERSIONS:
        raise ConversionError(
            f"--api-version: unsupported {api_version!r}, supported: {', '.join(API_VERSIONS)}"
        )
    metadata, spec = dict(resource.get("metadata") or {}), dict(resource.get("spec") or {})
    head = {"apiVersion": api_version, "kind": KIND_BROWSER_POOL}
    if api_version == API_VERSION_V1BETA1:
        return {**head, "metadata": metadata, "spec": spec}
    try:
        pool = v1beta1.BrowserPool.model_validate({"metadata": metadata, "spec": spec})
    except pydantic.ValidationError:
        return {**head, "metadata": metadata, "spec": spec}
    converted = to_v1alpha1(pool).to_json_dict()
    return {**head, "metadata": converted["metadata"], "spec": converted["spec"]}


# --- the annotation -----------------------------------------------------------------


def _bad_annotation(exc: pydantic.ValidationError) -> ConversionError:
    # The first problem, in the manifest's words (`health.failureStreakLimit: must be >= 1, ...`).
    [first, *_] = format_errors(exc.errors(), model=v1beta1.BrowserPoolSpec, prefix="", base=())
    return ConversionError(
        f"metadata.annotations.{CONVERSION_ANNOTATION}: {first}"
        " (remove the annotation or convert the pool again)"
    )
