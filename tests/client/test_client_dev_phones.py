"""`devicepool dev --browser-nodes N`: the dev worker config's `bitbrowser` account, on node-1."""

from __future__ import annotations

from pathlib import Path

import yaml

from devicepool.client._dev_config import BITBROWSER_ACCOUNT, DevOptions, write_worker_config
from devicepool.worker.config import load_config


def test_with_nodes_the_dev_worker_has_a_cloud_phone_account_on_node_1(tmp_path: Path) -> None:
    options = DevOptions(data_dir=tmp_path, browser_nodes=2)
    rest, _ = write_worker_config(options, [], bitbrowser_url="http://127.0.0.1:40001")
    assert BITBROWSER_ACCOUNT not in rest  # the REST emulator never serves it
    config = load_config(tmp_path / "worker.yaml", env={})
    phones = config.accounts[BITBROWSER_ACCOUNT]
    assert (phones.api, phones.base_url) == ("bitbrowser", "http://127.0.0.1:40001")
    assert config.accounts["default"].api == "rest"


def test_without_nodes_the_previous_runs_bitbrowser_account_is_not_kept(tmp_path: Path) -> None:
    options = DevOptions(data_dir=tmp_path)
    write_worker_config(options, [], bitbrowser_url="http://127.0.0.1:40001")
    rest, _ = write_worker_config(options, [])
    written = yaml.safe_load((tmp_path / "worker.yaml").read_text())
    assert BITBROWSER_ACCOUNT not in written["accounts"] and BITBROWSER_ACCOUNT not in rest
