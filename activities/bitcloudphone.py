"""An async client for the REST provider contract (docs/providers.md, "The REST contract").

One `BitCloudPhoneClient` per account, living as long as the worker. Methods return the
provider's JSON (camelCase dicts) and raise the typed errors of `activities.errors`.
The API key leaves the process only in the `Authorization` header; whatever the
provider answers passes the worker's `Scrubber` first (`_TEXT_FIELDS`).
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import logging
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from devicepool.activities.errors import ProviderError, error_from_response
from devicepool.activities.http_answers import (
    Answer,
    HttpClient,
    SecretHeader,
    exchange,
    parse_retry_after,
    text_of,
)
from devicepool.activities.metrics import Metrics
from devicepool.activities.secrets import REDACTED, Scrubber
from devicepool.api.errors import ErrorType
from devicepool.api.v1beta1 import Platform

__all__ = [
    "MAX_BATCH_IDS",
    "MAX_BODY_BYTES",
    "MAX_LIST_BYTES",
    "MAX_LIST_ITEMS",
    "MAX_LIST_PAGES",
    "MAX_LIST_SECONDS",
    "BitCloudPhoneClient",
]

logger = logging.getLogger(__name__)

MAX_BATCH_IDS = 100
# What one answer, and one listing across its pages, may cost at most. A pool
# has at most 500 devices (pages of 100, about 1 KiB a device): far below
# these. A provider that answers a fresh `nextPageToken` for ever, or a body
# without end, gets a `SERVER_ERROR` naming the limit instead of the worker's
# memory (`http_answers.read_at_most`).
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_LIST_PAGES = 200
MAX_LIST_ITEMS = 20_000
MAX_LIST_BYTES = 32 * 1024 * 1024
MAX_LIST_SECONDS = 60.0
# The free-text fields of the contract's answers (a device's `reason`, a
# problem's `detail` and `title`, ...), where a provider may echo what it was
# sent; scrubbed of the worker's secrets. Ids, statuses and labels are not.
_TEXT_FIELDS = frozenset({"reason", "detail", "title", "message", "error", "errors"})


class BitCloudPhoneClient(HttpClient):
    """The provider's REST API for one account. Use as `async with` or call `aclose()`."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: SecretStr | str,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: Metrics | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        self._metrics = metrics
        self._api_key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key)
        # The worker's secrets (all accounts, all proxy pools), and this client's key in any case.
        self._scrubber = (scrubber or Scrubber()).including(self._api_key)
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=SecretHeader("Authorization", self._api_key, prefix="Bearer "),
            # On every phase (connect, read, write, pool): a hung provider fails the call.
            timeout=httpx.Timeout(timeout),
            headers={"Accept": "application/json"},
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"BitCloudPhoneClient(base_url={self.base_url!r}, api_key=SecretStr({REDACTED!r}))"

    # ------------------------------------------------------------ the contract

    async def create_device(
        self,
        platform: Platform | str,
        *,
        region: str,
        os_version: str,
        name: str,
        labels: dict[str, str],
        proxy: dict[str, Any] | None,
        idempotency_key: str,
    ) -> dict[str, Any]:
        """Create one device (202, status `provisioning`); a replayed key answers the first device."""
        platform = Platform(platform)
        body: dict[str, Any] = {
            "region": region,
            "osVersion": os_version,
            "name": name,
            "labels": dict(labels),
        }
        if proxy is not None:
            body["proxy"] = dict(proxy)
        result = await self._request(
            "POST",
            f"/api/v1/{platform.value}/devices",
            json=body,
            headers={"Idempotency-Key": idempotency_key},
        )
        return dict(result)

    async def list_devices(
        self,
        *,
        labels: dict[str, str],
        statuses: list[str] | None = None,
        page_size: int = 100,
    ) -> list[dict[str, Any]]:
        """Every device matching all `labels` (and one of `statuses`), across all pages.

        Bounded: at most `MAX_LIST_PAGES` pages, `MAX_LIST_ITEMS` devices,
        `MAX_LIST_BYTES` of answers and `MAX_LIST_SECONDS`; past any of them a
        `ProviderError` (SERVER_ERROR) names the limit.
        """
        params: list[tuple[str, Any]] = [("label", f"{k}={v}") for k, v in labels.items()]
        params.extend(("status", status) for status in statuses or ())
        params.append(("page_size", page_size))
        devices: list[dict[str, Any]] = []
        deadline = asyncio.timeout(MAX_LIST_SECONDS)
        try:
            async with deadline:
                await self._list_pages(params, devices)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise _listing_stopped(
                f"still listing after {MAX_LIST_SECONDS:g}s (MAX_LIST_SECONDS), "
                f"{len(devices)} devices so far"
            ) from None
        if statuses:
            # Belt and braces: the result must honour the filter whatever the server did.
            wanted = set(statuses)
            devices = [d for d in devices if d.get("status") in wanted]
        return devices

    async def _list_pages(
        self, params: list[tuple[str, Any]], devices: list[dict[str, Any]]
    ) -> None:
        """Follow `nextPageToken` to the end, appending to `devices`, within the limits."""
        token: str | None = None
        seen_tokens: set[str] = set()
        size = 0
        for page_number in range(1, MAX_LIST_PAGES + 1):
            page_params = list(params)
            if token:
                page_params.append(("page_token", token))
            left = MAX_LIST_BYTES - size
            page = await self._exchange(
                "GET",
                "/api/v1/devices",
                params=page_params,
                max_bytes=min(MAX_BODY_BYTES, left),
                limit="MAX_BODY_BYTES"
                if left > MAX_BODY_BYTES
                else f"MAX_LIST_BYTES, {MAX_LIST_BYTES} for one listing",
            )
            size += page.size
            devices.extend(page.data.get("items") or [])
            if len(devices) > MAX_LIST_ITEMS:
                raise _listing_stopped(
                    f"more than {MAX_LIST_ITEMS} devices (MAX_LIST_ITEMS) after {page_number} pages"
                )
            token = page.data.get("nextPageToken") or None
            if not token:
                return
            if token in seen_tokens:
                raise ProviderError(
                    ErrorType.SERVER_ERROR, None, "provider repeated a page token while listing"
                )
            seen_tokens.add(token)
        raise _listing_stopped(
            f"still a nextPageToken after {MAX_LIST_PAGES} pages (MAX_LIST_PAGES), "
            f"{len(devices)} devices so far"
        )

    async def get_device(self, device_id: str) -> dict[str, Any]:
        return dict(await self._request("GET", f"/api/v1/devices/{_path(device_id)}"))

    async def get_status(self, device_id: str) -> dict[str, Any]:
        return dict(await self._request("GET", f"/api/v1/devices/{_path(device_id)}/status"))

    async def batch_status(self, ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
        """Statuses of up to 100 devices: `(items, not_found_ids)`."""
        if len(ids) > MAX_BATCH_IDS:
            raise ValueError(f"batch_status takes at most {MAX_BATCH_IDS} ids, got {len(ids)}")
        if not ids:
            return [], []
        result = await self._request(
            "POST", "/api/v1/devices/status:batch", json={"ids": list(ids)}
        )
        return list(result.get("items") or []), list(result.get("notFound") or [])

    async def delete_device(self, device_id: str) -> dict[str, Any]:
        """Start terminating a device (202; idempotent). Raises `NotFoundError` for unknown ids."""
        return dict(await self._request("DELETE", f"/api/v1/devices/{_path(device_id)}") or {})

    async def regions(self) -> list[dict[str, Any]]:
        result = await self._request("GET", "/api/v1/regions")
        if isinstance(result, dict):
            return list(result.get("items") or result.get("regions") or [])
        return list(result)

    # ------------------------------------------------------------ plumbing

    async def _request(self, method: str, path: str, **options: Any) -> Any:
        """`_exchange`'s decoded answer (`options`: its `json`, `params`, `headers`)."""
        return (await self._exchange(method, path, **options)).data

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        max_bytes: int = MAX_BODY_BYTES,
        limit: str = "MAX_BODY_BYTES",
        **options: Any,
    ) -> Answer:
        """One call: the decoded answer and its size, or a `ProviderError` (counted).

        `options`: the request's `json`, `params`, `headers`."""
        if self._metrics is None:
            return await self._send(method, path, max_bytes, limit, options)
        self._metrics.api_call(_operation(method, path))
        try:
            return await self._send(method, path, max_bytes, limit, options)
        except ProviderError as exc:
            # The one place every provider failure passes: count it by its type.
            self._metrics.api_error(exc.error_type)
            raise

    async def _send(
        self, method: str, path: str, max_bytes: int, limit: str, options: dict[str, Any]
    ) -> Answer:
        response, body = await exchange(
            self._http,
            method,
            path,
            max_bytes=max_bytes,
            scrubber=self._scrubber,
            read=method == "GET",
            **options,
        )
        if response.is_success:
            if body is None:
                raise ProviderError(
                    ErrorType.SERVER_ERROR,
                    response.status_code,
                    f"{method} {path}: answer over {max_bytes} bytes refused ({limit})",
                )
            if response.status_code == 204 or not body:
                return Answer({}, len(body))
            try:
                answer = jsonlib.loads(body)
            except ValueError:
                raise ProviderError(
                    ErrorType.SERVER_ERROR,
                    response.status_code,
                    f"{method} {path}: answer is not JSON",
                ) from None
            if self._scrubber.may_hold(body):
                answer = self._scrubber.scrub_fields(answer, _TEXT_FIELDS)
            return Answer(answer, len(body))
        error = self._error(response, body or b"")
        logger.debug("provider answered %s %s: %s", method, path, error)
        raise error

    def _error(self, response: httpx.Response, raw: bytes) -> ProviderError:
        # Scrubbed whole, before anything is cut to length: a cut must not leave half a secret.
        body: Any
        try:
            body = self._scrubber.scrub_fields(jsonlib.loads(raw), _TEXT_FIELDS)
        except ValueError:
            body = self._scrubber.scrub(text_of(response, raw))
        error = error_from_response(
            response.status_code, body, retry_after=parse_retry_after(response)
        )
        scrubbed = self._scrubber.scrub(error.detail)
        if scrubbed != error.detail:
            error = type(error)(error.error_type, error.status, scrubbed, error.retry_after)
        return error


def _listing_stopped(why: str) -> ProviderError:
    return ProviderError(ErrorType.SERVER_ERROR, None, f"listing devices stopped: {why}")


def _operation(method: str, path: str) -> str:
    """A low-cardinality name for a call (`GET /api/v1/devices/{id}` → `GET /devices/{id}`)."""
    parts = path.removeprefix("/api/v1").strip("/").split("/")
    if parts and parts[0] in ("android", "ios"):
        parts[0] = "{platform}"
    if len(parts) >= 2 and parts[0] == "devices" and parts[1] != "status:batch":
        parts[1] = "{id}"
    return f"{method} /{'/'.join(parts)}"


def _path(device_id: str) -> str:
    """A device id as one path segment (ids are opaque; never let one add path segments)."""
    return quote(device_id, safe="")
