"""What `PoolClient` answers besides raw status JSON: `PoolSummary`, `DeleteResult`, timestamps
(`iso` writes them, `parse_time` reads them), and the word `apply` prints for an `Accepted`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from devicepool.api.kinds import kind_named
from devicepool.api.names import API_VERSION_STORED, KIND_DEVICE_POOL
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
    # The pool's kind (`api.kinds`): a DevicePool unless said.
    kind: str = KIND_DEVICE_POOL
    # Read from the row in its memo (`get`'s table), not asked: a status of the table's
    # fields only, without `deviceIds`, `lastReconciled`, `costToDate`.
    from_row: bool = False

    def to_resource(self, api_version: str = API_VERSION_STORED) -> dict[str, Any]:
        """The pool as `get -o json|yaml` prints it, in `api_version` (default: the stored one)."""
        metadata = {"name": self.name, **{k: v for k, v in self.metadata.items() if k != "name"}}
        resource = kind_named(self.kind).conversion.resource_json_in(
            {"metadata": metadata, "spec": self.spec}, api_version=api_version
        )
        if self.created is not None:
            resource["metadata"]["creationTimestamp"] = iso(self.created)
        return {**resource, "status": self.status}


@dataclass
class DeleteResult:
    name: str
    closed: bool
    execution_status: str
    devices_left: int | None
    # Cloud-phone profiles the teardown kept, marked retired (the Local API has no
    # delete), read from the closed pool; None when it could not be asked.
    profiles_retired: int | None = None


def iso(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z` (a naive datetime is taken as UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(value: Any) -> datetime | None:
    """A datetime or RFC 3339 text, in UTC when it names no zone; None for anything else."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def applied_verb(accepted: Accepted) -> str:
    """`created`, `configured` or `unchanged`, as kubectl says it.

    A worker from before `Accepted.result` answers without it: then generation
    1 is the best guess for a new pool.
    """
    if accepted.result is not None:
        return accepted.result.value
    return "created" if accepted.generation == 1 else "configured"
