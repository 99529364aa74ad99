"""`devicepool dev --browser-nodes N`: the `bitbrowser` account, served by node-1's worker."""

from __future__ import annotations

from pathlib import Path

import yaml

from devicepool.client._dev_config import (
    BITBROWSER_ACCOUNT,
    DEV_PROXY_PASSWORD,
    DevOptions,
    write_node_config,
    write_worker_config,
)
from devicepool.worker.config import load_config
from devicepool.worker.node import load_node_options


def test_with_nodes_the_dev_worker_has_a_cloud_phone_account_on_node_1(tmp_path: Path) -> None:
    options = DevOptions(data_dir=tmp_path, browser_nodes=2)
    rest, _ = write_worker_config(options, [], bitbrowser_node="node-1")
    assert BITBROWSER_ACCOUNT not in rest  # the REST emulator never serves it
    config = load_config(tmp_path / "worker.yaml", env={})
    phones = config.accounts[BITBROWSER_ACCOUNT]
    # The main worker holds no URL and no key: node-1's worker speaks to its Local API.
    assert (phones.api, phones.node, phones.base_url) == ("bitbrowser", "node-1", "")
    assert config.settings.account_nodes == {BITBROWSER_ACCOUNT: "node-1"}
    assert config.accounts["default"].api == "rest"
    assert not (tmp_path / "secrets" / f"{BITBROWSER_ACCOUNT}.key").exists()


def test_node_1_serves_the_account_and_node_2_passes_it_by(tmp_path: Path) -> None:
    options = DevOptions(data_dir=tmp_path, browser_nodes=2)
    node_yaml = write_node_config(options, ["proxyseller-us"])
    url = "http://127.0.0.1:40001"
    one = load_node_options(node="node-1", labels=[], bitbrowser_url=url, config=node_yaml, env={})
    two = load_node_options(node="node-2", labels=[], bitbrowser_url=url, config=node_yaml, env={})
    assert set(one.accounts) == {BITBROWSER_ACCOUNT} and two.accounts == {}
    assert one.accounts[BITBROWSER_ACCOUNT].base_url == url
    assert set(one.proxy_pools) == set(two.proxy_pools) == {"proxyseller-us"}
    # A cloud phone's proxy needs a password (the Local API refuses one without): the dev
    # proxy pools have a placeholder, read from a file under secrets/, never in the config.
    proxy = one.proxy_pools["proxyseller-us"]
    assert proxy.password.get_secret_value() == DEV_PROXY_PASSWORD
    assert DEV_PROXY_PASSWORD not in node_yaml.read_text()


def test_without_nodes_the_previous_runs_bitbrowser_account_is_not_kept(tmp_path: Path) -> None:
    options = DevOptions(data_dir=tmp_path)
    write_worker_config(options, [], bitbrowser_node="node-1")
    rest, _ = write_worker_config(options, [])
    written = yaml.safe_load((tmp_path / "worker.yaml").read_text())
    assert BITBROWSER_ACCOUNT not in written["accounts"] and BITBROWSER_ACCOUNT not in rest
