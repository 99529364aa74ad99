"""Issue 37 item 14: a node worker's beat carries its Local API's health (worker/node.py).

A node worker holding a wrong BitBrowser key beat as healthy as any other: the 403 was
only in its own log on the desktop machine. Against the in-process emulator, no server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import SecretStr

from devicepool.activities.node_models import NodeBeat
from devicepool.activities.providers.bitbrowser import LocalApi
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.emulator.bitbrowser import BitBrowserConfig
from devicepool.worker.node import NodeOptions, api_health, beat_forever
from tests.helpers.bitbrowser import KEY, Account

WRONG = "wrong-key-7c1e5a"


class Registry:
    """Stands in for the Temporal client: keeps each beat's signal argument."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.beats: list[NodeBeat] = []
        self._stop = stop

    async def start_workflow(self, *args: Any, start_signal_args: list[Any], **kw: Any) -> None:
        self.beats.append(start_signal_args[0])
        self._stop.set()


def local_api(account: Account, key: str) -> LocalApi:
    return LocalApi(
        base_url="http://node-1.local",
        api_key=key,
        timeout=5.0,
        transport=account.transports["node-1"],
        scrubber=Scrubber.of(),
    )


async def beat_with(key: str) -> NodeBeat:
    account = Account(BitBrowserConfig(nodes=["node-1"], api_key=KEY, seed=1))
    api = local_api(account, key)
    stop = asyncio.Event()
    registry = Registry(stop)
    try:
        await beat_forever(
            registry,  # type: ignore[arg-type]
            NodeBeat(node="node-1", interval_seconds=0.1),
            stop=stop,
            api=api,
        )
    finally:
        await api.aclose()
        await account.aclose()
    [beat] = registry.beats
    return beat


async def test_a_wrong_key_is_in_the_nodes_beat_without_the_key() -> None:
    beat = await beat_with(WRONG)
    assert beat.api_healthy is False, beat
    assert beat.api_error.startswith("unauthenticated (HTTP 403)"), beat.api_error
    assert WRONG not in beat.model_dump_json()


async def test_the_right_key_beats_healthy() -> None:
    beat = await beat_with(KEY)
    assert (beat.api_healthy, beat.api_error) == (True, "")


async def test_a_desktop_client_that_is_closed_is_said() -> None:
    account = Account(BitBrowserConfig(nodes=["node-1"], api_key=KEY, seed=1))
    api = local_api(account, KEY)
    try:
        await account.control("node", {"up": False})
        ok, error = await api_health(api)
    finally:
        await api.aclose()
        await account.aclose()
    assert not ok and error.startswith("server_error (HTTP 503)"), error


def test_a_beat_names_the_nodes_proxy_pools_and_nothing_of_them_else() -> None:
    """Issue 43 item 6: `apply` refuses a BrowserPool whose proxy pool none of its nodes has;
    the names come with each beat (sorted), never a host, a user or a password."""
    secret = "proxy-pass-5d1f9e"
    pools = {
        name: ProxyPoolSettings(
            name=name,
            host=f"{name}.gw.example",
            port=1080,
            username_template="acct-7781-{session}",
            password=SecretStr(secret),
        )
        for name in ("resi", "dc")
    }
    options = NodeOptions(node="node-1", proxy_pools=pools, api_key=SecretStr(KEY))
    beat = options.beat()
    assert beat.proxy_pools == ["dc", "resi"]
    said = beat.model_dump_json()
    for text in (secret, "gw.example", "acct-7781", "1080", KEY):
        assert text not in said, said
    assert NodeOptions(node="node-1").beat().proxy_pools == []
    # An older node worker's beat does not say: None, not "no proxy pool".
    assert NodeBeat.model_validate({"node": "node-1"}).proxy_pools is None
