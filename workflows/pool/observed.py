"""What one DevicePool pass knows (`Observed`, frozen: cluster-api's scope), and
`decision_for`, which builds `decide`'s arguments from it and the carried state. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.api import names
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.workflows.pool.decide import Decision, decide
from devicepool.workflows.pool.lifecycle import Lifecycle
from devicepool.workflows.pool.slots import observed_slots
from devicepool.workflows.pool.state import PoolState

__all__ = ["Observed", "decision_for"]


@dataclass(frozen=True)
class Observed:
    """One pass's view of the world: what it decides on."""

    # The devices the pool goes by (its last listing, less those reported gone).
    devices: Sequence[DeviceInfo]
    # Reported terminated by the health check and still listed: not members, but billing.
    reported_leaving: Sequence[DeviceInfo]
    settings: PoolSettings
    # What one device costs an hour (the account's `pricePerHour`).
    price: float
    now: datetime
    # The listing's error (None: it worked): never create or terminate on a guess.
    observe_problem: str | None = None
    # References the worker does not know (None: not checked yet), or not checked at
    # all (a node worker took no call): no create until they are known.
    refs_problems: Sequence[str] | None = None
    refs_unchecked: bool = False


def decision_for(
    seen: Observed,
    *,
    pool: str,
    spec: DevicePoolSpec,
    state: PoolState,
    incarnation: str,
    act: bool,
) -> Decision:
    """This pass's decision (`act` False: only the plan, as the status shows it)."""
    now, devices = seen.now, list(seen.devices)
    life = Lifecycle(spec, state, devices, now)
    return decide(
        pool=pool,
        replicas=spec.replicas,
        generation=state.generation,
        devices=[*devices, *seen.reported_leaving],
        doomed=state.doomed,
        slots=state.slots,
        observed_slots=observed_slots((d.labels for d in devices), names.LABEL_SLOT, incarnation),
        replacements_owed=state.replacements_owed,
        settings=seen.settings,
        now=now,
        allow_create=not seen.refs_problems
        and not seen.refs_unchecked
        and not state.backoff.active(now),
        act=act and seen.observe_problem is None,
        cap=spec.spend_cap.devices_allowed(seen.price) if spec.spend_cap else None,
        retire=life.retire(),
        protected=life.protected(),
        rolling=state.rollout.rolling,
        unavailable=life.limits()[1],
        scale_down_limit=life.scale_down_limit(),
        surge=life.surge(),
        reasons=life.reasons(),
        left=life.left(),
    )
