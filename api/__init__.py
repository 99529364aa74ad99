"""The DevicePool and BrowserPool resources: models, validation and the manifest loader.

The names here are the stored version's (`v1beta1`); `api.v1alpha1` still applies
(`api.conversion`); BrowserPool's versions live in `api.browserpool`. `api.loader` (PyYAML) is
imported lazily, so workflow code importing the models pulls no YAML parser into the sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserHealthSpec,
    BrowserPool,
    BrowserPoolSpec,
    BrowserPoolStatus,
)
from devicepool.api.v1beta1 import (
    Condition,
    ConditionStatus,
    ConditionType,
    DevicePool,
    DevicePoolSpec,
    DevicePoolStatus,
    HealthSpec,
    ObjectMeta,
    Phase,
    Platform,
    Provider,
    ProviderRef,
    ProxySpec,
    ScaleDownSpec,
)

if TYPE_CHECKING:
    from devicepool.api.loader import (
        ManifestError,
        format_validation_error,
        load_manifests,
        load_manifests_text,
        load_resources,
        load_resources_text,
        parse_pool,
        parse_resource,
    )

__all__ = [
    "BrowserConditionType",
    "BrowserHealthSpec",
    "BrowserPool",
    "BrowserPoolSpec",
    "BrowserPoolStatus",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DevicePool",
    "DevicePoolSpec",
    "DevicePoolStatus",
    "HealthSpec",
    "ManifestError",
    "ObjectMeta",
    "Phase",
    "Platform",
    "Provider",
    "ProviderRef",
    "ProxySpec",
    "ScaleDownSpec",
    "format_validation_error",
    "load_manifests",
    "load_manifests_text",
    "load_resources",
    "load_resources_text",
    "parse_pool",
    "parse_resource",
]


def __getattr__(name: str) -> Any:
    # Called only for what is not imported above: the loader's names.
    if name in __all__:
        from devicepool.api import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'api' has no attribute {name!r}")
