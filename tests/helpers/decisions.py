"""A DevicePool pass's decision for pure tests: `decide` for pool `p` with what a plain pass
passes (a fresh slot book, no slot seen, nothing owed, creates allowed, acting), so a case
names only what it varies."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from devicepool.activities.models import DeviceInfo, PoolSettings
from devicepool.workflows.pool.decide import Decision, decide
from devicepool.workflows.pool.slots import SlotBook


def decide_pass(
    devices: list[DeviceInfo],
    *,
    settings: PoolSettings,
    now: datetime,
    replicas: int = 3,
    generation: int = 1,
    doomed: Collection[str] = (),
    slots: SlotBook | None = None,
    replacements_owed: int = 0,
    act: bool = True,
    **more: Any,
) -> Decision:
    """`decide` of one pass over `devices`; `more`: decide's other keywords (`cap`, `retire`,
    `rolling`, `surge`, ...)."""
    return decide(
        pool="p",
        replicas=replicas,
        generation=generation,
        devices=devices,
        doomed=doomed,
        slots=SlotBook() if slots is None else slots,
        observed_slots=set(),
        replacements_owed=replacements_owed,
        settings=settings,
        now=now,
        allow_create=True,
        act=act,
        **more,
    )
