"""One node's BitBrowser Local API: the HTTP, the envelope, the errors, the secrets.

`LocalApi` is the connection to one desktop client, shared by both families and
living as long as the worker. Every call is a `POST` of a JSON body; a refusal
(`{"success": false, "msg": ...}`) raises the typed error its text reads as
(`errors.classify`). The key (`x-api-key`) is added per request and never shown.
Every text that leaves (a refusal's `msg`, a transport error, a `msg` in an answer)
is scrubbed of the worker's secrets, the key and the refused request's secrets; a
`name` or `remark` never is: they are the marks pools match on, and a short secret
inside one must not change it. One deadline covers a whole exchange.
"""

from __future__ import annotations

import json as jsonlib
import logging
from collections.abc import Iterable
from typing import Any

import httpx
from pydantic import SecretStr

from devicepool.activities.errors import ProviderError, ServerError
from devicepool.activities.http_answers import (
    HttpClient,
    SecretHeader,
    exchange,
    parse_retry_after,
    text_of,
)
from devicepool.activities.metrics import Metrics
from devicepool.activities.providers.bitbrowser.errors import (
    Refusal,
    refusal_error,
    unsupported_error,
)
from devicepool.activities.secrets import REDACTED, Scrubber
from devicepool.api.errors import ErrorType

__all__ = ["DEFAULT_BASE_URL", "MAX_BODY_BYTES", "LocalApi"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:54345"
# A page of 100 profiles with their fingerprints is some 300 KiB; a detail with cookies more.
MAX_BODY_BYTES = 8 * 1024 * 1024
# The answers' free text a provider could echo a secret into; scrubbed like refusals.
# Never `name` or `remark`: those are marks (module docstring).
_TEXT_FIELDS = frozenset({"msg"})
# The calls that change nothing on the account: a create cancelled while it sends only
# these (or waits its turn, a lock) has not begun to make a profile (`heartbeats`).
_READS = frozenset(
    {
        "/health",
        "/phone/list",
        "/phone/running",
        "/browser/list",
        "/browser/detail",
        "/browser/pids/alive",
    }
)


def is_read(path: str) -> bool:
    """`path` changes nothing on the account (a create's point of no return is any other)."""
    return path in _READS


class LocalApi(HttpClient):
    """One node's Local API. Use as `async with`, or call `aclose()`."""

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: SecretStr | str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: Metrics | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        if isinstance(api_key, str):
            api_key = SecretStr(api_key)
        if api_key is not None and not api_key.get_secret_value():
            api_key = None  # an empty key file means auth off, not an empty header
        self._api_key = api_key
        self._scrubber = (scrubber or Scrubber()).including(*([api_key] if api_key else []))
        # The worker's metrics this client records its calls in (None in some tests).
        self.metrics = metrics
        self.timeout = timeout
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=SecretHeader("x-api-key", api_key) if api_key is not None else None,
            timeout=httpx.Timeout(timeout),
            headers={"Accept": "application/json"},
            transport=transport,
            follow_redirects=False,
            # The Local API is on the desktop's loopback: a proxy from the environment
            # (HTTP_PROXY) would send every call, and the key, somewhere else.
            trust_env=False,
        )

    def __repr__(self) -> str:
        key = f"SecretStr({REDACTED!r})" if self._api_key is not None else "None"
        return f"LocalApi(base_url={self.base_url!r}, api_key={key})"

    async def health(self) -> None:
        """`/health`: the desktop client answers (and takes the key). Raises when not."""
        await self.call("/health")

    async def call(
        self,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        secrets: Iterable[str] = (),
        timeout: float | None = None,
    ) -> Any:
        """`POST path` with `body`: the answer's `data` (None when absent), or a `ProviderError`.

        `secrets`: values in `body` that must not come back in an error (a proxy
        password the desktop client might quote in its refusal).
        """
        if self.metrics is not None:
            self.metrics.api_call(f"POST {path}")
        scrubber = self._scrubber.including(*(s for s in secrets if s))
        try:
            response, raw = await exchange(
                self._http,
                "POST",
                path,
                max_bytes=MAX_BODY_BYTES,
                scrubber=scrubber,
                deadline=timeout or self.timeout,
                read=path in _READS,
                json=body or {},
            )
            return self._answer(path, response, raw, scrubber)
        except ProviderError as exc:
            if self.metrics is not None:
                self.metrics.api_error(exc.error_type)
            logger.debug("Local API %s failed: %s", path, exc.error_type.value)
            raise

    def _answer(
        self, path: str, response: httpx.Response, raw: bytes | None, scrubber: Scrubber
    ) -> Any:
        status = response.status_code
        if raw is None:
            raise ServerError(
                ErrorType.SERVER_ERROR, status, f"POST {path}: answer over {MAX_BODY_BYTES} bytes"
            )
        envelope = _envelope(raw)
        msg = scrubber.scrub(str(envelope.get("msg") or "")) if envelope is not None else ""
        if status in (401, 403):
            # However the desktop client words it: the key was refused.
            raise refusal_error(f"POST {path}", msg, status=status, kind=Refusal.AUTH)
        if status == 404:
            raise unsupported_error(f"POST {path}", msg, status)
        if status == 429:
            raise refusal_error(
                f"POST {path}",
                msg or "HTTP 429",
                status=status,
                kind=Refusal.RATE_LIMITED,
                retry_after=parse_retry_after(response),
            )
        if status >= 500:
            # A proxy's or a crashed client's page: its start, scrubbed, says what happened.
            text = msg or " ".join(scrubber.scrub(text_of(response, raw)).split())[:200]
            raise ServerError(
                ErrorType.SERVER_ERROR, status, f"POST {path}: HTTP {status}: {text or '-'}"
            )
        if envelope is None:
            # Not quoted: a bare answer may be data (with its secrets, which no scrubber knows).
            raise ServerError(ErrorType.SERVER_ERROR, status, f"POST {path}: not the envelope")
        if envelope.get("success") is True and status < 300:
            data = envelope.get("data")
            if scrubber.may_hold(raw):
                data = scrubber.scrub_fields(data, _TEXT_FIELDS)
            return data
        if envelope.get("success") is False:
            raise refusal_error(f"POST {path}", msg, status=status)
        raise ServerError(
            ErrorType.SERVER_ERROR,
            status,
            f"POST {path}: HTTP {status}, no `success` in the answer",
        )


def _envelope(raw: bytes) -> dict[str, Any] | None:
    """The decoded `{success, ...}` object, or None for anything else."""
    try:
        decoded = jsonlib.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    if isinstance(decoded, dict) and isinstance(decoded.get("success"), bool):
        return decoded
    return None
