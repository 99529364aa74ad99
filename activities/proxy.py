"""Resolve a proxy pool name into the provider's `proxy` body, worker-side.

Workflows only ever name a proxy pool (`spec.proxy.poolRef`); the gateway
address and password stay in the worker's `ProxyPoolSettings`. The sticky
session id in the username is derived from the create call's idempotency key:
a retried create must send a byte-identical body, because the provider answers
422 when a key it has seen comes back with another body.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from devicepool.activities.models import ProxyPoolSettings

__all__ = ["ResolvedProxy", "resolve_proxy", "session_id"]

_TEMPLATE_FIELDS = frozenset({"session", "ttl"})


def session_id(idempotency_key: str, *, length: int = 16) -> str:
    """A short, stable, opaque session id for one create call (hex of sha256)."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class ResolvedProxy:
    """A proxy ready to send. `repr()` never shows the password."""

    pool: str
    type: str
    host: str
    port: int
    username: str
    password: SecretStr = field(repr=False)

    def body(self) -> dict[str, Any]:
        """The contract's `proxy` object, password in clear (for the request body only)."""
        return {
            "type": self.type,
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "password": self.password.get_secret_value(),
        }


def resolve_proxy(settings: ProxyPoolSettings, *, idempotency_key: str, ttl: int) -> ResolvedProxy:
    """Fill `username_template` (`{session}`, `{ttl}`) deterministically from the key."""
    fields = {
        name for _, name, _, _ in string.Formatter().parse(settings.username_template) if name
    }
    unknown = fields - _TEMPLATE_FIELDS
    if unknown:
        raise ValueError(
            f"proxy pool {settings.name!r}: username template may use {{session}} and {{ttl}}, "
            f"not {', '.join(sorted(unknown))}"
        )
    username = settings.username_template.format(session=session_id(idempotency_key), ttl=ttl)
    return ResolvedProxy(
        pool=settings.name,
        type=settings.type,
        host=settings.host,
        port=settings.port,
        username=username,
        password=settings.password,
    )
