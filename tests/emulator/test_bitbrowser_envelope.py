"""The BitBrowser emulator's Local API habits common to both families: POST with a JSON body,
the `{success, data}` / `{success: false, msg}` envelope with Chinese text, and API auth."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from devicepool.emulator.bitbrowser import _envelope
from tests.emulator.conftest import MakeAccount
from tests.helpers.bitbrowser import KEY, Account, profile_body, refusal_of


async def test_health_answers_success_without_data(account: Account) -> None:
    response = await account.call("/health")
    assert response.status_code == 200
    assert response.json() == {"success": True}


async def test_a_success_carries_data_in_the_envelope(account: Account) -> None:
    response = await account.call("/browser/list", {"page": 0, "pageSize": 10})
    assert response.status_code == 200
    assert response.json() == {
        "success": True,
        "data": {"list": [], "total": 0, "page": 0, "pageSize": 10},
    }


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_only_post_is_served(account: Account, method: str) -> None:
    response = await account.http["node-1"].request(method, "/browser/list")
    assert "POST" in refusal_of(response, 405)


async def test_parameters_go_in_a_json_body_not_the_url(account: Account) -> None:
    response = await account.http["node-1"].post(
        "/browser/list", content=b"page=0&pageSize=10", headers={"content-type": "text/plain"}
    )
    assert "JSON" in refusal_of(response)
    response = await account.http["node-1"].post("/browser/list", json=[0, 10])
    assert "JSON" in refusal_of(response)
    # The url's query is not read: page is still missing.
    response = await account.http["node-1"].post("/browser/list?page=0&pageSize=10")
    assert "page" in refusal_of(response)


async def test_an_unknown_path_is_refused_in_the_envelope(account: Account) -> None:
    assert refusal_of(await account.call("/browser/nope", {}), 404) == "接口不存在"


async def test_refusals_are_chinese_text_without_a_code(account: Account) -> None:
    texts = [
        await account.refused("/browser/update", {"browserFingerPrint": {}, "proxyType": "http"}),
        await account.refused("/browser/open", {"id": "0" * 32}),
        await account.refused("/browser/detail", {}),
    ]
    assert texts == ["请选择代理方式", "窗口不存在或已被删除", "窗口 id 必传"]
    for msg in texts:
        assert not any(ch.isdigit() for ch in msg)  # nothing like an error code


async def test_auth_is_off_by_default(account: Account) -> None:
    assert (await account.call("/health", key="whatever")).json() == {"success": True}
    assert (await account.call("/health", key=None)).json() == {"success": True}


async def test_with_auth_on_the_key_is_required_and_a_wrong_key_refused(
    make_account: MakeAccount,
) -> None:
    account = await make_account(api_key=KEY)
    missing = refusal_of(await account.call("/health", key=None), 403)
    wrong = refusal_of(await account.call("/health", key="not-the-key"), 403)
    assert "x-api-key" in missing and "x-api-key" in wrong and missing != wrong
    # A refused create makes nothing.
    await account.call("/browser/update", {"proxyMethod": 2}, key="not-the-key")
    assert (await account.ok("/health")) is None
    assert (await account.stats())["creates"] == 0
    # Every node checks it; the control plane takes no key.
    refusal_of(await account.call("/browser/list", {"page": 0}, node="node-2", key=None), 403)
    assert (await account.http["node-2"].get("/_emulator/stats")).status_code == 200


async def test_a_refused_key_can_be_answered_in_the_envelope_with_200(
    make_account: MakeAccount,
) -> None:
    account = await make_account(api_key=KEY, auth_refusal_status=200)
    assert "x-api-key" in refusal_of(await account.call("/health", key="bad"), 200)


def test_the_docs_list_every_refusal_text() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "bitbrowser-emulator.md").read_text()
    texts = {
        name: value
        for name, value in vars(_envelope).items()
        if name.isupper() and isinstance(value, str)
    }
    assert len(texts) > 30
    for name, value in texts.items():
        for fixed in value.replace("{", "}").split("}")[::2]:  # the parts around {placeholders}
            assert fixed.strip(" ：") in docs, (name, fixed)


async def test_a_client_of_its_own_reaches_a_node_through_its_transport(account: Account) -> None:
    async with httpx.AsyncClient(
        transport=account.transports["node-2"], base_url="http://127.0.0.1:54345"
    ) as client:
        created = (await client.post("/browser/update", json=profile_body())).json()
    assert created["success"] is True
    assert (await account.ok("/browser/detail", {"id": created["data"]["id"]}))["id"]
