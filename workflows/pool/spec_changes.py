"""Which spec changes a running pool accepts, and what a change means for its creates.

Pure: the pool's update validators and its `scale` signal handler call these
before anything is written to history.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from devicepool.api.v1beta1 import DevicePoolSpec, check_replicas
from devicepool.api.validation_messages import format_errors
from devicepool.workflows.pool.messages import ApplyRequest, ScaleRequest

__all__ = ["body_changed", "parse_scale_signal", "refuse_apply", "short_json"]

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


def parse_scale_signal(payload: Any) -> ScaleRequest:
    """The `scale` signal's plain JSON, checked; `ValueError` with a one-line message if bad.

    Worded as a manifest's errors are (`api.validation_messages`): JSON field
    names, "did you mean" for a near miss, no pydantic phrasing.
    """
    if not isinstance(payload, dict):
        raise ValueError(
            f'must be a JSON object such as {{"replicas": 3}}, got {short_json(payload)}'
        )
    try:
        request = ScaleRequest.model_validate(payload)
    except ValidationError as err:
        lines = format_errors(err.errors(), model=ScaleRequest, prefix="", base=())
        raise ValueError("; ".join(lines)) from None
    check_replicas(request.replicas)
    return request


def short_json(payload: Any) -> str:
    """`payload` as the JSON a user sent (`{"replica": 4}`), cut to 80 characters."""
    try:
        text = json.dumps(payload, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # e.g. a circular structure: not from JSON anyway
        text = repr(payload)
    return text if len(text) <= 80 else text[:77] + "..."


def _at(fields: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        fields = fields.get(key, {})
    return fields
