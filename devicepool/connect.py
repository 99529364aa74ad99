"""The one factory for Temporal clients: the worker, the CLI, the tests and the benches all use it.

Connection settings come from the SDK's own environment configuration (docs/operations.md,
'Temporal'). The pydantic data converter is always set and decodes ignoring unknown fields, so
two builds can talk while both run; user input is checked strictly where it enters.
`DATA_CONVERTER` serves what builds no client (a `Replayer`, a time-skipping environment).
Every client carries the codec (`devicepool.codec`; without keys it only turns an encrypted
payload into a clear error) and, when ``OTEL_*`` asks, tracing (`devicepool.tracing`)."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import temporalio.api.common.v1
from pydantic import TypeAdapter
from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadCodec,
)
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime

from devicepool.codec import codec_from_env
from devicepool.errors import TemporalUnreachable, address_problem, without_scheme
from devicepool.tracing import interceptors_from_env

DEFAULT_ADDRESS = "127.0.0.1:7233"


@functools.lru_cache(maxsize=1024)
def _adapter(type_hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(type_hint)


class TolerantJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """The SDK's pydantic JSON converter, decoding with `extra="ignore"`."""

    def from_payload(
        self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None
    ) -> Any:
        hint = type_hint if type_hint is not None else Any
        try:
            adapter = _adapter(hint)
        except TypeError:  # an unhashable hint
            adapter = TypeAdapter(hint)
        return adapter.validate_json(payload.data, extra="ignore")


class TolerantPayloadConverter(CompositePayloadConverter):
    def __init__(self) -> None:
        json = TolerantJSONPayloadConverter()
        super().__init__(
            *(
                json if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = DataConverter(payload_converter_class=TolerantPayloadConverter)


def data_converter_for(codec: PayloadCodec | None) -> DataConverter:
    """`DATA_CONVERTER` with `codec` (a `devicepool.codec` codec) on every payload."""
    return dataclasses.replace(DATA_CONVERTER, payload_codec=codec)


def connect_config(
    *,
    address: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments for `Client.connect`: env config, then explicit overrides."""
    return _connect_config(address=address, namespace=namespace, env=env)[0]


def _connect_config(
    *, address: str | None, namespace: str | None, env: Mapping[str, str] | None
) -> tuple[dict[str, Any], bool]:
    """`connect_config`, and whether TLS is on only because the address said `https://`."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config(override_env_vars=env))
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if address:
        config["target_host"] = address
    # `http://host:port` (a URL pasted from a browser): the SDK warns and will refuse it.
    config["target_host"], https = without_scheme(str(config["target_host"]))
    tls_from_scheme = https and config.get("tls") is None
    if tls_from_scheme:
        config["tls"] = True
    if namespace:
        config["namespace"] = namespace
    return config, tls_from_scheme


async def connect(
    *,
    address: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
    identity: str | None = None,
    runtime: Runtime | None = None,
    codec: PayloadCodec | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Client:
    """Connect with the pydantic data converter; an unreachable server is `TemporalUnreachable`.

    `runtime` is the worker's (it carries the SDK metrics); everyone else takes the default.
    `codec`: the payload codec (the worker passes its config's); None reads the key files
    from `env` (`codec_from_env`). `interceptors` go after the tracing one the `OTEL_*`
    environment asks for (`interceptors_from_env`). `env` None is the process environment.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    data_converter = data_converter_for(codec if codec is not None else codec_from_env(environ))
    interceptors = [*interceptors_from_env(environ), *interceptors]
    config, tls_from_scheme = _connect_config(address=address, namespace=namespace, env=env)
    if address_problem(str(config["target_host"])):
        # Checked here: the SDK would try `host:80` for a bare host, and refuse a
        # bad port with a ValueError of its own.
        raise TemporalUnreachable(str(config["target_host"]))
    if identity:
        config["identity"] = identity
    if runtime is not None:
        config["runtime"] = runtime
    try:
        return await Client.connect(
            data_converter=data_converter, interceptors=interceptors, **config
        )
    except RuntimeError as err:
        # The SDK reports every transport failure as RuntimeError("Failed client connect: ...").
        raise TemporalUnreachable(
            config["target_host"], str(err), tls_from_scheme=tls_from_scheme
        ) from err
