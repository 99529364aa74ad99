"""Every side effect of devicepool: provider clients, error mapping, proxy resolution.

`DeviceActivities` is re-exported lazily: workflows import `activities.models`
(which runs this module) inside the sandbox, and must not drag httpx along.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devicepool.activities.devices import DeviceActivities

__all__ = ["DeviceActivities"]


def __getattr__(name: str) -> Any:
    if name == "DeviceActivities":
        from devicepool.activities.devices import DeviceActivities

        return DeviceActivities
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
