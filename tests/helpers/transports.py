"""In-process transports to the emulator app with test switches: faults, gates, lags, counts.

The workers of tests/workflows reach the emulator through `TimedASGITransport`,
those of tests/ratelimit through `CountingTransport`. Their switches are class
attributes a test sets; each folder's conftest calls `reset()` around every test.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx


class TimedASGITransport(httpx.ASGITransport):
    """ASGITransport that honours the client's read timeout like a socket would.

    The emulator's `timeoutRate` fault processes a request and then withholds
    the answer; over a real socket the client gives up and retries. In process,
    httpx would wait forever, so this transport enforces the timeout itself.
    """

    # Test switch: answers of this many create calls are "lost" after the
    # emulator processed them (the device exists; the client sees a timeout).
    lose_create_answers = 0
    # Test switch: a partition between workers and the provider's create
    # endpoint. Calls hang until the caller gives up and never arrive.
    creates_partitioned = False
    # Test switch: while set and closed, creates wait here before reaching the
    # provider (`at_gate` counts them).
    create_gate: asyncio.Event | None = None
    at_gate = 0
    # ... and per pool (a batch another test's pool left running can reach the gate too).
    at_gate_of: ClassVar[Counter[str]] = Counter()
    # Test switch: pool -> seconds a list of its devices is answered late
    # (processed at once, the answer held back); `lists` counts them per pool.
    late_list_answers: ClassVar[dict[str, float]] = {}
    lists: ClassVar[Counter[str]] = Counter()
    # Test switch: pool -> an event its listings' answers wait for (read at once, held
    # until the test has changed the provider behind them: a late answer, whatever the load).
    held_list_answers: ClassVar[dict[str, asyncio.Event]] = {}
    # Test switch: device ids whose status answers leave `updatedAt` out (a
    # provider that does not say when a status changed), so a health check that
    # lost its clocks cannot rebuild them from the provider.
    hide_updated_at: ClassVar[set[str]] = set()
    # Test switch: while set and closed, DELETEs wait here before reaching the
    # provider (a teardown that takes its time).
    delete_gate: asyncio.Event | None = None
    # Test switch: device id -> how many of its DELETEs are refused with 409
    # invalid_state before one reaches the provider.
    refuse_deletes: ClassVar[dict[str, int]] = {}
    # Test switch: pool -> seconds a device it creates stays out of its listings (a
    # provider whose label index lags behind its creates); `born` is when each was.
    listing_lag: ClassVar[dict[str, float]] = {}
    born: ClassVar[dict[str, float]] = {}
    # Test switch: pool -> (when, quota): its creates are refused 402 `quota_exceeded`
    # naming that quota and `resetsAt` until the moment passes; `creates_at` is when each
    # of its creates arrived, `quota_refused` how many were refused.
    quota_until: ClassVar[dict[str, tuple[datetime, str]]] = {}
    creates_at: ClassVar[dict[str, list[datetime]]] = {}
    quota_refused: ClassVar[Counter[str]] = Counter()
    # Test switch: pools whose listings are refused with 401 (a revoked or rotated key).
    unauthenticated_lists: ClassVar[set[str]] = set()
    # ...and what happens at the provider right after such a refusal (a session starts).
    after_refused_delete: ClassVar[Callable[[str], Awaitable[Any]] | None] = None

    @classmethod
    def reset(cls) -> None:
        """Every switch back to its default (tests/workflows/conftest.py does it after each test)."""
        cls.lose_create_answers = 0
        cls.creates_partitioned = False
        if cls.create_gate is not None:
            cls.create_gate.set()  # creates held by a failed test go on
        cls.create_gate = None
        cls.at_gate = 0
        cls.at_gate_of.clear()
        cls.late_list_answers.clear()
        for held in cls.held_list_answers.values():
            held.set()  # answers held by a failed test go on
        cls.held_list_answers.clear()
        cls.lists.clear()
        cls.hide_updated_at.clear()
        if cls.delete_gate is not None:
            cls.delete_gate.set()
        cls.delete_gate = None
        cls.refuse_deletes.clear()
        cls.after_refused_delete = None
        cls.unauthenticated_lists.clear()
        cls.quota_until.clear()
        cls.creates_at.clear()
        cls.quota_refused.clear()
        cls.listing_lag.clear()
        cls.born.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._handle(request)
        if TimedASGITransport.listing_lag:
            response = await self._lag(request, response)
        hidden = TimedASGITransport.hide_updated_at
        if not hidden or "json" not in response.headers.get("content-type", ""):
            return response
        body = json.loads(await response.aread())
        items = body.get("items") if isinstance(body, dict) and "items" in body else [body]
        for item in items or []:
            if isinstance(item, dict) and item.get("id") in hidden:
                item.pop("updatedAt", None)
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(response.status_code, headers=headers, json=body, request=request)

    async def _lag(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        """Keep a lagging pool's new devices out of its listings for a while."""
        lag, now = TimedASGITransport.listing_lag, asyncio.get_running_loop().time()
        body = json.loads(await response.aread() or b"null")
        if request.method == "POST" and request.url.path.endswith("/devices"):
            if isinstance(body, dict) and (body.get("labels") or {}).get("pool") in lag:
                TimedASGITransport.born.setdefault(body["id"], now)
            return response
        pool = request.url.params.get("label", "").removeprefix("pool=")
        if request.method != "GET" or pool not in lag or not isinstance(body, dict):
            return response
        born = TimedASGITransport.born
        body["items"] = [
            d for d in body.get("items") or [] if now - born.get(d["id"], -1e9) >= lag[pool]
        ]
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(response.status_code, headers=headers, json=body, request=request)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        gate = TimedASGITransport.delete_gate
        if request.method == "DELETE" and gate is not None:
            await gate.wait()
        device_id = request.url.path.rsplit("/", 1)[-1]
        if request.method == "DELETE" and TimedASGITransport.refuse_deletes.get(device_id, 0) > 0:
            TimedASGITransport.refuse_deletes[device_id] -= 1
            if TimedASGITransport.after_refused_delete is not None:
                await TimedASGITransport.after_refused_delete(device_id)
            detail = f"device {device_id} cannot be terminated right now"
            return _problem(request, 409, "invalid_state", detail)
        label = request.url.params.get("label", "")
        if request.method == "GET" and label.startswith("pool="):
            pool = label[len("pool=") :]
            if pool in TimedASGITransport.unauthenticated_lists:
                return _problem(request, 401, "unauthenticated", "the API key is not valid")
            response = await super().handle_async_request(request)
            await response.aread()
            TimedASGITransport.lists[pool] += 1
            await asyncio.sleep(TimedASGITransport.late_list_answers.get(pool, 0.0))
            if (held := TimedASGITransport.held_list_answers.get(pool)) is not None:
                await held.wait()
            return response
        if request.method == "POST" and request.url.path.endswith("/devices"):
            if TimedASGITransport.quota_until and (refused := _over_quota(request)) is not None:
                return refused
            gate = TimedASGITransport.create_gate
            if gate is not None and not gate.is_set():
                TimedASGITransport.at_gate += 1
                TimedASGITransport.at_gate_of[_pool_of(request)] += 1
                await gate.wait()
            if TimedASGITransport.creates_partitioned:
                await asyncio.sleep(float((request.extensions.get("timeout") or {})["read"]))
                raise httpx.ReadTimeout("partitioned", request=request)
            if TimedASGITransport.lose_create_answers > 0:
                TimedASGITransport.lose_create_answers -= 1
                response = await super().handle_async_request(request)
                await response.aread()
                raise httpx.ReadTimeout("answer lost on the way back", request=request)
        read = (request.extensions.get("timeout") or {}).get("read")
        try:
            return await asyncio.wait_for(super().handle_async_request(request), read)
        except TimeoutError as err:
            raise httpx.ReadTimeout("emulated read timeout", request=request) from err


def _pool_of(request: httpx.Request) -> str:
    """The pool a create names in its labels ("" if none)."""
    body = json.loads(request.content or b"null")
    return str(((body or {}).get("labels") or {}).get("pool") or "")


def _over_quota(request: httpx.Request) -> httpx.Response | None:
    """A create of a pool `quota_until` names, refused while its quota holds."""
    pool = _pool_of(request)
    now = datetime.now(UTC)
    TimedASGITransport.creates_at.setdefault(pool, []).append(now)
    held = TimedASGITransport.quota_until.get(pool)
    if held is None or now >= held[0]:
        return None
    TimedASGITransport.quota_refused[pool] += 1
    resets, quota = held
    response = _problem(request, 402, "quota_exceeded", f"{quota} used up")
    problem = {
        **json.loads(response.content),
        "quota": quota,
        "resetsAt": resets.isoformat().replace("+00:00", "Z"),
    }
    headers = {"content-type": "application/problem+json"}
    return httpx.Response(402, json=problem, headers=headers, request=request)


def _problem(request: httpx.Request, status: int, code: str, detail: str) -> httpx.Response:
    """An error answer in the provider contract's problem+json shape."""
    problem = {
        "type": "about:blank",
        "title": code,
        "status": status,
        "code": code,
        "detail": detail,
    }
    headers = {"content-type": "application/problem+json"}
    return httpx.Response(status, json=problem, headers=headers, request=request)


class CountingTransport(httpx.ASGITransport):
    """Counts the create calls that went through this worker."""

    # Test switch: pool name -> while closed, every list of that pool's devices
    # waits here (a pool whose first pass is slow on a busy worker).
    held_lists: ClassVar[dict[str, asyncio.Event]] = {}
    # Test switch: while set and closed, creates wait here before reaching the
    # provider (`at_gate` counts them).
    create_gate: ClassVar[asyncio.Event | None] = None
    at_gate: ClassVar[int] = 0
    # Test switch: while set and closed, every list of a pool's devices waits
    # here (a pool's first pass cannot get to its request).
    list_gate: ClassVar[asyncio.Event | None] = None

    def __init__(self, app: Any) -> None:
        super().__init__(app=app)
        self.creates = 0

    @classmethod
    def reset(cls) -> None:
        """Every switch back to its default (the conftest does it around each test)."""
        for gate in (cls.create_gate, cls.list_gate, *cls.held_lists.values()):
            if gate is not None:
                gate.set()
        cls.create_gate, cls.at_gate, cls.list_gate = None, 0, None
        cls.held_lists.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/devices"):
            gate = CountingTransport.create_gate
            if gate is not None and not gate.is_set():
                CountingTransport.at_gate += 1
                await gate.wait()
            self.creates += 1
        label = request.url.params.get("label", "")
        if request.method == "GET" and label.startswith("pool="):
            if CountingTransport.list_gate is not None:
                await CountingTransport.list_gate.wait()
            held = CountingTransport.held_lists.get(label[len("pool=") :])
            if held is not None:
                await held.wait()
        return await super().handle_async_request(request)
