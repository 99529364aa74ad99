"""What the one `PoolClient` does differently for each kind: one row a kind, beside `api.kinds`.

A row says how a pool of the kind starts, what its search attributes say when no worker answers,
how its status reads (converged, blocked, what is left) and its messages' words; everything else
is the client's, once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.common import SearchAttributePair, TypedSearchAttributes

from devicepool.api.browserpool.v1beta1 import BrowserPool
from devicepool.api.conversion import wire_spec
from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL, Kind
from devicepool.api.v1beta1 import ConditionStatus, ConditionType, DevicePool, DevicePoolStatus
from devicepool.client._results import PoolSummary
from devicepool.client.errors import BadInput
from devicepool.workflows.browserpool import publish as browser_publish
from devicepool.workflows.pool.status import wanted
from devicepool.workflows.reconciler.search_attributes import (
    KEY_ACCOUNT,
    KEY_DESIRED,
    KEY_PHASE,
    KEY_PLATFORM,
    KEY_READY,
    KEY_REGION,
    KEYS,
)

# (the workflow's input, the Web UI's summary line, its first search attributes)
Start = tuple[dict[str, Any], str, TypedSearchAttributes]


@dataclass(frozen=True)
class Side:
    kind: Kind
    # What the pool keeps, and where a teardown that ended badly may have left them.
    noun: str
    left_where: str
    start: Callable[[Any], Start]
    # The spec a listed execution's search attributes show (`stale`), or None without them.
    stale_spec: Callable[[TypedSearchAttributes], dict[str, Any] | None]
    # How many the teardown still has to remove, from the pool's status.
    left: Callable[[dict[str, Any]], int]
    # `wait_ready`: the status key of what is ready; whether the pool converged on a
    # generation (what says waiting cannot get it there: `client._waits.CANNOT_FIX`).
    ready_key: str
    converged: Callable[[dict[str, Any], int], bool]
    # `delete --wait`: whether it reads the status before its cancel, so that a block shown
    # already gets `BLOCKED_GRACE_SECONDS` to clear; whether the closed run is asked what
    # it kept at a provider with no delete (`profilesRetired`). A BrowserPool's did neither.
    blocked_grace: bool = False
    retires_profiles: bool = False
    # Whether `wait_ready` fails at once when no worker answers (`NoWorkerInTime`), as a
    # BrowserPool's did; a DevicePool's waits its timeout out for one.
    wait_needs_worker: bool = False
    # Whether `apply` is one update-with-start (else a plain start first: its update never creates).
    update_starts: bool = False
    # Whether messages name the pool bare (`pool "NAME"`): the kind a bare NAME means.
    bare: bool = False

    def named(self, name: str) -> str:
        """The pool as the CLI names it: NAME, or `browserpool/NAME`."""
        return name if self.bare else f"{self.kind.resource}/{name}"

    def shown(self, name: str) -> str:
        """The pool as a message opens with it: `pool "NAME"`, or `browserpool/NAME`."""
        return f'pool "{name}"' if self.bare else self.named(name)

    def stale(self, name: str, execution: Any) -> PoolSummary | None:
        """`get`'s pool from a listed or described execution's search attributes, marked
        stale (no worker answered); None when they say nothing."""
        attrs: TypedSearchAttributes = execution.typed_search_attributes
        spec = self.stale_spec(attrs)
        if spec is None:
            return None
        status = {
            "phase": attrs.get(KEY_PHASE),
            "desiredReplicas": attrs.get(KEY_DESIRED),
            self.ready_key: attrs.get(KEY_READY),
        }
        return PoolSummary(
            name=name,
            spec={k: v for k, v in spec.items() if v is not None},
            status={k: v for k, v in status.items() if v is not None},
            created=execution.start_time,
            stale=True,
            kind=self.kind.name,
        )


def _device_start(pool: DevicePool) -> Start:
    spec = pool.spec
    summary = (
        f"DevicePool **{pool.name}**: {spec.platform.value} {spec.os_version} in "
        f"{spec.region}, account `{spec.account}`"
        + (f", proxy `{spec.proxy.pool_ref}`" if spec.proxy else "")
    )
    # Sent in the oldest version that holds the spec (`wire_spec`); the
    # worker stores v1beta1. A dict: `PoolInput` would serialize v1beta1.
    body = {"metadata": pool.metadata.to_json_dict(), "spec": wire_spec(spec)}
    # Set at start, so that the Web UI lists the pool before its first workflow task.
    attributes = wanted(spec, DevicePoolStatus())  # nothing ready, phase Pending
    pairs = [SearchAttributePair(KEYS[name], value) for name, value in attributes.items()]
    return body, summary, TypedSearchAttributes(pairs)


def _device_stale_spec(attrs: TypedSearchAttributes) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "platform": attrs.get(KEY_PLATFORM),
        "region": attrs.get(KEY_REGION),
        "replicas": attrs.get(KEY_DESIRED),
    }
    if attrs.get(KEY_ACCOUNT) is not None:
        spec["provider"] = {"account": attrs.get(KEY_ACCOUNT)}
    return spec


def _browser_start(pool: BrowserPool) -> Start:
    body = {"metadata": pool.metadata.to_json_dict(), "spec": pool.spec.to_json_dict()}
    return (
        body,
        browser_publish.static_summary(pool.name, pool.spec),
        browser_publish.initial_search_attributes(pool.spec),
    )


def _browser_stale_spec(attrs: TypedSearchAttributes) -> dict[str, Any] | None:
    desired = attrs.get(KEY_DESIRED)
    return None if desired is None else {"replicas": desired}  # None: a build before them


# ---------------------------------------------------------------- readings of a status
# Pure readings of a pool's status JSON (camelCase): what `--wait` waits for (what makes it
# stop waiting: `client._waits.CANNOT_FIX`), and a teardown's block.

# A DevicePool's device counts, up (ready, busy) first; a status from before
# `pendingDevices` has none, so a create not landed yet counts only once it does.
DEVICE_COUNTS = (
    "readyDevices",
    "busyDevices",
    "provisioningDevices",
    "pendingDevices",
    "offlineDevices",
)


def _sum(status: dict[str, Any], keys: tuple[str, ...]) -> int:
    return sum(int(status.get(k) or 0) for k in keys)


def devices_left(status: dict[str, Any]) -> int:
    """Devices the pool still holds: its device ids, or the sum of its counts."""
    ids = status.get("deviceIds")
    return len(ids) if isinstance(ids, list) else _sum(status, DEVICE_COUNTS)


def is_converged(status: dict[str, Any], generation: int) -> bool:
    """Every desired device is up (ready or busy) and no surplus or stragglers remain."""
    desired = int(status.get("desiredReplicas") or 0)
    up, total = _sum(status, DEVICE_COUNTS[:2]), _sum(status, DEVICE_COUNTS)
    return int(status.get("observedGeneration") or 0) >= generation and up == desired == total


def condition(status: dict[str, Any], type_: ConditionType) -> dict[str, Any] | None:
    """The status's condition of this type (camelCase JSON), if it has one."""
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == type_.value:
            return cond
    return None


def teardown_blocked(status: dict[str, Any]) -> dict[str, Any] | None:
    """`TeardownBlocked=True`: the finalizer meets an error it retries until someone fixes it."""
    blocked = condition(status, ConditionType.TEARDOWN_BLOCKED)
    if blocked is not None and blocked.get("status") == ConditionStatus.TRUE.value:
        return blocked
    return None


def browser_converged(status: dict[str, Any], generation: int) -> bool:
    """The pool has seen `generation` and holds exactly its desired profiles, all ready
    (a scale-down's surplus deleted too)."""
    desired = int(status.get("desiredReplicas") or 0)
    placed = status.get("profileIds")
    held = len(placed) if isinstance(placed, list) else desired
    return (
        int(status.get("observedGeneration") or 0) >= generation
        and int(status.get("readyProfiles") or 0) == desired == held
    )


SIDES: dict[str, Side] = {
    DEVICE_POOL.name: Side(
        kind=DEVICE_POOL,
        noun="devices",
        left_where="at the provider",
        start=_device_start,
        stale_spec=_device_stale_spec,
        left=devices_left,
        ready_key="readyDevices",
        converged=is_converged,
        blocked_grace=True,
        retires_profiles=True,
        update_starts=True,
        bare=True,
    ),
    BROWSER_POOL.name: Side(
        kind=BROWSER_POOL,
        noun="profiles",
        left_where="on its nodes",
        start=_browser_start,
        stale_spec=_browser_stale_spec,
        left=lambda status: len(status.get("profileIds") or []),
        ready_key="readyProfiles",
        converged=browser_converged,
        wait_needs_worker=True,
    ),
}


def side_of(kind: str | Kind) -> Side:
    """The kind's row; `BadInput` for a name that is no manifest kind (`kind=` of a method)."""
    name = kind if isinstance(kind, str) else kind.name
    if name not in SIDES:
        raise BadInput(f"kind={name!r}: not a pool kind (a manifest kind: {', '.join(SIDES)})")
    return SIDES[name]
