"""A scripted stand-in for GeeLark's Open API behind `httpx.MockTransport`, for the adapter's
pure tests (tests/activities/test_geelark_*.py). Not the emulator: only the shapes the
vendor's docs give, kept simple, and a `script` to answer any call as a test needs.

`Fake.script[path]` is a list of answers taken first-in first-out before the default
handler: a dict (the envelope), an `httpx.Response`, or a callable `(fake, body) ->
dict | Response` (it may raise `httpx.ReadTimeout` after changing state)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from devicepool.activities.providers.geelark import Breaker, EndpointPacer, GeeLarkApi
from devicepool.activities.providers.geelark.provider import GeeLarkProvider

APP_ID = "eH6gQR4oHr3FsZpI36La01IW"
API_KEY = "YjmFIUuq0oJgSDJ42fxLEb6R1qjjqf"
PROXY_PASSWORD = "px-Secret-0rchid"

Answer = dict[str, Any] | httpx.Response | Callable[["Fake", dict[str, Any]], Any]


def ok(data: Any) -> dict[str, Any]:
    return {"traceId": "t", "code": 0, "msg": "success", "data": data}


def refused(code: int, msg: str = "refused") -> dict[str, Any]:
    return {"traceId": "t", "code": code, "msg": msg, "data": None}


class Clock:
    """A wall clock and a monotonic one that only `sleep` moves."""

    def __init__(self, start: datetime = datetime(2026, 12, 5, 23, 30, tzinfo=UTC)) -> None:
        self.at = start
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.at

    def wall(self) -> float:
        return self.at.timestamp()

    def mono(self) -> float:
        return self.at.timestamp()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.at += timedelta(seconds=seconds)


class Fake:
    """Phones by id; every request kept in `requests` as (path, headers, body)."""

    def __init__(self) -> None:
        self.phones: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.raw: list[httpx.Request] = []
        self.script: dict[str, list[Answer]] = {}
        self._ids = itertools.count(700000001)
        self.stop_lag = 0  # status reads that still show a stopped phone started
        # The docs do not say whether `serialName` filters by a part of the name or the whole:
        # True answers only a whole name (what an adapter must survive).
        self.exact_names = False
        self._stopping: dict[str, int] = {}

    # -------------------------------------------------------------- helpers

    def paths(self) -> list[str]:
        return [p.removeprefix("/open/v1/") for p, _, _ in self.requests]

    def add_phone(
        self, name: str, remark: str, *, status: int = 2, group: str = "", **more: Any
    ) -> str:
        phone_id = str(next(self._ids))
        self.phones[phone_id] = {
            "id": phone_id,
            "serialName": name,
            "serialNo": phone_id[-4:],
            "group": {"id": "g1", "name": group, "remark": ""},
            "remark": remark,
            "status": status,
            "tags": [{"name": "devicepool"}],
            "proxy": {
                "type": "socks5",
                "server": "1.2.3.4",
                "port": 1080,
                "username": "u",
                "password": PROXY_PASSWORD,
            },
            "chargeMode": 0,
            "rpaStatus": 0,
            **more,
        }
        return phone_id

    def api(self, clock: Clock | None = None, **kwargs: Any) -> GeeLarkApi:
        clock = clock or Clock()
        return GeeLarkApi(
            base_url="https://openapi.example",
            app_id=kwargs.pop("app_id", APP_ID),
            api_key=kwargs.pop("api_key", API_KEY),
            transport=kwargs.pop("transport", httpx.MockTransport(self.handle)),
            clock=clock.mono,
            pacer=kwargs.pop("pacer", EndpointPacer(clock=clock.mono, sleep=clock.sleep)),
            breaker=kwargs.pop("breaker", Breaker(now=clock.now)),
            now=clock.now,
            **kwargs,
        )

    def provider(self, clock: Clock | None = None, **kwargs: Any) -> GeeLarkProvider:
        clock = clock or Clock()
        return GeeLarkProvider(self.api(clock), wall_clock=clock.wall, sleep=clock.sleep, **kwargs)

    # -------------------------------------------------------------- the API

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        path = request.url.path
        self.requests.append((path, dict(request.headers), body))
        self.raw.append(request)
        scripted = self.script.get(path.removeprefix("/open/v1/"))
        if scripted:
            answer = scripted.pop(0)
            if callable(answer):
                answer = answer(self, body)
            if isinstance(answer, httpx.Response):
                return answer
            return httpx.Response(200, json=answer)
        handler = getattr(self, "_" + path.removeprefix("/open/v1/").replace("/", "_"), None)
        if handler is None:
            return httpx.Response(200, json=refused(40012, "no such api"))
        return httpx.Response(200, json=handler(body))

    def _phone_list(self, body: dict[str, Any]) -> dict[str, Any]:
        items = list(self.phones.values())
        if body.get("ids"):
            items = [p for p in items if p["id"] in body["ids"]]
            return ok({"total": len(items), "page": 1, "pageSize": len(items), "items": items})
        if body.get("groupName"):
            items = [p for p in items if p["group"]["name"] == body["groupName"]]
        if body.get("serialName") and self.exact_names:
            items = [p for p in items if body["serialName"] == p["serialName"]]
        elif body.get("serialName"):  # fuzzy, as a search box is
            items = [p for p in items if body["serialName"] in p["serialName"]]
        if body.get("tags"):
            wanted = set(body["tags"])
            items = [p for p in items if wanted <= {t["name"] for t in p.get("tags") or ()}]
        page, size = body.get("page", 1), body.get("pageSize", 10)
        if size > 100:
            return refused(40008, "pageSize out of range")
        cut = items[(page - 1) * size : page * size]
        return ok({"total": len(items), "page": page, "pageSize": size, "items": cut})

    def add_new(self, body: dict[str, Any]) -> dict[str, Any]:
        details = []
        for index, profile in enumerate(body["data"]):
            phone_id = self.add_phone(
                profile["profileName"],
                profile.get("profileNote", ""),
                group=profile["profileGroup"],
            )
            details.append({"index": index, "code": 0, "msg": "", "id": phone_id})
        return ok(
            {
                "totalAmount": len(details),
                "successAmount": len(details),
                "failAmount": 0,
                "details": details,
            }
        )

    def _phone_addNew(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.add_new(body)

    def _batch(
        self, ids: list[str], act: Callable[[dict[str, Any]], tuple[int, str] | dict[str, Any]]
    ) -> dict[str, Any]:
        success, fail = [], []
        for phone_id in ids:
            phone = self.phones.get(phone_id)
            if phone is None:
                fail.append({"code": 42001, "id": phone_id, "msg": "not found"})
                continue
            result = act(phone)
            if isinstance(result, tuple):
                fail.append({"code": result[0], "id": phone_id, "msg": result[1]})
            else:
                success.append(result)
        return ok(
            {
                "totalAmount": len(ids),
                "successAmount": len(success),
                "failAmount": len(fail),
                "successDetails": success,
                "failDetails": fail,
            }
        )

    def _phone_status(self, body: dict[str, Any]) -> dict[str, Any]:
        def read(phone: dict[str, Any]) -> dict[str, Any]:
            left = self._stopping.get(phone["id"])
            if left is not None:
                if left > 0:
                    self._stopping[phone["id"]] = left - 1
                    return {"id": phone["id"], "serialName": phone["serialName"], "status": 0}
                del self._stopping[phone["id"]]
                phone["status"] = 2
            return {"id": phone["id"], "serialName": phone["serialName"], "status": phone["status"]}

        return self._batch(body["ids"], read)

    def _phone_start(self, body: dict[str, Any]) -> dict[str, Any]:
        def start(phone: dict[str, Any]) -> tuple[int, str] | dict[str, Any]:
            if phone["status"] in (0, 1):
                return (43009, "already started")
            phone["status"] = 1
            return {
                "id": phone["id"],
                "url": "https://live.example/x",
                "chargingMethod": "Per-minute usage",
            }

        return self._batch(body["ids"], start)

    def _phone_stop(self, body: dict[str, Any]) -> dict[str, Any]:
        def stop(phone: dict[str, Any]) -> dict[str, Any]:
            if self.stop_lag:
                self._stopping[phone["id"]] = self.stop_lag
            else:
                phone["status"] = 2
            return {"id": phone["id"], "serialName": phone["serialName"], "status": 2}

        return self._batch(body["ids"], stop)

    def _phone_delete(self, body: dict[str, Any]) -> dict[str, Any]:
        fail = []
        for phone_id in body["ids"]:
            phone = self.phones.get(phone_id)
            if phone is None:
                fail.append({"code": 42001, "id": phone_id, "msg": "not found"})
            elif phone["status"] == 0 or phone_id in self._stopping:
                fail.append({"code": 43009, "id": phone_id, "msg": "started, cannot delete"})
            elif phone["status"] == 1:
                fail.append({"code": 43010, "id": phone_id, "msg": "starting"})
            else:
                del self.phones[phone_id]
        n = len(body["ids"])
        return ok(
            {
                "totalAmount": n,
                "successAmount": n - len(fail),
                "failAmount": len(fail),
                "failDetails": fail,
            }
        )

    def _phone_detail_update(self, body: dict[str, Any]) -> dict[str, Any]:
        phone = self.phones.get(body["id"])
        if phone is None:
            return refused(42001, "not found")
        if "name" in body:
            phone["serialName"] = body["name"]
        if "remark" in body:
            phone["remark"] = body["remark"]
        if "proxyConfig" in body:
            phone["proxy"] = dict(body["proxyConfig"])
        return ok(None)

    def _adb_setStatus(self, body: dict[str, Any]) -> dict[str, Any]:
        for phone_id in body["ids"]:
            if phone_id in self.phones:
                self.phones[phone_id]["adb"] = bool(body["open"])
        return ok(None)

    def _adb_getData(self, body: dict[str, Any]) -> dict[str, Any]:
        items = []
        for phone_id in body["ids"]:
            phone = self.phones.get(phone_id)
            if phone is None:
                items.append({"code": 42001, "id": phone_id})
            elif phone["status"] != 0:
                items.append({"code": 42002, "id": phone_id})
            elif not phone.get("adb"):
                items.append({"code": 49001, "id": phone_id})
            else:
                items.append(
                    {"code": 0, "id": phone_id, "ip": "10.0.0.7", "port": 5555, "pwd": "adb-Pw-77"}
                )
        return ok({"items": items})
