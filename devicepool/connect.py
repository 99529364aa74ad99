"""The one factory for Temporal clients: the worker, the CLI, the tests and the benches all use it.

Connection settings come from the SDK's own environment configuration
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_PROFILE` and the TOML profile file), so any standard Temporal setup
(self-hosted, Temporal Cloud) works without devicepool-specific flags. The
pydantic data converter is always set: every workflow and activity message is
a pydantic model. `DATA_CONVERTER` is the same converter for the places that
build no client themselves (a `Replayer`, a time-skipping test environment).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime

from devicepool.errors import TemporalUnreachable

DEFAULT_ADDRESS = "127.0.0.1:7233"
DATA_CONVERTER: DataConverter = pydantic_data_converter


def connect_config(
    *,
    address: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments for `Client.connect`: env config, then explicit overrides."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config(override_env_vars=env))
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    return config


def target_address(*, address: str | None = None, env: Mapping[str, str] | None = None) -> str:
    return str(connect_config(address=address, env=env)["target_host"])


async def connect(
    *,
    address: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
    identity: str | None = None,
    runtime: Runtime | None = None,
) -> Client:
    """Connect with the pydantic data converter; an unreachable server is `TemporalUnreachable`.

    `runtime` is the worker's (it carries the SDK metrics); everyone else takes the default.
    """
    config = connect_config(address=address, namespace=namespace, env=env)
    if identity:
        config["identity"] = identity
    if runtime is not None:
        config["runtime"] = runtime
    try:
        return await Client.connect(data_converter=DATA_CONVERTER, **config)
    except RuntimeError as err:
        # The SDK reports every transport failure as RuntimeError("Failed client connect: ...").
        raise TemporalUnreachable(config["target_host"], str(err)) from err
