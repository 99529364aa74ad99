"""DevicePool's conversion rules (`api.converter` is the engine), and its functions.

v1beta1 → v1alpha1 keeps per-pool health, scale-down and every later block
(`KEPT_FIELDS`) in `CONVERSION_ANNOTATION`. The functions here (`convert`,
`stored_spec`, ...) are DevicePool's; the engine's names are here too, as before.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pydantic
from pydantic.alias_generators import to_snake

from devicepool.api import v1alpha1, v1beta1
from devicepool.api.converter import (
    API_VERSIONS,
    CONVERSION_ANNOTATION,
    ConversionError,
    Converter,
    api_version_named,
    written_in,
)
from devicepool.api.durations import parse_duration

__all__ = [
    "API_VERSIONS",
    "CONVERSION_ANNOTATION",
    "DEVICE_POOL",
    "KEPT_FIELDS",
    "ConversionError",
    "api_version_named",
    "convert",
    "looks_v1alpha1",
    "proxy_alpha_as_it_goes",
    "proxy_looks_v1alpha1",
    "spec_to_v1alpha1",
    "spec_to_v1beta1",
    "stored_spec",
    "stored_spec_json",
    "to_v1alpha1",
    "to_v1beta1",
    "wire_spec",
    "written_in",
]

# Of the fields below, those kept whenever present (an empty mapping is a choice too).
_WHOLE = (
    "spendCap",
    "lifetime",
    "rollout",
    "disruption",
    "reserve",
    "leases",
    "autoscale",
    "schedule",
)
# The v1beta1 spec fields v1alpha1 has no place for (each a mapping, `schedule` a list).
KEPT_FIELDS = frozenset({"health", "scaleDown", *_WHOLE})


# --- DevicePool specs ----------------------------------------------------------------------


def proxy_to_v1beta1(proxy: v1alpha1.ProxySpec | None) -> v1beta1.ProxySpec | None:
    """`stickyTTL: 900` as `sessionTTL: 15m` (BrowserPool's proxy is the same)."""
    if proxy is None:
        return None
    ttl = timedelta(seconds=proxy.sticky_ttl)
    return v1beta1.ProxySpec(pool_ref=proxy.pool_ref, session_ttl=ttl)


def proxy_to_v1alpha1(proxy: v1beta1.ProxySpec | None) -> v1alpha1.ProxySpec | None:
    if proxy is None:
        return None
    return v1alpha1.ProxySpec(pool_ref=proxy.pool_ref, sticky_ttl=proxy.session_ttl)


def spec_to_v1beta1(
    spec: v1alpha1.DevicePoolSpec, kept: dict[str, Any] | None = None
) -> v1beta1.DevicePoolSpec:
    """`spec` in v1beta1; `kept`: v1beta1-only fields a conversion to v1alpha1 set aside."""
    kept = kept or {}
    health = {"maxUnhealthy": spec.max_unhealthy, **kept.get("health", {})}
    return v1beta1.DevicePoolSpec.model_validate(
        {
            "provider": {"name": spec.provider, "account": spec.provider_credential_ref},
            "platform": spec.platform,
            "region": spec.region,
            "osVersion": spec.os_version,
            "replicas": spec.replicas,
            "proxy": proxy_to_v1beta1(spec.proxy),
            "health": health,
            "scaleDown": kept.get("scaleDown", {}),
            **{key: kept.get(key) for key in _WHOLE},
        }
    )


def spec_to_v1alpha1(
    spec: v1beta1.DevicePoolSpec,
) -> tuple[v1alpha1.DevicePoolSpec, dict[str, Any]]:
    """`spec` in v1alpha1, and the v1beta1 fields it cannot hold (empty if none)."""
    alpha = v1alpha1.DevicePoolSpec(
        provider=spec.provider.name,
        platform=spec.platform,
        region=spec.region,
        os_version=spec.os_version,
        replicas=spec.replicas,
        proxy=proxy_to_v1alpha1(spec.proxy),
        provider_credential_ref=spec.provider.account,
        max_unhealthy=spec.health.max_unhealthy,
    )
    health = spec.health.model_dump(mode="json", exclude_none=True, exclude={"max_unhealthy"})
    scale_down = spec.scale_down.model_dump(mode="json", exclude_none=True)
    # health and scaleDown: only what is set; the others: present or not.
    kept: dict[str, Any] = {
        key: value for key, value in (("health", health), ("scaleDown", scale_down)) if value
    }
    for key in _WHOLE:
        block = getattr(spec, to_snake(key))
        if isinstance(block, list):  # `schedule`: its windows
            kept[key] = [window.to_json_dict() for window in block]
        elif block is not None:
            kept[key] = block.to_json_dict()
    return alpha, kept


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
    return bool(alpha_only & spec.keys()) or proxy_looks_v1alpha1(spec)


def proxy_looks_v1alpha1(spec: Any) -> bool:
    """Whether a spec mapping's `proxy` is written in v1alpha1 (`stickyTTL`): all that tells a
    BrowserPool's versions apart (a spec of only shared fields means the same in either)."""
    proxy = spec.get("proxy") if isinstance(spec, dict) else None
    return isinstance(proxy, dict) and bool({"stickyTTL", "sticky_ttl"} & proxy.keys())


def wire_spec(spec: v1beta1.DevicePoolSpec) -> dict[str, Any]:
    """The JSON a client sends a pool (its input, `apply`): the oldest version that says it all.

    A spec v1alpha1 can hold goes as v1alpha1, so a build from before v1beta1 still reads it:
    docs/pools.md, 'Versions: v1alpha1 and v1beta1'.
    """
    alpha, kept = spec_to_v1alpha1(spec)
    return spec.to_json_dict() if kept else alpha.to_json_dict()


# --- DevicePool ---------------------------------------------------------------


def _annotation_problem(exc: pydantic.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}"


def _alpha_as_it_goes(spec: dict[str, Any]) -> dict[str, Any]:
    spec = proxy_alpha_as_it_goes(spec)
    provider = spec.pop("provider", None) or {}
    if isinstance(provider, dict) and "account" in provider:
        spec["providerCredentialRef"] = provider["account"]
    return spec


def proxy_alpha_as_it_goes(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` (JSON) with `proxy.sessionTTL` as `stickyTTL` seconds where it reads as a
    duration (both kinds' proxy; the rest of a spec that does not validate stays as it is)."""
    proxy = spec.get("proxy")
    if not isinstance(proxy, dict) or "sessionTTL" not in proxy:
        return spec
    try:
        seconds = parse_duration(proxy["sessionTTL"])
    except ValueError:
        return spec
    rest = {key: value for key, value in proxy.items() if key != "sessionTTL"}
    return {**spec, "proxy": {**rest, "stickyTTL": int(seconds)}}


DEVICE_POOL: Converter[v1alpha1.DevicePool, v1beta1.DevicePool] = Converter(
    alpha=v1alpha1.DevicePool,
    stored=v1beta1.DevicePool,
    spec_to_stored=spec_to_v1beta1,
    spec_to_alpha=spec_to_v1alpha1,
    looks_alpha=looks_v1alpha1,
    kept_fields=KEPT_FIELDS,
    renames={
        ("provider",): ("provider", "name"),
        ("providerCredentialRef",): ("provider", "account"),
        ("maxUnhealthy",): ("health", "maxUnhealthy"),
        ("proxy", "stickyTTL"): ("proxy", "sessionTTL"),
    },
    annotation_problem=_annotation_problem,
    alpha_as_it_goes=_alpha_as_it_goes,
)

to_v1beta1 = DEVICE_POOL.to_v1beta1
to_v1alpha1 = DEVICE_POOL.to_v1alpha1
convert = DEVICE_POOL.convert
stored_spec = DEVICE_POOL.stored_spec
stored_spec_json = DEVICE_POOL.stored_spec_json
