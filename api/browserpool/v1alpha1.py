"""BrowserPool `mobile.example.com/v1alpha1`: BitBrowser profiles kept on tagged node workers.

The manifest: docs/browserpools.md, 'The manifest'. The status and the pieces both versions
share (fingerprint, selector) are defined here; `api.browserpool.v1beta1` imports them.
Unknown fields are rejected, as in DevicePool."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, JsonValue, StrictBool

from devicepool.api.base import CamelModel
from devicepool.api.labels import LabelKey, LabelValue
from devicepool.api.names import API_VERSION_V1ALPHA1, KIND_BROWSER_POOL
from devicepool.api.problems import loc_path, show_value
from devicepool.api.v1alpha1 import (
    MAX_REPLICAS,
    Condition,
    Count,
    NonEmpty,
    ObjectMeta,
    Phase,
    PoolResource,
    ProxySpec,
)

__all__ = [
    "MAX_FINGERPRINT_VALUES",
    "MAX_REPLICAS",
    "SECRET_FINGERPRINT_KEYS",
    "BrowserConditionType",
    "BrowserPool",
    "BrowserPoolSpec",
    "BrowserPoolStatus",
    "Fingerprint",
    "GroupId",
    "NodeSelector",
    "ProxySpec",
]

# A profile's secrets (the Local API's own field names): a pool's spec is in
# Temporal history, readable by everyone with UI access, so none may be written
# in it, not even by mistake inside the fingerprint. Proxy credentials come from
# `proxy.poolRef`, resolved worker-side.
SECRET_FINGERPRINT_KEYS = frozenset(
    {"password", "cookie", "proxyPassword", "proxyUserName", "faSecretKey"}
)


# A real fingerprint is a few dozen fields. The bound also keeps YAML aliases
# (`&b [*a, *a, ...]`, each level nine times the last) from unfolding into
# billions of values before anything is checked.
MAX_FINGERPRINT_VALUES = 1000

_Path = tuple[int | str, ...]
_JSON_TYPES = (str, int, float, type(None), list, tuple, Mapping)


def _walk(value: Any) -> Iterator[tuple[_Path, Any]]:
    """Every value in `value` with its path, in document order (the root first, path ()).

    ValueError past `MAX_FINGERPRINT_VALUES` values below the root.
    """
    stack: list[tuple[_Path, Any]] = [((), value)]
    seen = 0
    while stack:
        path, item = stack.pop()
        seen += 1 if path else 0
        if seen > MAX_FINGERPRINT_VALUES:
            raise ValueError(
                f"must hold at most {MAX_FINGERPRINT_VALUES} values"
                " (fields and list items, at every depth), has more"
            )
        yield path, item
        if isinstance(item, Mapping):
            stack.extend(reversed([((*path, key), child) for key, child in item.items()]))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([((*path, i), child) for i, child in enumerate(item)]))


def _json_mapping(value: Any) -> Any:
    # What JSON cannot carry, said in YAML's terms: `.nan` and `.inf` (which
    # `dict[str, JsonValue]` would let through, and Temporal's JSON payloads
    # would hold as `NaN`), an unquoted date, a `!!set` or `!!binary`.
    if not isinstance(value, Mapping):
        return value  # "must be a mapping" is said by the type
    for path, item in _walk(value):
        where = loc_path(path)
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where}: must be a finite number, got {show_value(item)}")
        if isinstance(item, date):
            raise ValueError(
                f"{where}: must be a string, got the date {item.isoformat()}"
                " (quote it: YAML reads an unquoted date as a date)"
            )
        if not isinstance(item, _JSON_TYPES):
            raise ValueError(
                f"{where}: must be a string, number, true/false, null, list or mapping,"
                f" got {show_value(item)}"
            )
    return value


def _no_secrets(value: dict[str, Any]) -> dict[str, Any]:
    for path, _ in _walk(value):
        if path and path[-1] in SECRET_FINGERPRINT_KEYS:
            raise ValueError(
                f"{loc_path(path)}: a profile secret is no fingerprint field"
                " (a pool's spec is in Temporal history; proxies come from proxy.poolRef)"
            )
    return value


def _group_id(value: Any) -> Any:
    # BitBrowser group ids are strings (32 hex digits). YAML reads an all-digit
    # one as a number, and `0123` as the octal 83: refuse rather than guess.
    if isinstance(value, int | float):
        got = show_value(value) if isinstance(value, bool) else f"the number {show_value(value)}"
        raise ValueError(
            f'must be a string, got {got} (quote it: groupId: "...", an id from'
            " BitBrowser's /group/list)"
        )
    return value


# The JSON object passed to BitBrowser as `browserFingerPrint`, as written (its
# keys are the vendor's, not checked here: `{}` asks for a random fingerprint).
Fingerprint = Annotated[
    dict[str, JsonValue], BeforeValidator(_json_mapping), AfterValidator(_no_secrets)
]
# Labels a node worker must have (all of them) to hold the pool's profiles.
NodeSelector = dict[LabelKey, LabelValue]
GroupId = Annotated[NonEmpty, BeforeValidator(_group_id)]


class BrowserPoolSpec(CamelModel):
    replicas: Count = Field(ge=0, le=MAX_REPLICAS)
    node_selector: NodeSelector = Field(default_factory=dict)
    fingerprint: Fingerprint = Field(default_factory=dict)
    # The DevicePool's: a proxy pool of the worker's config; `stickyTTL` seconds per exit IP.
    proxy: ProxySpec | None = None
    # The BitBrowser group the profiles are created in; unset: none is given.
    group_id: GroupId | None = None
    # Keep every profile's browser open (re-opened when it dies); false: profiles only.
    open: StrictBool = True


class BrowserConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    # Live node workers match the selector (False: none does, or they are lost; the
    # reason names them).
    NODES_AVAILABLE = "NodesAvailable"
    # Too many profiles failing at once (`health.maxUnhealthy`): none is deleted.
    REMEDIATION_PAUSED = "RemediationPaused"
    SPEC_REJECTED = "SpecRejected"
    # Teardown cannot finish (a node down holds the pool in Deleting; the message names it).
    TEARDOWN_BLOCKED = "TeardownBlocked"
    # A pool that sizes itself (`spec.autoscale`): why the size is what it is.
    AUTOSCALING = "Autoscaling"


class BrowserPoolStatus(CamelModel):
    """What a BrowserPool reports (the same in both versions)."""

    phase: Phase = Phase.PENDING
    desired_replicas: int = 0
    # Profiles that exist, marked as the pool's, on a live node; with `open`, also open.
    ready_profiles: int = 0
    # Profiles whose browser is open (alive at its node's Local API).
    open_profiles: int = 0
    # Profiles placed on a node silent past `nodeLostAfterSeconds`: counted lost, replaced elsewhere.
    lost_profiles: int = 0
    # Profiles placed on each node (`{"node-1": 3, "node-2": 3}`).
    by_node: dict[str, int] = Field(default_factory=dict)
    profile_ids: list[str] = Field(default_factory=list)
    last_reconciled: datetime | None = None
    observed_generation: int = 0
    # Leases (docs/leases.md): members held by one, tickets waiting, the oldest's wait.
    leased_devices: int = 0
    leases_queued: int = 0
    oldest_queued_seconds: float | None = None
    # Leases ended by no holder's word (expired, idle, unclaimed, member lost), ever.
    leases_expired: int = 0
    # The limits the pool runs by: `health.failureStreakLimit` (the spec's, else the
    # worker's) and the worker's `nodeLostAfterSeconds` (what `describe` shows). None from a
    # worker before them.
    failure_streak_limit: int | None = None
    node_lost_after_seconds: float | None = None
    # A pool that sizes itself (`spec.autoscale`): the size its demand asks for, and the
    # schedule window in force. None otherwise.
    desired_from_demand: int | None = None
    active_schedule: str | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class BrowserPool(PoolResource):
    """The version DESIGN.md writes. Pools are stored as v1beta1; this one applies, converted."""

    api_version: Literal["mobile.example.com/v1alpha1"] = API_VERSION_V1ALPHA1  # type: ignore[assignment]
    kind: Literal["BrowserPool"] = KIND_BROWSER_POOL  # type: ignore[assignment]
    metadata: ObjectMeta
    spec: BrowserPoolSpec
    status: BrowserPoolStatus | None = None
