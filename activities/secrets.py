"""Every secret the worker holds, and the one way provider text is cleaned of them.

A `Scrubber` is built once per worker from its config (every account's key, every
proxy pool's password) and handed to each provider client, which passes every text
it lets out through `scrub()`: a secret is replaced as sent, JSON-escaped (`\\"`,
`\\u00e9`) and URL-encoded (`%2F` or `%2f`, `+` for a space). Why: a provider may echo
what it was sent (docs/operations.md, "Configuration and secrets").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

from pydantic import SecretStr

from devicepool.activities.models import AccountSettings, ProxyPoolSettings

__all__ = ["REDACTED", "Scrubber"]

REDACTED = "**********"

_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _forms(secret: str) -> set[str]:
    """The secret as sent, JSON-escaped and URL-encoded (with lower-case hex too)."""
    forms = {secret}
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        forms.add(escaped)
        forms.add(escaped.replace("/", "\\/"))  # PHP's style
        # Go's encoding/json style
        forms.add(escaped.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms.add(encoded)
        forms.add(_PERCENT.sub(lambda m: m.group().lower(), encoded))
    return forms


class Scrubber:
    """Replaces every form of every secret it holds with `REDACTED`. Never shows a secret."""

    def __init__(self, secrets: Iterable[SecretStr | str] = ()) -> None:
        self._secrets = frozenset(
            value
            for secret in secrets
            if (value := secret.get_secret_value() if isinstance(secret, SecretStr) else secret)
        )
        forms = set().union(*(_forms(secret) for secret in self._secrets))
        # Longest first: a form that contains another is replaced whole.
        self._forms = sorted(forms, key=len, reverse=True)
        # What `may_hold` looks for in a raw answer: each secret's longest run of
        # ASCII letters and digits, which every encoding (JSON escapes of any
        # style, URL encoding) leaves as it is. A secret without a run long
        # enough to be telling makes every answer worth a look.
        probes = [_longest_plain_run(secret) for secret in self._secrets]
        self._probes: list[bytes] | None = (
            None if any(len(p) < _MIN_PROBE for p in probes) else [p.encode() for p in probes]
        )

    @classmethod
    def of(
        cls,
        *,
        accounts: Iterable[AccountSettings] = (),
        proxy_pools: Iterable[ProxyPoolSettings] = (),
    ) -> Scrubber:
        """The secrets of a worker's accounts and proxy pools."""
        return cls([*(a.api_key for a in accounts), *(pool.password for pool in proxy_pools)])

    def including(self, *secrets: SecretStr | str) -> Scrubber:
        """This scrubber with `secrets` added (a client adds its own key, whoever built it)."""
        return Scrubber([*self._secrets, *secrets])

    def __or__(self, other: Scrubber) -> Scrubber:
        return Scrubber(self._secrets | other._secrets)

    def __repr__(self) -> str:
        return f"Scrubber({len(self._secrets)} secrets)"

    def scrub(self, text: str) -> str:
        """`text` with every form of every secret replaced by `REDACTED`."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def may_hold(self, raw: bytes) -> bool:
        """False only if no secret, in any encoding, can be in `raw` (a cheap test first)."""
        if self._probes is None:
            return bool(self._secrets)
        return any(probe in raw for probe in self._probes)

    def scrub_fields(self, value: Any, fields: frozenset[str], *, under: bool = False) -> Any:
        """A decoded JSON value with the strings under any key in `fields` scrubbed, at any depth
        (`under`: `value` is under one already).

        Only free text: ids, statuses and labels are what pools match on, and a
        short secret that happens to occur in one must not change it.
        """
        if isinstance(value, str) and under:
            return self.scrub(value)
        if isinstance(value, dict):
            return {
                k: self.scrub_fields(v, fields, under=under or k in fields)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.scrub_fields(v, fields, under=under) for v in value]
        return value


_MIN_PROBE = 4
_PLAIN_RUN = re.compile(r"[A-Za-z0-9]+")


def _longest_plain_run(secret: str) -> str:
    return max(_PLAIN_RUN.findall(secret), key=len, default="")
