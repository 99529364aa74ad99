"""`DeviceControls`: a DevicePool's hand controls, the methods `PoolClient` inherits for them.

Replace, protect or unprotect one device; pause or resume the health check's remediation. Each
is the pool's update of the method's name (`api.names`), answered in one line; a
`BrowserPoolClient` refuses them (`BadInput`: they would reach the DevicePool of that name)."""

from __future__ import annotations

from typing import Any

import pydantic

from devicepool.api.names import (
    KIND_DEVICE_POOL,
    UPDATE_PAUSE_REMEDIATION,
    UPDATE_PROTECT_DEVICE,
    UPDATE_REPLACE_DEVICE,
    UPDATE_RESUME_REMEDIATION,
    UPDATE_UNPROTECT_DEVICE,
)
from devicepool.client._pool_base import PoolClientBase
from devicepool.client._temporal_errors import UPDATE_TIMEOUT
from devicepool.client._validation import validate_name
from devicepool.client.errors import BadInput
from devicepool.workflows.pool.messages import (
    ControlAnswer,
    DeviceRef,
    ProtectRequest,
    ReplaceRequest,
)

__all__ = ["DeviceControls"]


class DeviceControls(PoolClientBase):
    """One device of a DevicePool, and its remediation, by hand."""

    async def replace_device(self, name: str, device: str, *, when_idle: bool = False) -> str:
        """Replace one device now (busy or not) or once idle; the pool's one-line answer."""
        return await self._control(
            name, UPDATE_REPLACE_DEVICE, ReplaceRequest(device=device, when_idle=when_idle)
        )

    async def protect_device(self, name: str, device: str, *, duration: str | None = None) -> str:
        """Keep a device from scale-down and expiry (for `duration`, e.g. `2h`, or until unprotected)."""
        self._device_pools_only(UPDATE_PROTECT_DEVICE)
        try:
            request = ProtectRequest.model_validate({"device": device, "duration": duration})
        except pydantic.ValidationError as err:
            raise BadInput(f"--for: {err.errors()[0]['msg']}") from None
        return await self._control(name, UPDATE_PROTECT_DEVICE, request)

    async def unprotect_device(self, name: str, device: str) -> str:
        return await self._control(name, UPDATE_UNPROTECT_DEVICE, DeviceRef(device=device))

    async def pause_remediation(self, name: str) -> str:
        """The health check stops replacing unhealthy devices (it still shows them)."""
        return await self._control(name, UPDATE_PAUSE_REMEDIATION, None)

    async def resume_remediation(self, name: str) -> str:
        return await self._control(name, UPDATE_RESUME_REMEDIATION, None)

    async def _control(self, name: str, update: str, request: Any) -> str:
        self._device_pools_only(update)  # each update is named as its method
        validate_name(name)
        handle = await self._running(name, KIND_DEVICE_POOL)
        args = [] if request is None else [request]
        with self._errors(name, writing=True, kind=KIND_DEVICE_POOL):
            answer = await handle.execute_update(
                update, args=args, result_type=ControlAnswer, rpc_timeout=UPDATE_TIMEOUT
            )
        return str(answer.message)
