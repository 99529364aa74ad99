"""`accounts.<name>.node`: a cloud-phone account served by a node worker, in the worker config."""

from __future__ import annotations

import pytest

from devicepool.activities.accounts import AccountProviders
from devicepool.activities.settings import LedgerConfig
from devicepool.api.errors import ErrorType
from devicepool.worker.config import ConfigError, build_config

KEY = "k-very-secret-0002"


def phones(**fields: object) -> dict[str, object]:
    return {"accounts": {"phones": {"api": "bitbrowser", **fields}}}


def test_a_node_account_has_no_url_or_key_and_its_node_reaches_the_workflows() -> None:
    config = build_config(
        {
            "accounts": {
                "phones": {"api": "bitbrowser", "node": "node-1"},
                "default": {"baseUrl": "http://127.0.0.1:8088", "apiKeyEnv": "K"},
            }
        },
        env={"K": KEY},
    )
    account = config.accounts["phones"]
    assert (account.node, account.base_url, account.api_key.get_secret_value()) == (
        "node-1",
        "",
        "",
    )
    # What the pools read (`pool_settings`), the ledger and the janitor are told.
    assert config.settings.account_nodes == {"phones": "node-1"}
    assert config.settings.node_of("phones") == "node-1"
    assert config.settings.node_of("default") == ""
    assert LedgerConfig.of(account).node == "node-1"
    assert "phones@node:node-1/" in config.describe()["accounts"]


def test_a_bitbrowser_account_without_a_node_is_refused_at_start() -> None:
    """Every main worker replica reads one config. With `baseUrl`, each one paced its own
    calls (two workers: 2 requests a second on a 1-a-second account) and held its own
    reserve claim lock (two could power one reserve profile on for two slots). Only a
    node worker, one process, serves such an account."""
    with pytest.raises(ConfigError) as exc:
        build_config(
            phones(baseUrl="http://127.0.0.1:54345", apiKeyEnv="K"),
            env={"K": KEY},
            source="devicepool.yaml",
        )
    message = str(exc.value)
    assert message.startswith("devicepool.yaml: accounts.phones.node: required"), message
    assert "--node" in message and "\n" not in message and KEY not in message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"accounts": {"a": {"node": "node-1"}}},
            "accounts.a.node: only an api: bitbrowser or api: geelark account is served by "
            "a node worker (this one is api: rest); use baseUrl",
        ),
        (
            {"accounts": {"a": {"api": "rest", "node": "node-1", "baseUrl": "http://x:1"}}},
            "accounts.a.node: only an api: bitbrowser or api: geelark account",
        ),
        (
            phones(node="node-1", baseUrl="http://127.0.0.1:54345"),
            "accounts.phones.baseUrl: not with node",
        ),
        (phones(node="node-1", apiKeyFile="bb.key"), "accounts.phones.apiKeyFile: not with node"),
        (phones(node="node-1", apiKeyEnv="K"), "accounts.phones.apiKeyEnv: not with node"),
        (phones(node="Node_1"), "accounts.phones.node: must be a DNS-1123 label"),
        (phones(node=""), "accounts.phones.node: must not be empty"),
        (phones(), "accounts.phones.node: required for api: bitbrowser"),
        ({"accounts": {"a": {"apiKeyEnv": "K"}}}, "accounts.a.baseUrl: required"),
    ],
)
def test_a_wrong_combination_is_one_line_naming_the_field(
    data: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(data, env={"K": KEY}, source="devicepool.yaml")
    message = str(exc.value)
    assert message.startswith("devicepool.yaml: ") and expected in message, message
    assert "\n" not in message and KEY not in message


async def test_a_main_worker_never_speaks_to_a_node_account_itself() -> None:
    config = build_config(phones(node="node-1"), env={})
    providers = AccountProviders(accounts=config.accounts, proxy_pools={})
    with pytest.raises(Exception) as exc:
        providers._provider("phones")
    assert getattr(exc.value, "type", None) == ErrorType.UNKNOWN_ACCOUNT.value
    assert "served by node worker 'node-1'" in str(exc.value)
    await providers.aclose()
