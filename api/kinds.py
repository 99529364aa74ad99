"""The kind registry: everything that tells one pool kind from another, in one table.

A kind is its manifest `kind`, its CLI word, its models per version and conversion rules, its
workflow type and id prefix, and its `get` columns. Code that would ask "a DevicePool or a
BrowserPool?" asks this table instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devicepool.api.browserpool.conversion import BROWSER_POOL as BROWSER_POOL_CONVERSION
from devicepool.api.conversion import DEVICE_POOL as DEVICE_POOL_CONVERSION
from devicepool.api.converter import Converter
from devicepool.api.names import (
    API_VERSION_V1ALPHA1,
    API_VERSION_V1BETA1,
    BROWSER_POOL_WORKFLOW_ID_PREFIX,
    KIND_BROWSER_POOL,
    KIND_DEVICE_POOL,
    WORKFLOW_BROWSER_POOL,
    WORKFLOW_DEVICE_POOL,
    WORKFLOW_ID_PREFIX,
    after,
)
from devicepool.api.v1alpha1 import PoolResource

__all__ = ["BROWSER_POOL", "DEVICE_POOL", "KINDS", "Kind", "kind_named", "resource_named"]


@dataclass(frozen=True)
class Kind:
    name: str  # the manifest's `kind`
    # How the CLI names it, as kubectl does: `browserpool/NAME`, `get browserpools`.
    resource: str
    conversion: Converter[Any, Any]
    workflow_type: str
    workflow_id_prefix: str
    # `get`'s table of this kind (NAME first).
    columns: tuple[str, ...]

    @property
    def models(self) -> dict[str, type[PoolResource]]:
        """Its model in each API version."""
        return {
            API_VERSION_V1ALPHA1: self.conversion.alpha,
            API_VERSION_V1BETA1: self.conversion.stored,
        }

    @property
    def stored(self) -> type[PoolResource]:
        return self.conversion.stored

    def workflow_id(self, name: str) -> str:
        return f"{self.workflow_id_prefix}{name}"

    def name_from_workflow_id(self, workflow_id: str) -> str | None:
        return after(self.workflow_id_prefix, workflow_id)


DEVICE_POOL = Kind(
    name=KIND_DEVICE_POOL,
    resource="devicepool",
    conversion=DEVICE_POOL_CONVERSION,
    workflow_type=WORKFLOW_DEVICE_POOL,
    workflow_id_prefix=WORKFLOW_ID_PREFIX,
    columns=tuple(
        "NAME PLATFORM REGION DESIRED READY LEASED PROV PENDING OFFLINE $/H AGE PHASE".split()
    ),
)
BROWSER_POOL = Kind(
    name=KIND_BROWSER_POOL,
    resource="browserpool",
    conversion=BROWSER_POOL_CONVERSION,
    workflow_type=WORKFLOW_BROWSER_POOL,
    workflow_id_prefix=BROWSER_POOL_WORKFLOW_ID_PREFIX,
    columns=tuple("NAME DESIRED READY LEASED OPEN LOST NODES AGE PHASE".split()),
)

# By manifest kind, in the order `get` shows them (DevicePools first).
KINDS: dict[str, Kind] = {kind.name: kind for kind in (DEVICE_POOL, BROWSER_POOL)}


def kind_named(name: str) -> Kind:
    """The kind of manifest `kind` `name` (KeyError if none)."""
    return KINDS[name]


def resource_named(word: str) -> Kind | None:
    """The kind the CLI word `word` names (`devicepool`, `browserpools`, any case), or None."""
    word = word.lower()
    for kind in KINDS.values():
        if word in (kind.resource, f"{kind.resource}s"):
            return kind
    return None
