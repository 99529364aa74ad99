"""The GeeLark emulator's envelope and both auth modes, the doc's worked example included."""

from __future__ import annotations

import pytest

from devicepool.emulator.geelark import sign
from tests.helpers.geelark import team

# The vendor doc's worked example of a key-mode signature.
DOC_VECTOR = {
    "apiKey": "YjmFIUuq0oJgSDJ42fxLEb6R1qjjqf",
    "appId": "eH6gQR4oHr3FsZpI36La01IW",
    "traceId": "db6094ab-3797-4186-84d5-b0b58eebad56",
    "ts": "1716972892166",
    "nonce": "db6094",
    "sign": "6280C080AF7C3CCE168F15C913E3444A00A618CB0E16038EED9811D6E3366BDD",
}


def test_the_signature_is_the_docs_worked_example() -> None:
    v = DOC_VECTOR
    assert sign(v["appId"], v["traceId"], v["ts"], v["nonce"], v["apiKey"]) == v["sign"]


async def test_the_verifier_accepts_the_docs_worked_example_and_echoes_its_trace_id() -> None:
    v = DOC_VECTOR
    async with team(app_id=v["appId"], api_key=v["apiKey"]) as t:
        headers = {k: v[k] for k in ("appId", "traceId", "ts", "nonce", "sign")}
        response = await t.call("phone/list", {"page": 1, "pageSize": 10}, headers=headers)
        assert response.status_code == 200
        assert response.json() == {
            "traceId": v["traceId"],
            "code": 0,
            "msg": "success",
            "data": {"total": 0, "page": 1, "pageSize": 10, "items": []},
        }


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"sign": DOC_VECTOR["sign"][:-1] + "0"}, 40003),  # one digit off
        ({"sign": DOC_VECTOR["sign"].lower()}, 40003),  # the docs say uppercase
        ({"ts": "1716972892167"}, 40003),  # signed over another ts
        ({"nonce": "db6095"}, 40003),  # not the traceId's first six characters
        ({"appId": "someone-else"}, 40013),
        ({"traceId": ""}, 40002),
    ],
)
async def test_a_wrong_key_call_is_refused_in_the_envelope(
    change: dict[str, str], code: int
) -> None:
    v = DOC_VECTOR
    async with team(app_id=v["appId"], api_key=v["apiKey"]) as t:
        headers = {**{k: v[k] for k in ("appId", "traceId", "ts", "nonce", "sign")}, **change}
        response = await t.call("phone/list", {}, headers=headers)
        assert response.status_code == 200
        body = response.json()
        assert (body["code"], body["data"], body["traceId"]) == (code, None, headers["traceId"])
        assert (await t.stats())["requests"]["accepted"] == 0


async def test_token_mode_takes_a_bearer_token_and_refuses_another() -> None:
    async with team(token="t0ken") as t:
        assert (await t.ok("phone/list", {}, mode="token"))["total"] == 0
        wrong = {"traceId": "A" * 32, "Authorization": "Bearer nope"}
        assert await t.refused("phone/list", {}, headers=wrong) == 40003
    async with team(token=None) as t:  # token mode off: a token is no credential
        assert await t.refused("phone/list", {}, headers=wrong) == 40003
        assert (await t.ok("phone/list", {}))["total"] == 0  # key mode still works


async def test_a_body_that_is_not_json_is_40001_and_a_bad_field_40004() -> None:
    async with team() as t:
        response = await t.http.post("/open/v1/phone/list", content=b"{nope", headers=t.headers())
        assert response.json()["code"] == 40001
        assert await t.refused("phone/status", {"ids": "not-a-list"}) == 40004


async def test_unknown_paths_and_methods_other_than_post() -> None:
    async with team() as t:
        response = await t.call("phone/teleport", {})
        assert response.status_code == 404 and response.json()["code"] == 40005
        response = await t.http.get("/open/v1/phone/list", headers=t.headers())
        assert response.status_code == 405 and response.json()["code"] == 40000
        # The v2 path exists under /open/v2 only.
        assert (await t.call("/open/v1/phone/newOne", {"id": "1"})).status_code == 404
