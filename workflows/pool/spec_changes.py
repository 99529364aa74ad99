"""Which spec changes a running pool accepts, and what a change means for its creates.

Pure: the pool's update validators and its `scale` signal handler call these
before anything is written to history.
"""

from __future__ import annotations

from typing import Any

from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.messages import ApplyRequest

__all__ = ["body_changed", "refuse_apply"]

# Fields a running pool cannot change (their JSON paths): its devices were rented under them.
IMMUTABLE_FIELDS = ("provider.name", "provider.account", "platform", "region")
# Mutable spec fields that go into a create's body (with the immutable ones).
CREATE_BODY_FIELDS = ("os_version", "proxy")


def refuse_apply(name: str, spec: DevicePoolSpec, request: ApplyRequest) -> None:
    """Raise `ValueError` naming the field if `request` cannot replace `spec` on pool `name`."""
    if request.metadata.name != name:
        raise ValueError(f"metadata.name: this pool is {name!r}, got {request.metadata.name!r}")
    old_fields, new_fields = spec.to_json_dict(), request.spec.to_json_dict()
    for path in IMMUTABLE_FIELDS:
        old, new = _at(old_fields, path), _at(new_fields, path)
        if old != new:
            raise ValueError(
                f"spec.{path}: cannot change from {old!r} to {new!r} on a "
                "running pool; delete it and apply again"
            )


def body_changed(old: DevicePoolSpec, new: DevicePoolSpec) -> bool:
    """Whether creates under `new` send another body (old idempotency keys would be a 422)."""
    return any(getattr(new, field) != getattr(old, field) for field in CREATE_BODY_FIELDS)


def _at(fields: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        fields = fields.get(key, {})
    return fields
