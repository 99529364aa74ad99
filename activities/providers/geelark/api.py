"""One GeeLark key's Open API: the HTTP, the envelope, per-item batch results, the limits.

`GeeLarkApi` lives as long as the worker. Every call is a signed `POST` (`signing`) that
first passes the key's `Breaker` and takes its turn on the `EndpointPacer`; the answer is
the envelope `{traceId, code, msg, data}`, `code` 0 being success. A batch endpoint
(`phone/status`, `start`, `stop`, `delete`) answers `code` 0 even when items failed:
`batch` reads the per-item lists and says, per id, done, refused (with its typed error), or
not known; an id the answer does not account for is never taken as done. Every `msg` that
leaves is scrubbed of the worker's secrets; answers are handed on as data for the adapter
to read (a listing's proxy password never leaves `provider`).
"""

from __future__ import annotations

import json as jsonlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import SecretStr

from devicepool.activities.errors import ProviderError, ServerError
from devicepool.activities.heartbeats import end_if_cancelled_unsent
from devicepool.activities.http_answers import HttpClient, exchange, parse_retry_after, text_of
from devicepool.activities.metrics import Metrics
from devicepool.activities.providers.geelark.errors import (
    LOCKED,
    PARTIAL,
    GeeLarkAuthError,
    GeeLarkError,
    GeeLarkRateLimitedError,
    GeeLarkServerError,
    GeeLarkTimeSpentError,
    error_for,
)
from devicepool.activities.providers.geelark.limits import Breaker, EndpointPacer
from devicepool.activities.providers.geelark.signing import geelark_auth
from devicepool.activities.secrets import REDACTED, Scrubber
from devicepool.api.errors import ErrorType

__all__ = ["DEFAULT_BASE_URL", "MAX_IDS", "Batch", "Deadlines", "GeeLarkApi"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://openapi.geelark.com"
MAX_IDS = 100  # ids a batch call takes, and a page's most items
MAX_BODY_BYTES = 8 * 1024 * 1024
_TEXT_FIELDS = frozenset({"msg"})
# The calls that change nothing at GeeLark: a create cancelled while it sends only these
# (or waits its pacer's turn) has not begun to make a phone (`heartbeats`).
_READS = frozenset({"/open/v1/phone/list", "/open/v1/phone/status", "/open/v1/adb/getData"})


@dataclass(frozen=True)
class Deadlines:
    """When (`GeeLarkApi.clock`) a run of calls sends its last call and hears its last answer."""

    send_by: float
    answer_by: float


# The deadlines of the calls this task makes now (`GeeLarkApi.deadlines`); None: unbounded.
_deadlines: ContextVar[Deadlines | None] = ContextVar("geelark_deadlines", default=None)


@dataclass
class Batch:
    """A batch call's outcome per id: `done` (its item), `failed` (its error), `unknown`
    (the answer neither names it nor counts it as done: never taken as done)."""

    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, GeeLarkError] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)


class GeeLarkApi(HttpClient):
    """One key's Open API. Use as `async with`, or call `aclose()`."""

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        app_id: str = "",
        api_key: SecretStr | str,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: Metrics | None = None,
        scrubber: Scrubber | None = None,
        pacer: EndpointPacer | None = None,
        breaker: Breaker | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
        auth: httpx.Auth | None = None,
    ) -> None:
        if isinstance(api_key, str):
            api_key = SecretStr(api_key)
        self.app_id = app_id
        self._scrubber = (scrubber or Scrubber()).including(api_key)
        self.metrics = metrics
        self.timeout = timeout
        self.base_url = base_url.rstrip("/")
        self.pacer = pacer or EndpointPacer()
        self.breaker = breaker or Breaker()
        self._now = now
        self.clock = clock
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=auth or geelark_auth(app_id, api_key),
            timeout=httpx.Timeout(timeout),
            headers={"Accept": "application/json"},
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        mode = "key" if self.app_id else "token"
        return f"GeeLarkApi(base_url={self.base_url!r}, {mode}=SecretStr({REDACTED!r}))"

    @contextmanager
    def deadlines(
        self, *, send_by: float | None = None, answer_by: float | None = None
    ) -> Iterator[None]:
        """Within it, this task's calls are sent by `send_by` and their answers awaited until
        `answer_by` at most (times of `clock`; nested: the earlier of each holds). A call
        that would be sent later, or wait its pacer's turn past `send_by`, is refused
        unsent (retryable): a caller whose attempt has a timeout of its own ends in it."""
        outer = _deadlines.get()
        inf = float("inf")
        send = min(send_by if send_by is not None else inf, outer.send_by if outer else inf)
        answer = min(answer_by if answer_by is not None else inf, outer.answer_by if outer else inf)
        token = _deadlines.set(Deadlines(send, answer))
        try:
            yield
        finally:
            _deadlines.reset(token)

    def _within(self, call: str, deadlines: Deadlines | None) -> None:
        if deadlines is not None and self.clock() >= deadlines.send_by:
            raise GeeLarkTimeSpentError(
                ErrorType.TIMEOUT, None, f"{call}: not sent, this attempt's time is spent"
            )

    async def call(
        self, endpoint: str, body: dict[str, Any], *, secrets: Iterable[str] = ()
    ) -> Any:
        """`POST /open/v1/<endpoint>` (`endpoint` starting with `/`: that path as it is): the
        answer's `data`, or a `ProviderError`. A batch's partial-success envelope (40006,
        40009) answers its `data` too: read it with `batch`."""
        path = endpoint if endpoint.startswith("/") else f"/open/v1/{endpoint}"
        call = f"POST {path}"
        scrubber = self._scrubber.including(*(s for s in secrets if s))
        if self.metrics is not None:
            self.metrics.api_call(call)
        bounds = _deadlines.get()
        read = path in _READS
        # A write of a cancelled create that sent nothing is refused first: before its
        # turn and its send-by, so it ends cancelled, unsent, nothing counted (R31 #1).
        refuse = None if read else end_if_cancelled_unsent
        try:
            if refuse is not None:
                refuse()
            self.breaker.check(call)
            self._within(call, bounds)
            room = None if bounds is None else bounds.send_by - self.clock()
            await self.pacer.turn(path, max_wait=room, refuse=refuse)
            self.breaker.check(call)  # tripped while this call waited its turn
            self._within(call, bounds)
            wait = self.timeout
            if bounds is not None:
                wait = max(0.0, min(wait, bounds.answer_by - self.clock()))
            response, raw = await exchange(
                self._http,
                "POST",
                path,
                max_bytes=MAX_BODY_BYTES,
                scrubber=scrubber,
                deadline=wait,
                read=read,
                json=body,
            )
            return self._answer(call, path, response, raw, scrubber)
        except ProviderError as exc:
            if self.metrics is not None:
                self.metrics.api_error(exc.error_type)
            logger.debug("GeeLark %s failed: %s", call, exc.error_type.value)
            raise

    def _answer(
        self, call: str, path: str, response: httpx.Response, raw: bytes | None, scrubber: Scrubber
    ) -> Any:
        status = response.status_code
        if raw is None:
            raise ServerError(ErrorType.SERVER_ERROR, status, f"{call}: answer too large")
        if status in (401, 403):
            raise GeeLarkAuthError(ErrorType.UNAUTHENTICATED, status, f"{call}: HTTP {status}")
        if status == 429:
            raise GeeLarkRateLimitedError(
                ErrorType.RATE_LIMITED, status, f"{call}: HTTP 429", parse_retry_after(response)
            )
        if status >= 300:
            text = " ".join(scrubber.scrub(text_of(response, raw)).split())[:200]
            raise GeeLarkServerError(
                ErrorType.SERVER_ERROR, status, f"{call}: HTTP {status}: {text or '-'}"
            )
        envelope = _envelope(raw)
        if envelope is None:
            raise GeeLarkServerError(ErrorType.SERVER_ERROR, status, f"{call}: not the envelope")
        code = envelope["code"]
        msg = scrubber.scrub(str(envelope.get("msg") or ""))
        data = envelope.get("data")
        if scrubber.may_hold(raw):
            data = scrubber.scrub_fields(data, _TEXT_FIELDS)
        if code == 0 or (code in PARTIAL and isinstance(data, dict)):
            return data
        if code == LOCKED:
            raise self.breaker.trip(call, code=code, msg=msg)
        error = error_for(call, code, msg, now=self._now())
        if isinstance(error, GeeLarkRateLimitedError) and error.retry_after:
            self.pacer.hold(path, error.retry_after)
        raise error

    async def batch(self, endpoint: str, ids: list[str], **extra: Any) -> Batch:
        """A batch call (`ids` at most `MAX_IDS`) read per item: `successDetails` are done,
        `failDetails` refused (typed by their `code`), the rest not known. `delete` answers
        no `successDetails`: an id is deleted only if the counts leave no doubt."""
        if len(ids) > MAX_IDS:
            raise ValueError(f"at most {MAX_IDS} ids a GeeLark batch call, got {len(ids)}")
        data = await self.call(endpoint, {"ids": ids, **extra})
        outcome = Batch()
        if not isinstance(data, dict):
            outcome.unknown = list(ids)
            return outcome
        wanted = set(ids)
        for item in _items(data.get("failDetails")):
            item_id = str(item.get("id", ""))
            if item_id in wanted:
                outcome.failed[item_id] = self.item_error(endpoint, item)
        for item in _items(data.get("successDetails")):
            item_id = str(item.get("id", ""))
            if item_id in wanted and item_id not in outcome.failed:
                outcome.done[item_id] = item
        rest = [i for i in ids if i not in outcome.done and i not in outcome.failed]
        if "successDetails" not in data and _counts_settle(data, len(ids), len(outcome.failed)):
            # `delete`: no success list; the counts name every failure, so the rest is done.
            outcome.done.update({i: {"id": i} for i in rest})
            rest = []
        outcome.unknown = rest
        return outcome

    def item_error(self, endpoint: str, item: dict[str, Any]) -> GeeLarkError:
        """The typed error of one refused item of a batch (its `code`, its `msg` scrubbed)."""
        code = item.get("code")
        code = code if isinstance(code, int) and not isinstance(code, bool) else 40000
        msg = self._scrubber.scrub(str(item.get("msg") or ""))
        return error_for(f"POST /open/v1/{endpoint}", code, msg, now=self._now())


def _counts_settle(data: dict[str, Any], asked: int, named_failures: int) -> bool:
    total, ok, failed = data.get("totalAmount"), data.get("successAmount"), data.get("failAmount")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (total, ok, failed)):
        return False
    return total == asked and failed == named_failures and ok == asked - named_failures


def _items(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _envelope(raw: bytes) -> dict[str, Any] | None:
    """The decoded `{code, ...}` object (an int `code`), or None for anything else."""
    try:
        decoded = jsonlib.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    if isinstance(decoded, dict):
        code = decoded.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            return decoded
    return None
