"""What `PoolClient` answers besides raw status JSON: `PoolSummary`, `DeleteResult`, timestamps,
and the word `apply` prints for an `Accepted`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from devicepool.api.v1alpha1 import DevicePool
from devicepool.workflows.pool.messages import Accepted


@dataclass
class PoolSummary:
    """One pool as `get` shows it: the resource shape (metadata, spec, status)."""

    name: str
    spec: dict[str, Any]
    status: dict[str, Any]
    created: datetime | None = None
    # Set when the worker did not answer and the row comes from search attributes.
    stale: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_resource(self) -> dict[str, Any]:
        metadata = {"name": self.name, **{k: v for k, v in self.metadata.items() if k != "name"}}
        if self.created is not None:
            metadata["creationTimestamp"] = iso(self.created)
        return {
            "apiVersion": DevicePool.model_fields["api_version"].default,
            "kind": DevicePool.model_fields["kind"].default,
            "metadata": metadata,
            "spec": self.spec,
            "status": self.status,
        }


@dataclass
class DeleteResult:
    name: str
    closed: bool
    execution_status: str
    devices_left: int | None


def iso(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z` (a naive datetime is taken as UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def applied_verb(accepted: Accepted) -> str:
    """`created`, `configured` or `unchanged`, as kubectl says it.

    A worker from before `Accepted.result` answers without it: then generation
    1 is the best guess for a new pool.
    """
    if accepted.result is not None:
        return accepted.result.value
    return "created" if accepted.generation == 1 else "configured"
