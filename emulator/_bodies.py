"""Parsing request bodies: JSON decoding and validation of the create body (`CreateSpec`),
a dataclass to and from camelCase JSON (`camel_fields`, `from_camel`), and the checks
every `/_emulator/faults` body gets (`checked_faults`).

Every rejection is a 400 `invalid_argument` problem; unknown top-level fields of
a create body are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from devicepool.emulator._problems import invalid

PROXY_TYPES = ("http", "https", "socks4", "socks5")
_T = TypeVar("_T")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def checked_faults(
    body: Any,
    *,
    rates: Iterable[str],
    others: Iterable[str] = (),
    nullable: Iterable[str] = (),
    check: Callable[[str, Any], None] = lambda name, value: None,
) -> dict[str, Any]:
    """A `POST /_emulator/faults` body, validated: a JSON object of known fields, each a
    number (or null where `nullable`): the `rates` in [0, 1], `latencyMs` >= 0,
    `timeoutSeconds` > 0, the `others` as `check(name, value)` says."""
    if not isinstance(body, dict):
        raise invalid("faults must be a JSON object")
    known = {*rates, *others, "latencyMs", "timeoutSeconds"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise invalid(f"unknown fault fields {unknown}; known: {sorted(known)}")
    for name, value in body.items():
        if name in nullable and value is None:
            continue
        if not is_number(value):
            raise invalid(f"{name} must be a number")
        if name in rates and not 0 <= value <= 1:
            raise invalid(f"{name} must be between 0 and 1")
        check(name, value)
        if name == "latencyMs" and value < 0:
            raise invalid("latencyMs must be >= 0")
        if name == "timeoutSeconds" and value <= 0:
            raise invalid("timeoutSeconds must be > 0")
    return body


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def camel_fields(item: Any) -> dict[str, Any]:
    """A dataclass's fields by their camelCase names, in field order."""
    return {camel(field.name): getattr(item, field.name) for field in fields(item)}


def from_camel(cls: type[_T], body: dict[str, Any], convert: Callable[[str, Any], Any]) -> _T:
    """The dataclass `cls` with each field `body` names (camelCase) set to `convert(name,
    value)`; the others keep their defaults."""
    given = {camel(field.name): field.name for field in fields(cls)}  # type: ignore[arg-type]
    return cls(**{given[name]: convert(name, value) for name, value in body.items()})


def parse_json(raw: bytes) -> Any:
    if not raw.strip():
        raise invalid("request body is required")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise invalid(f"request body is not valid JSON: {error}") from None


def parse_json_body(raw: bytes, *, empty: Any = None) -> Any:
    """Parse a control-plane or batch body; an empty body becomes `empty`."""
    if not raw.strip():
        if empty is None:
            raise invalid("request body is required")
        return empty
    return parse_json(raw)


@dataclass
class CreateSpec:
    region: str
    os_version: str
    name: str
    labels: dict[str, str]
    proxy: dict[str, Any] | None

    @classmethod
    def parse(cls, body: Any) -> CreateSpec:
        """Validate a create body; unknown top-level fields are ignored."""
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        region = _required_str(body, "region")
        os_version = _required_str(body, "osVersion")
        name = _required_str(body, "name")
        labels = body.get("labels")
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise invalid("labels is required and must be an object of string values")
        for key in labels:
            if not key or "=" in key:
                raise invalid(f"label key {key!r} must be non-empty and contain no '='")
        if not labels.get("pool"):
            raise invalid("labels.pool is required")
        return cls(region, os_version, name, dict(labels), _parse_proxy(body.get("proxy")))


def _required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{name} is required and must be a non-empty string")
    return value


def _parse_proxy(proxy: Any) -> dict[str, Any] | None:
    if proxy is None:
        return None
    if not isinstance(proxy, dict):
        raise invalid("proxy must be an object")
    kind = proxy.get("type")
    if kind not in PROXY_TYPES:
        raise invalid(f"proxy.type must be one of {list(PROXY_TYPES)}")
    host = proxy.get("host")
    if not isinstance(host, str) or not host.strip():
        raise invalid("proxy.host is required")
    port = proxy.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise invalid("proxy.port must be an integer between 1 and 65535")
    for secret in ("username", "password"):
        if proxy.get(secret) is not None and not isinstance(proxy[secret], str):
            raise invalid(f"proxy.{secret} must be a string")
    # The password is used and forgotten: no answer ever carries it.
    return {"type": kind, "host": host, "port": port, "username": proxy.get("username")}
