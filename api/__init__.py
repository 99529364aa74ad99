"""The DevicePool resource: models, validation and the manifest loader.

`api.loader` (which needs PyYAML) is imported lazily, so workflow code that
imports the models through the sandbox does not pull a YAML parser in with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devicepool.api.v1alpha1 import (
    Condition,
    ConditionStatus,
    ConditionType,
    DevicePool,
    DevicePoolSpec,
    DevicePoolStatus,
    ObjectMeta,
    Phase,
    Platform,
    Provider,
    ProxySpec,
)

if TYPE_CHECKING:
    from devicepool.api.loader import (
        ManifestError,
        format_validation_error,
        load_manifests,
        load_manifests_text,
        parse_pool,
    )

_LOADER_NAMES = frozenset(
    {
        "ManifestError",
        "format_validation_error",
        "load_manifests",
        "load_manifests_text",
        "parse_pool",
    }
)

__all__ = [
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DevicePool",
    "DevicePoolSpec",
    "DevicePoolStatus",
    "ManifestError",
    "ObjectMeta",
    "Phase",
    "Platform",
    "Provider",
    "ProxySpec",
    "format_validation_error",
    "load_manifests",
    "load_manifests_text",
    "parse_pool",
]


def __getattr__(name: str) -> Any:
    if name in _LOADER_NAMES:
        from devicepool.api import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'api' has no attribute {name!r}")
