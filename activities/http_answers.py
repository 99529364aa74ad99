"""What both HTTP clients share: reading an answer defensively, the key, `async with`.

For `BitCloudPhoneClient` and `LocalApi`, and for any HTTP adapter after them.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Self

import httpx
from pydantic import SecretStr

from devicepool.activities.errors import TransportError, TransportTimeoutError
from devicepool.activities.heartbeats import point_of_no_return
from devicepool.activities.models import bounded_retry_after
from devicepool.activities.secrets import REDACTED, Scrubber
from devicepool.api.errors import ErrorType

__all__ = [
    "MAX_ERROR_BODY_BYTES",
    "Answer",
    "HttpClient",
    "SecretHeader",
    "exchange",
    "parse_retry_after",
    "read_at_most",
    "text_of",
]

# Of an error answer only this much is read: its detail is cut to 500 characters anyway.
MAX_ERROR_BODY_BYTES = 64 * 1024

# A `Retry-After` / `RateLimit-Reset` number above this (September 2001 as an epoch
# timestamp; 31 years as a delta) is a point in time.
_EPOCH_FROM = 1e9


def parse_retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` as seconds (delta-seconds or an HTTP date); `RateLimit-Reset` as fallback.

    Read defensively: a number above `_EPOCH_FROM` is a point in time (several
    APIs send an epoch timestamp), not a delta; NaN, infinities, negatives and
    garbage count as absent; the result never exceeds `MAX_RETRY_AFTER_SECONDS`.
    """
    for header in ("retry-after", "ratelimit-reset"):
        raw = response.headers.get(header)
        if raw is None:
            continue
        seconds = _seconds_from(raw.strip())
        if seconds is not None:
            return bounded_retry_after(seconds)
    return None


def _seconds_from(raw: str) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            return None
        return max(0.0, value - time.time()) if value > _EPOCH_FROM else value
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is read as such
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - time.time())


class SecretHeader(httpx.Auth):
    """Adds the key per request, so it never sits in the client's default headers."""

    def __init__(self, header: str, key: SecretStr, *, prefix: str = "") -> None:
        self._header, self._key, self._prefix = header, key, prefix

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[self._header] = self._prefix + self._key.get_secret_value()
        yield request

    def __repr__(self) -> str:
        return f"SecretHeader({self._header!r}, SecretStr({REDACTED!r}))"


class HttpClient:
    """A client over one `httpx.AsyncClient` (`_http`). Use as `async with`, or call `aclose()`."""

    _http: httpx.AsyncClient

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@dataclass(frozen=True)
class Answer:
    data: Any  # the decoded JSON ({} for an empty body)
    size: int  # bytes of the body, as decoded from its transfer encoding


async def read_at_most(
    response: httpx.Response, max_bytes: int, *, cut: bool = False
) -> bytes | None:
    """The body, read in chunks, if it is at most `max_bytes`; else None (or, `cut`, its start).

    Never holds more than `max_bytes` (and one chunk): an answer declaring more
    in its Content-Length is not read at all.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes and not cut:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            if not cut:
                return None
            chunks.append(chunk[: len(chunk) - (size - max_bytes)])
            break
        chunks.append(chunk)
    return b"".join(chunks)


async def exchange(
    http: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    max_bytes: int,
    scrubber: Scrubber,
    deadline: float | None = None,
    read: bool = False,
    **options: Any,
) -> tuple[httpx.Response, bytes | None]:
    """One request: the answer and its body (`read_at_most` `max_bytes`; an error answer's
    first `MAX_ERROR_BODY_BYTES`), or a `TransportError` when there is none (scrubbed).

    `deadline`: seconds for the whole exchange (httpx's per-phase timeouts alone let a
    trickling answer last for ever). `read`: the request changes nothing at the provider;
    any other is a create's point of no return (`heartbeats.point_of_no_return`), marked
    here, after every wait of the caller's, as it goes out."""
    if not read:
        point_of_no_return()
    try:
        async with asyncio.timeout(deadline):
            async with http.stream(method, path, **options) as response:
                ok = response.is_success
                limit = max_bytes if ok else MAX_ERROR_BODY_BYTES
                return response, await read_at_most(response, limit, cut=not ok)
    except (TimeoutError, httpx.TimeoutException) as exc:
        why = type(exc).__name__ if deadline is None else f"no answer within {deadline:g}s"
        raise TransportTimeoutError(
            ErrorType.TIMEOUT, None, scrubber.scrub(f"{method} {path}: {why}")
        ) from None
    except httpx.TransportError as exc:
        raise TransportError(
            ErrorType.TRANSPORT,
            None,
            scrubber.scrub(f"{method} {path}: {type(exc).__name__}: {exc}"),
        ) from None


def text_of(response: httpx.Response, raw: bytes) -> str:
    try:
        return raw.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")
