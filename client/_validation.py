"""Local checks of a pool name and a replica count, made before any call to Temporal.

A value refused here is `BadInput` (exit 2), nothing contacted; the range itself is
`api.v1beta1.check_replicas`'s."""

from __future__ import annotations

import pydantic

from devicepool.api.problems import show_value
from devicepool.api.v1beta1 import MAX_REPLICAS, ObjectMeta, check_replicas
from devicepool.client.errors import BadInput


def validate_name(name: str) -> str:
    """A pool name is a DNS-1123 label; anything else is `BadInput` (exit 2)."""
    try:
        ObjectMeta.model_validate({"name": name})
    except pydantic.ValidationError as err:
        reason = err.errors()[0]["msg"].removeprefix("Value error, ")
        raise BadInput(f"invalid pool name {show_value(name)}: {reason}") from None
    return name


def validate_replicas(replicas: int) -> int:
    """`check_replicas`, in the one-line wording the CLI has always printed."""
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise BadInput(f"replicas: must be an integer, got {replicas!r}")
    try:
        return check_replicas(replicas)
    except ValueError:
        raise BadInput(f"replicas: must be between 0 and {MAX_REPLICAS}, got {replicas}") from None
