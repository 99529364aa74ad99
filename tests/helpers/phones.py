"""Cloud phones on the BitBrowser Local API emulator, as the phone tests set them up.

`phone_activities` is the account `phones` of an in-process emulator (tests/activities:
`Account`, one node, virtual time); `a_running_phone` rents one there and lets it boot.
`phone_stack` serves the session dev server's `cloud-phones` namespace from an emulator of
its own (10 times faster than real time), for the modules that run whole pools of phones;
it yields `Phones`, the namespace's client and that emulator.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import (
    AccountSettings,
    CreateDeviceInput,
    DeviceTemplate,
    PoolSettings,
    ProxyPoolSettings,
)
from devicepool.activities.providers.bitbrowser.phone_marks import Remark, parse_device_id
from devicepool.emulator.bitbrowser import BitBrowserConfig, BitBrowserEmulator, create_apps
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.settings import proxy_pools
from tests.helpers.workflow_stack import namespace_client, serving

ACCOUNT = "phones"
SPEED = 10.0  # the dev-server stacks' emulator, against real time


def phone_of(device: str) -> str:
    """The phone id behind a device id."""
    return (parse_device_id(device) or ("", 0))[0]


class Phones:
    """A phone stack: the `cloud-phones` namespace's client, and its emulator read directly
    (a `/phone/list` would take the worker's one request a second)."""

    def __init__(self, client: Client, app: Any) -> None:
        self.client = client
        self.app = app
        self.emulator: BitBrowserEmulator = app.state.emulator

    def state(self, device: str) -> tuple[str, str]:
        """(power, remark state) of the phone behind a device id."""
        with self.emulator.transaction(write=False):
            phone = self.emulator.phones.phones[phone_of(device)]
            power, remark = phone.power, Remark.parse(phone.fields["remark"])
        return power, remark.state if remark else ""

    def recovers(self) -> int:
        """The fresh starts (`/phone/profile/recover`) the emulator has done."""
        with self.emulator.transaction(write=False):
            return self.emulator.phones.counters["recovers"]


def stack_account(name: str, url: str, key: str) -> AccountSettings:
    """A cloud-phone account of a dev-server stack: its node's Local API at `url`, a create
    each 1.1 s of the emulator's time (which runs at `SPEED`)."""
    return AccountSettings(
        name=name,
        api="bitbrowser",
        base_url=url,
        api_key=SecretStr(key),
        timeout_seconds=5,
        phone_interval_seconds=1.1 / SPEED,
    )


def phone_activities(
    account: Account, *, interval: float, settings: PoolSettings | None = None
) -> DeviceActivities:
    """Activities of the account `phones` on `account`'s node-1, proxy pool `gw`."""
    return DeviceActivities(
        accounts={
            ACCOUNT: AccountSettings(
                name=ACCOUNT,
                api="bitbrowser",
                base_url="http://node-1.local",
                api_key=SecretStr(KEY),
                phone_interval_seconds=interval,
            )
        },
        proxy_pools={
            "gw": ProxyPoolSettings(name="gw", host="gw.test", port=1080, password=SecretStr("pw"))
        },
        settings=settings,
        transport=account.transports["node-1"],
    )


async def a_running_phone(account: Account, acts: DeviceActivities, pool: str, boot: float) -> str:
    """A phone of `pool` (slot 0) rented, then `boot` virtual seconds for it to start."""
    made = await ActivityEnvironment().run(
        acts.create_device,
        CreateDeviceInput(
            account=ACCOUNT,
            pool=pool,
            template=DeviceTemplate(platform="android", region="r-1", os_version="14", proxy_pool="gw"),
            name=f"{pool}-0",
            idempotency_key=f"devicepool:{pool}:g1:s0",
        ),
    )  # fmt: skip
    await account.advance(boot)
    return made.device.id


@contextlib.asynccontextmanager
async def phone_stack(
    env: WorkflowEnvironment,
    *,
    name: str,
    seed: int,
    settings: PoolSettings,
    key: str | None = None,
    url: str | None = None,
    proxy_password: str | None = None,
    cancel_pools: bool = True,
    **config: Any,
) -> AsyncIterator[Phones]:
    """Workers of the `cloud-phones` namespace for the account `phones` of an emulator of
    its own (account `name`, `config` on top of 20-s boots and 5-s resumes), its node-1.
    Unset, its key, its Local API's URL and its proxy password are made from `name` (each
    module's own: a leak check knows whose it finds)."""
    key = key or f"bb-local-key-{name}"
    url = url or f"http://{name}.local"
    proxy_password = proxy_password or f"{name}-proxy-pass"
    apps = create_apps(
        BitBrowserConfig(
            account=name,
            api_key=key,
            speed=SPEED,
            seed=seed,
            phone_boot_seconds=20,
            phone_resume_seconds=5,
            **config,
        )
    )
    app = apps["node-1"]
    activities = DeviceActivities(
        accounts={ACCOUNT: stack_account(ACCOUNT, url, key)},
        proxy_pools=proxy_pools(proxy_password),
        settings=settings,
        transport=httpx.ASGITransport(app=app),
    )
    # The cloud-phone modules share this namespace: no pool of one is left to the others.
    client = await namespace_client(env, "cloud-phones")
    async with serving(client, activities, [ACCOUNT], cancel_pools=cancel_pools):
        yield Phones(client, app)
