"""What the one `PoolClient` does differently for each kind: one row a kind, beside `api.kinds`.

A row says how a pool of the kind starts (its first input, the Web UI's summary
line, its first search attributes), what its search attributes say when no
worker answers, and the words its messages use. Everything else (updates,
queries, listing, the teardown wait, Temporal's errors) is the client's, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.common import TypedSearchAttributes

from devicepool.api.browserpool.v1beta1 import BrowserPool
from devicepool.api.conversion import wire_spec
from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL, Kind
from devicepool.api.v1beta1 import ConditionType, DevicePool
from devicepool.client._results import PoolSummary
from devicepool.client._search_attributes import initial_search_attributes, stale_summary
from devicepool.client._status import condition, configuration_problem, devices_left, is_converged
from devicepool.client.errors import BadInput
from devicepool.workflows.browserpool import publish as browser_publish
from devicepool.workflows.browserpool.status import LOCAL_API_REFUSED
from devicepool.workflows.reconciler.search_attributes import KEY_DESIRED, KEY_PHASE, KEY_READY

__all__ = ["SIDES", "Side", "browser_converged", "refused_key", "side_of"]

# (the workflow's input, the Web UI's summary line, its first search attributes)
Start = tuple[dict[str, Any], str, TypedSearchAttributes]


@dataclass(frozen=True)
class Side:
    kind: Kind
    # What the pool keeps, and where a teardown that ended badly may have left them.
    noun: str
    left_where: str
    start: Callable[[Any], Start]
    # A listed execution's search attributes as a summary (`stale`), or None without them.
    stale: Callable[[str, Any], PoolSummary | None]
    # How many the teardown still has to remove, from the pool's status.
    left: Callable[[dict[str, Any]], int]
    # `wait_ready`: the status key of what is ready; whether the pool converged on a
    # generation; the condition that says waiting cannot get it there, if any.
    ready_key: str
    converged: Callable[[dict[str, Any], int], bool]
    blocked: Callable[[dict[str, Any], int], dict[str, Any] | None]
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
    return body, summary, initial_search_attributes(spec)


def _browser_start(pool: BrowserPool) -> Start:
    body = {"metadata": pool.metadata.to_json_dict(), "spec": pool.spec.to_json_dict()}
    return (
        body,
        browser_publish.static_summary(pool.name, pool.spec),
        browser_publish.initial_search_attributes(pool.spec),
    )


def _browser_stale(name: str, execution: Any) -> PoolSummary | None:
    attrs = execution.typed_search_attributes
    desired = attrs.get(KEY_DESIRED)
    if desired is None:  # a pool started by a build before them
        return None
    status = {
        "phase": attrs.get(KEY_PHASE),
        "desiredReplicas": desired,
        "readyProfiles": attrs.get(KEY_READY),
    }
    return PoolSummary(
        name=name,
        spec={"replicas": desired},
        status={k: v for k, v in status.items() if v is not None},
        created=execution.start_time,
        stale=True,
        kind=BROWSER_POOL.name,
    )


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


def refused_key(status: dict[str, Any], generation: int) -> dict[str, Any] | None:
    """`Ready=False LocalApiRefused` from a pass over `generation` or later: a node's Local
    API refuses its key, which waiting does not fix (the message names the node)."""
    if int(status.get("observedGeneration") or 0) < generation:
        return None
    ready = condition(status, ConditionType.READY)
    if ready and ready.get("status") == "False" and ready.get("reason") == LOCAL_API_REFUSED:
        return ready
    return None


def _browser_blocked(status: dict[str, Any], generation: int) -> dict[str, Any] | None:
    return configuration_problem(status, generation) or refused_key(status, generation)


SIDES: dict[str, Side] = {
    DEVICE_POOL.name: Side(
        kind=DEVICE_POOL,
        noun="devices",
        left_where="at the provider",
        start=_device_start,
        stale=stale_summary,
        left=devices_left,
        ready_key="readyDevices",
        converged=is_converged,
        blocked=configuration_problem,
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
        stale=_browser_stale,
        left=lambda status: len(status.get("profileIds") or []),
        ready_key="readyProfiles",
        converged=browser_converged,
        blocked=_browser_blocked,
        wait_needs_worker=True,
    ),
}


def side_of(kind: str | Kind) -> Side:
    """The kind's row; `BadInput` for a name that is no manifest kind (`kind=` of a method)."""
    name = kind if isinstance(kind, str) else kind.name
    if name not in SIDES:
        raise BadInput(f"kind={name!r}: not a pool kind (a manifest kind: {', '.join(SIDES)})")
    return SIDES[name]
