"""A lease kept: `renew` (its idle clock restarted) and the background renewals of
`PoolClient.lease` (`Keeper`), every share of the pool's `idleTimeout`, never past the
lease's end."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pydantic

from devicepool.api.names import QUERY_SPEC, UPDATE_RENEW
from devicepool.api.v1beta1 import DEFAULT_LEASES, LeaseSpec
from devicepool.client import _lease_calls
from devicepool.client._lease_calls import handle_of
from devicepool.client._lease_input import Lease, lease_id, seconds_of
from devicepool.client.errors import DevicePoolError, LeaseGone
from devicepool.workflows.reconciler.lease_messages import RenewRequest

if TYPE_CHECKING:
    from devicepool.client.pool_client import PoolClient

__all__ = ["MIN_RENEW_SECONDS", "Keeper", "renew", "renew_every", "rules_of"]

# The background renewals: this share of the shorter of `idleTimeout` and the lease's length,
# never more often than `MIN_RENEW_SECONDS`; none once less than that is left of the lease.
RENEW_SHARE = 1 / 3
MIN_RENEW_SECONDS = 1.0


def renew_every(idle_timeout: float, lease_seconds: float) -> float:
    """Seconds between background renewals: a share of the shorter of the pool's
    `idleTimeout` and the lease's own length, at least `MIN_RENEW_SECONDS`."""
    return max(MIN_RENEW_SECONDS, min(idle_timeout, lease_seconds) * RENEW_SHARE)


async def renew(
    pools: PoolClient,
    name: str,
    lease: Lease | str,
    *,
    duration: timedelta | float | str | None = None,
    kind: str | None = None,
) -> Lease:
    """The lease renewed (its idle clock restarted) for `duration` from now (None: as long
    as it was taken for), never past the pool's `maxDuration`; `LeaseGone` if not held."""
    kind = kind or (lease.kind if isinstance(lease, Lease) else None)
    some_id = lease_id(lease)
    length = None if duration is None else timedelta(seconds=seconds_of(duration, "duration"))
    handle = handle_of(pools, name, kind)
    request = RenewRequest(lease=some_id, duration=length)
    answer = await _lease_calls.update(pools, handle, name, kind, UPDATE_RENEW, request)
    if answer.granted is None:  # a handler run without its validator
        said = answer.message or f"lease {some_id} is gone ({answer.ended})"
        raise LeaseGone(f"{pools._side(kind).shown(name)}: {said}")
    return Lease.of(answer.granted, kind=pools._side(kind).kind.name)


async def rules_of(pools: PoolClient, name: str, kind: str | None) -> LeaseSpec | None:
    """The pool's `spec.leases` (the defaults when unset); None when no worker answered:
    not known (a query turned away under load is no answer about the pool's rules)."""
    handle = pools._client.get_workflow_handle(pools._side(kind).kind.workflow_id(name))
    async with _lease_calls.query_gate(pools, handle):
        answer = await pools._try_query(handle, QUERY_SPEC)
    if not isinstance(answer, dict):
        return None
    leases = (answer.get("spec") or {}).get("leases")
    if not leases:
        return DEFAULT_LEASES
    try:
        return LeaseSpec.model_validate(leases)
    except pydantic.ValidationError:
        return DEFAULT_LEASES


class Keeper:
    """Renews a held lease every `every` seconds so that its idle clock never runs out,
    each time for what is left of it: its end stays where the grant put it."""

    def __init__(self, pools: PoolClient, name: str, lease: Lease) -> None:
        self.pools, self.name, self.lease = pools, name, lease
        self.every = MIN_RENEW_SECONDS  # until the pool's idleTimeout is known (`run`)
        self.known = False
        # The pool's clock minus ours (its `expiresAt` is in its clock), learnt from answers.
        self.offset = timedelta(0)

    async def learn(self) -> None:
        """`every`, from the pool's idleTimeout: asked here, in the background, so that the
        holder has its device meanwhile. Not answered: every `MIN_RENEW_SECONDS`, and asked
        again at the next turn (a guess could be longer than the pool's idleTimeout)."""
        try:
            rules = await rules_of(self.pools, self.name, self.lease.kind)
        except DevicePoolError:
            rules = None
        self.known = rules is not None
        if rules is None:
            self.every = MIN_RENEW_SECONDS
            return
        length = (self.lease.expires_at - self.lease.granted_at).total_seconds()
        self.every = renew_every(rules.idle_timeout, length)

    def left(self) -> float:
        now = datetime.now(UTC) + self.offset
        return (self.lease.expires_at - now).total_seconds()

    async def run(self) -> None:
        await self.learn()
        while True:
            left = self.left()
            if left <= MIN_RENEW_SECONDS:
                return  # it ends soon of itself: a renew would only keep it to the same end
            await asyncio.sleep(min(self.every, left - MIN_RENEW_SECONDS))
            if not self.known:
                await self.learn()
            left = self.left()
            if left <= MIN_RENEW_SECONDS:
                return
            sent = datetime.now(UTC)
            try:
                renewed = await renew(
                    self.pools, self.name, self.lease, duration=timedelta(seconds=left)
                )
            except LeaseGone as err:
                self.lease.ended = str(err)
                return
            except DevicePoolError:
                continue  # the server or worker away: tried again at the next turn
            # It set expiresAt to its now + `left` (unless capped at maxDuration, which only
            # makes its clock seem behind, and the next renew is capped again).
            seen = sent + (datetime.now(UTC) - sent) / 2
            self.offset = renewed.expires_at - timedelta(seconds=left) - seen
