"""`api: geelark` in the worker config: key mode (`appId` + the key's file) or token mode
(the token's file alone), the vendor's base URL by default, one line naming the field for
each mistake, and the adapter the registry builds from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devicepool.activities.metrics import Metrics
from devicepool.activities.providers.geelark import GeeLarkProvider, KeyAuth, TokenAuth
from devicepool.activities.providers.registry import build_provider
from devicepool.activities.secrets import Scrubber
from devicepool.worker.config import build_config
from devicepool.worker.config_values import ConfigError

KEY = "YjmFIUuq0oJgSDJ42fxLEb6R1qjjqf"


def _config(tmp_path: Path, **account: Any) -> Any:
    (tmp_path / "geelark.key").write_text(KEY + "\n")
    data = {"accounts": {"gl": {"api": "geelark", "apiKeyFile": "geelark.key", **account}}}
    return build_config(data, source="w.yaml", base_dir=tmp_path, env={})


def test_key_mode_reads_the_key_file_and_defaults_the_vendors_url(tmp_path: Path) -> None:
    account = _config(tmp_path, appId="eH6gQR4oHr3FsZpI36La01IW").accounts["gl"]
    assert account.api == "geelark"
    assert account.app_id == "eH6gQR4oHr3FsZpI36La01IW"
    assert account.api_key.get_secret_value() == KEY
    assert account.base_url == "https://openapi.geelark.com"
    assert KEY not in repr(account)


def test_token_mode_is_the_secret_alone(tmp_path: Path) -> None:
    account = _config(tmp_path, baseUrl="http://127.0.0.1:28555").accounts["gl"]
    assert account.app_id == "" and account.base_url == "http://127.0.0.1:28555"


@pytest.mark.parametrize(
    ("account", "field"),
    [
        ({"appId": " "}, "accounts.gl.appId"),
        ({"apiKeyFile": None}, "accounts.gl.apiKeyFile"),
        ({"apiKeyFile": "missing.key"}, "accounts.gl.apiKeyFile"),
        ({"node": "N_1"}, "accounts.gl.node"),
    ],
)
def test_mistakes_name_their_field(tmp_path: Path, account: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, **account)
    assert field in str(caught.value) and "\n" not in str(caught.value)
    assert KEY not in str(caught.value)


def test_app_id_belongs_to_geelark_only(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("k")
    data = {
        "accounts": {"r": {"api": "rest", "baseUrl": "http://x:1", "apiKeyFile": "k", "appId": "a"}}
    }
    with pytest.raises(ConfigError, match=r"accounts\.r\.appId"):
        build_config(data, source="w.yaml", base_dir=tmp_path, env={})


@pytest.mark.parametrize(("app_id", "auth"), [("eH6gQR4o", KeyAuth), ("", TokenAuth)])
async def test_the_registry_builds_the_adapter(
    tmp_path: Path, app_id: str, auth: type[object]
) -> None:
    extra = {"appId": app_id} if app_id else {}
    account = _config(tmp_path, **extra).accounts["gl"]
    provider = build_provider(account, metrics=Metrics(), scrubber=Scrubber())
    assert isinstance(provider, GeeLarkProvider)
    assert isinstance(provider.api._http.auth, auth)
    assert KEY not in repr(provider)
    await provider.aclose()


@pytest.mark.parametrize(("serving_node", "reserve"), [("gl-node", True), ("", False)])
async def test_only_the_accounts_node_worker_keeps_a_warm_reserve(
    tmp_path: Path, serving_node: str, reserve: bool
) -> None:
    # One process grants every claim: the account's node worker; a direct account has none.
    (tmp_path / "geelark.key").write_text(KEY + "\n")
    data = {"accounts": {"gl": {"api": "geelark", "apiKeyFile": "geelark.key"}}}
    if serving_node:
        data["accounts"]["gl"]["node"] = serving_node
    config = build_config(
        data, source="w.yaml", base_dir=tmp_path, env={}, serving_node=serving_node
    )
    provider = build_provider(config.accounts["gl"], metrics=Metrics(), scrubber=Scrubber())
    assert isinstance(provider, GeeLarkProvider)
    assert (provider.reserve is not None) is reserve
    await provider.aclose()
