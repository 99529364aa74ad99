"""The `rest` adapter: the REST contract (docs/providers.md) through `BitCloudPhoneClient`.

The client does the HTTP (auth, paging, bounds, errors, scrubbing); this adapter turns
the engine's questions into its calls and its JSON into the pool's views. Membership
is the `pool` label; the idempotency key travels as the `Idempotency-Key` header.
"""

from __future__ import annotations

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.connect_models import ConnectInfo, parse_adb
from devicepool.activities.device_models import DeviceInfo, DeviceStatusInfo
from devicepool.activities.device_views import device_info, device_status_info
from devicepool.activities.providers.base import NewDevice, ProviderDevice
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY

__all__ = ["RestProvider"]


class RestProvider:
    """One account at a REST provider (implements `providers.Provider`)."""

    def __init__(self, client: BitCloudPhoneClient) -> None:
        self.client = client

    def __repr__(self) -> str:
        return f"RestProvider({self.client!r})"

    async def list_pool(self, pool: str) -> list[DeviceInfo]:
        return [device_info(d) for d in await self.client.list_devices(labels={LABEL_POOL: pool})]

    async def list_managed(self) -> list[ProviderDevice]:
        raw = await self.client.list_devices(labels={LABEL_MANAGED_BY: MANAGED_BY})
        return [ProviderDevice(device_info(d), str(d.get("platform") or "")) for d in raw]

    async def get_device(self, device_id: str) -> ProviderDevice:
        raw = await self.client.get_device(device_id)
        return ProviderDevice(device_info(raw), str(raw.get("platform") or ""))

    async def connect_info(self, device_id: str) -> ConnectInfo:
        # The contract's optional `connect` block of a device's detail (docs/providers.md).
        raw = await self.client.get_device(device_id)
        block = raw.get("connect")
        adb = parse_adb(block.get("adb")) if isinstance(block, dict) else None
        if adb is None:
            status = str(raw.get("status") or "unknown")[:40]
            return ConnectInfo(message=f"device {device_id} ({status}) offers no connect info")
        return ConnectInfo(adb=adb)

    async def reset_device(self, device_id: str) -> bool:
        return False  # the contract has no reset: a used device is replaced

    async def create_device(self, new: NewDevice) -> DeviceInfo:
        template = new.template
        raw = await self.client.create_device(
            template.platform,
            region=template.region,
            os_version=template.os_version,
            name=new.name,
            labels=dict(new.labels),
            proxy=None if new.proxy is None else new.proxy.body(),
            idempotency_key=new.idempotency_key,
        )
        return device_info(raw)

    async def remove_device(self, device_id: str) -> None:
        await self.client.delete_device(device_id)

    async def read_statuses(self, ids: list[str]) -> tuple[list[DeviceStatusInfo], list[str]]:
        items, not_found = await self.client.batch_status(ids)
        return [device_status_info(item) for item in items], not_found

    async def region_status(self, region: str) -> str:
        for listed in await self.client.regions():
            if listed.get("name") == region:
                return str(listed.get("status"))
        return "unknown"

    async def region_names(self) -> list[str]:
        return [str(listed["name"]) for listed in await self.client.regions() if listed.get("name")]

    def platform_problem(self, platform: str) -> str | None:
        return None  # both of the contract's platforms

    def proxy_problem(self, proxy: ProxyPoolSettings | None) -> str | None:
        return None  # a device without a proxy, or with any, is the contract's

    async def release_pool(self, pool: str) -> int:
        return 0  # a deleted device is gone: nothing is kept

    async def aclose(self) -> None:
        await self.client.aclose()
