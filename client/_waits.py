"""What `PoolClient.delete(wait=True)` and `wait_ready` wait for (and `delete(force=True)`'s
end of the leases), polled every `POLL_SECONDS`.

A teardown until the workflow ends, a change until the pool converged on its generation;
`PoolBlocked` for what waiting cannot fix (`CANNOT_FIX`, one table for both kinds). What
converged means is `client._kind_sides`'."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import QUERY_STATUS, UPDATE_END_LEASES
from devicepool.client import _pool_reads
from devicepool.client._kind_sides import Side, teardown_blocked
from devicepool.client._results import DeleteResult
from devicepool.client._temporal_errors import QUERY_TIMEOUT
from devicepool.client.errors import DevicePoolError, PoolBlocked, WaitTimeout
from devicepool.workflows.browserpool.status import LOCAL_API_REFUSED

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

POLL_SECONDS = 1.0

# A `CANNOT_FIX` row with `after_grace` (an account's spendCap) stops a wait only once it held
# this long: the cap is shared, so a device of another pool leaving makes room, and the
# ledger holds every request until its first count is in (it counts again within 60 s).
HOLD_GRACE_SECONDS = 75.0

Progress = Callable[[dict[str, Any]], None] | None


def _always(status: dict[str, Any], cond: dict[str, Any]) -> bool:
    return True


def _short_of_size(status: dict[str, Any], cond: dict[str, Any]) -> bool:
    """The pool still needs creates: fewer ready or booting than desired. A reference the
    worker cannot serve holds only creates; a pool at or above its size (a scale-down of a
    pool whose proxy pool the worker config since lost) gets there without one. Counts not
    given (another build's status) are taken as short."""
    desired = status.get("desiredReplicas")
    ready = status.get("readyDevices", status.get("readyProfiles"))
    booting = status.get("provisioningDevices") or 0
    if not isinstance(desired, int) or not isinstance(ready, int) or not isinstance(booting, int):
        return True
    return ready + booting < desired


_ALLOWS = re.compile(r"\ballows (\d+) device")


def _cap_below_size(status: dict[str, Any], cond: dict[str, Any]) -> bool:
    """The pool's own spendCap allows fewer devices than desired: no wait ends that. A cap
    that allows the size holds creates only while devices on their way out (failed,
    terminating) still bill; they go, the creates follow. A message without the figure
    (another build's words) is taken for the passing kind."""
    allowed = _ALLOWS.search(str(cond.get("message") or ""))
    desired = status.get("desiredReplicas")
    return allowed is not None and isinstance(desired, int) and int(allowed[1]) < desired


@dataclass(frozen=True)
class CannotFix:
    """A condition that waiting cannot fix: its type, the status it holds with, its reasons.
    `named` is what the stop line names (the reason when empty), `then` what it adds (what
    to do), `then_created` what it adds instead for a pool the change waited for created
    (generation 1: it never had another spec; `{pool}` is its name), `after_grace` whether
    the wait must have seen it hold `HOLD_GRACE_SECONDS` before it stops, and `holds`
    whether this sighting is one that lasts."""

    type: str
    status: str
    reasons: frozenset[str]
    named: str = ""
    then: str = ""
    then_created: str = ""
    after_grace: bool = False
    holds: Callable[[dict[str, Any], dict[str, Any]], bool] = _always


# Conditions waiting cannot fix, for every kind: a pass over the generation waited for that
# reports one ends the wait (exit 1) with one line naming it. Only what a person must change
# (the manifest, the worker config, a node worker); never a transient (a rate limit, a
# provider's 5xx, a cap full of devices on their way out), which the progress line names.
CANNOT_FIX = (
    # The worker's config does not serve the manifest (its message ends "provisioning
    # stopped"). `apply` asks the worker first (`_refs_check.RefsCheck`); where it could not, the
    # pool it created holds nothing, and the line says how to remove it.
    CannotFix(
        "Ready",
        "False",
        frozenset(
            {
                "UnknownProxyPool",
                "UnknownAccount",
                "UnknownRegion",
                "UnsupportedPlatform",
                "ProxyIncomplete",
            }
        ),
        then_created="; fix the manifest or the worker config and apply again, or remove the "
        "pool: devicepool delete {pool}",
        holds=_short_of_size,
    ),
    # A node refuses the key (a BrowserPool's).
    CannotFix("Ready", "False", frozenset({LOCAL_API_REFUSED})),
    CannotFix(
        "SpendCapReached",
        "True",
        frozenset({"CapReached"}),
        named="SpendCapReached",
        then="; or lower spec.replicas to what it allows — the pool keeps running below its "
        "size meanwhile",
        holds=_cap_below_size,
    ),
    CannotFix(
        "SpendCapReached",
        "True",
        frozenset({"AccountCapReached"}),
        named="SpendCapReached",
        then="; or make room in the account's other pools — the pool grows once there is room",
        after_grace=True,
    ),
    CannotFix(
        "NodesAvailable",
        "False",
        frozenset({"NoLiveNode"}),
        then=" — start a node worker with those labels, or change spec.nodeSelector; the "
        "pool makes its profiles once one beats",
    ),
)


def cannot_fix(status: dict[str, Any], generation: int) -> tuple[CannotFix, dict[str, Any]] | None:
    """The first `CANNOT_FIX` row the status shows, with its condition, as seen by a pass over
    `generation` or later (an older pass's verdict does not count: the change waited for may
    be the fix)."""
    if int(status.get("observedGeneration") or 0) < generation:
        return None
    for row in CANNOT_FIX:
        for cond in status.get("conditions") or ():
            if (
                isinstance(cond, dict)
                and cond.get("type") == row.type
                and cond.get("status") == row.status
                and cond.get("reason") in row.reasons
                and row.holds(status, cond)
            ):
                return row, cond
    return None


# What holds a pool back, by condition: (type, the status it holds with) -> the reasons that
# say nothing more than "not there yet" (not shown).
_HOLDING = {
    ("Ready", "False"): frozenset({"BelowDesired", "NoNodes", "Deleted", "Deleting"}),
    ("ProviderAvailable", "False"): frozenset(),
    ("SpendCapReached", "True"): frozenset(),
    ("NodesAvailable", "False"): frozenset(),
    ("RemediationPaused", "True"): frozenset(),
    ("QuotaExhausted", "True"): frozenset(),
}


def waiting_on(status: dict[str, Any]) -> list[str]:
    """The conditions that hold the pool back, as the progress line names them: a spend cap
    (`SpendCapReached`), the provider (`ProviderRateLimited`, ...), a provider's used-up quota
    (`DailyCreateQuota`, ...), its nodes (`NoLiveNode`), remediation paused, or a `Ready=False`
    reason other than "not there yet"; each once."""
    named: list[str] = []
    for cond in status.get("conditions") or ():
        if not isinstance(cond, dict):
            continue
        quiet = _HOLDING.get((str(cond.get("type")), str(cond.get("status"))))
        reason = str(cond.get("reason") or "")
        if quiet is None or not reason or reason in quiet:
            continue
        name = "SpendCapReached" if cond.get("type") == "SpendCapReached" else reason
        if name not in named:
            named.append(name)
    return named


class _Stops:
    """Which `CANNOT_FIX` row a wait has seen hold, since when (monotonic): one `after_grace`
    stops the wait once it held `HOLD_GRACE_SECONDS` without a break."""

    def __init__(self) -> None:
        self._since: dict[CannotFix, float] = {}

    def check(self, side: Side, name: str, status: dict[str, Any], generation: int) -> None:
        found = cannot_fix(status, generation)
        if found is None:
            self._since.clear()
            return
        row, cond = found
        now = time.monotonic()
        self._since = {row: self._since.get(row, now)}
        if row.after_grace and now - self._since[row] < HOLD_GRACE_SECONDS:
            return
        then = row.then_created if generation == 1 and row.then_created else row.then
        raise PoolBlocked(
            side.named(name),
            "cannot become ready",
            row.named or str(cond.get("reason")),
            str(cond.get("message") or ""),
            then.format(pool=side.named(name)),
        )


async def until_deleted(
    pools: PoolClient,
    side: Side,
    handle: WorkflowHandle[Any, Any],
    name: str,
    *,
    timeout: float,
    grace_until: float,
    on_progress: Progress,
) -> DeleteResult:
    """Until the cancelled pool's workflow has ended (`WaitTimeout` past `timeout`)."""
    deadline = time.monotonic() + timeout
    left: int | None = None
    while True:
        with pools._errors(name, kind=side.kind.name):
            desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            status_name = desc.status.name if desc.status else "UNKNOWN"
            if desc.status not in (
                WorkflowExecutionStatus.CANCELED,
                WorkflowExecutionStatus.COMPLETED,
            ):
                raise DevicePoolError(
                    f"{side.shown(name)} ended {status_name} before confirming its teardown; "
                    f"{side.noun} may be left {side.left_where}"
                )
            return DeleteResult(
                name,
                closed=True,
                execution_status=status_name,
                devices_left=0,
                profiles_retired=(
                    await _pool_reads.retired_profiles(pools, handle, desc.status)
                    if side.retires_profiles
                    else None
                ),
            )
        status = await pools._try_query(handle, QUERY_STATUS)
        if isinstance(status, dict):
            left = side.left(status)
            if on_progress is not None:
                on_progress(status)
            blocked = teardown_blocked(status)
            if blocked is not None and time.monotonic() >= grace_until:
                raise PoolBlocked(
                    side.named(name),
                    "cannot finish deleting",
                    str(blocked.get("reason") or "TeardownBlocked"),
                    str(blocked.get("message") or ""),
                    "; it keeps retrying until the cause is fixed "
                    f"(devicepool describe {side.named(name)})",
                )
        if time.monotonic() >= deadline:
            shown = "unknown" if left is None else str(left)
            raise WaitTimeout(
                f"{side.shown(name)} still deleting after {timeout:g}s ({shown} {side.noun} left)"
            )
        await asyncio.sleep(POLL_SECONDS)


async def until_ready(
    pools: PoolClient,
    side: Side,
    handle: WorkflowHandle[Any, Any],
    name: str,
    *,
    generation: int,
    timeout: float,
    on_progress: Progress,
) -> dict[str, Any]:
    """Until the pool's status says it converged on `generation`; that status.

    A BrowserPool's fails at once when no worker answers (`Side.wait_needs_worker`).
    `PoolNotFound` once the pool no longer runs: a pool deleted during the wait ends
    with a status that has nothing desired, which must not read as converged (and a
    query of a closed run is a replay of its whole history).
    """
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    stops = _Stops()
    while True:
        await pools._describe_running(name, handle, side.kind.name)
        if side.wait_needs_worker:
            with pools._errors(name, kind=side.kind.name):
                answer = await handle.query(QUERY_STATUS, rpc_timeout=QUERY_TIMEOUT)
        else:
            answer = await pools._try_query(handle, QUERY_STATUS)
        if isinstance(answer, dict):
            status = answer
            if on_progress is not None:
                if status.get("pendingDevices"):
                    # Creates not landed yet: say whether they wait for the account's window.
                    window = await _pool_reads.account_window(pools, handle)
                    status = {**status, "accountWindow": window}
                on_progress(status)
            if side.converged(status, generation):
                return status
            stops.check(side, name, status, generation)
        if time.monotonic() >= deadline:
            held = waiting_on(status)
            raise WaitTimeout(
                f"{side.shown(name)} not ready after {timeout:g}s "
                f"({status.get(side.ready_key, 0)}/{status.get('desiredReplicas', '?')} ready, "
                f"phase {status.get('phase', 'unknown')}"
                + (f"; waiting: {', '.join(held)}" if held else "")
                + ")"
            )
        await asyncio.sleep(POLL_SECONDS)


async def leases_ended(handle: WorkflowHandle[Any, Any], *, within: float = 10.0) -> None:
    """`delete --force`: end the leases of a pool just cancelled. Its validator refuses until
    the pool has taken the cancel (a task later): asked again for `within` seconds, each ask
    bounded (no worker: no answer); a pool already gone has none to end. `DevicePoolError`
    if it never took it: the deletion goes on, its leases then end at the grace."""
    deadline = time.monotonic() + within
    said = "no worker took it"
    while time.monotonic() < deadline:
        left = max(0.5, deadline - time.monotonic())
        try:
            await handle.execute_update(
                UPDATE_END_LEASES, result_type=str, rpc_timeout=timedelta(seconds=left)
            )
            return
        except WorkflowUpdateFailedError as err:
            said = str(err.cause or err).splitlines()[0]
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            said = "no worker took it"
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return  # ended already: nothing is held
            said = err.message
        await asyncio.sleep(0.2)
    raise DevicePoolError(
        f"the pool is being deleted, but its leases were not ended ({said}); they end within"
        " 5 minutes, then the teardown goes on"
    )
