"""What the pool has decided or learned about single devices: one map, device id → fate.

A device in the map is on its way out or already gone, and the pool remembers why until
the news about it has been read (each fate: docs/architecture.md, 'How a DevicePool
converges'). Setting a fate replaces the device's previous one and makes it the newest;
a fate with a limit keeps only its newest `LIMITS[fate]` devices. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import Field, RootModel

__all__ = ["LEFT", "LIMITS", "Fate", "Fates"]


class Fate(StrEnum):
    DOOMED = "doomed"
    REMOVED_FAILED = "removedFailed"
    SCALED_DOWN = "scaledDown"
    REPLACED = "replaced"
    LEFT_EXPIRED = "leftExpired"
    LEFT_DRIFTED = "leftDrifted"
    LEFT_REPLACED = "leftReplaced"


# Why a device left of the pool's own accord (`Decision.reasons`) -> its fate until gone.
LEFT: dict[str, Fate] = {
    "Expired": Fate.LEFT_EXPIRED,
    "Drifted": Fate.LEFT_DRIFTED,
    "Replaced": Fate.LEFT_REPLACED,
}

# The newest devices each fate keeps (what a batch report or a health report can
# still mention); the others (`doomed`, those that left) stay until gone.
LIMITS: dict[Fate, int] = {Fate.REMOVED_FAILED: 20, Fate.SCALED_DOWN: 20, Fate.REPLACED: 100}


class Fates(RootModel[dict[str, Fate]]):
    root: dict[str, Fate] = Field(default_factory=dict)

    def of(self, fate: Fate) -> list[str]:
        """The devices with `fate`, oldest first."""
        return [d for d, f in self.root.items() if f is fate]

    def has(self, device_id: str, fate: Fate) -> bool:
        return self.root.get(device_id) is fate

    def set(self, device_ids: Iterable[str], fate: Fate) -> None:
        for device_id in device_ids:
            self.root.pop(device_id, None)
            self.root[device_id] = fate
        limit = LIMITS.get(fate)
        if limit is not None:
            for device_id in self.of(fate)[:-limit]:
                del self.root[device_id]

    def clear(self, device_ids: Iterable[str], fate: Fate) -> None:
        """Forget the devices' fate if it is `fate` (the news about them was read)."""
        for device_id in device_ids:
            if self.root.get(device_id) is fate:
                del self.root[device_id]
