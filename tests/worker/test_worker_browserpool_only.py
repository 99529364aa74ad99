"""A BrowserPool-only install: the main worker's config needs no provider account or key.

Issue 43 item 7: the only main-worker example named a REST account whose key file a
BrowserPool user does not have, so `devicepool worker --config` stopped on it. The
BitBrowser side (login, Local API key, proxy passwords) is the node workers'; the main
worker of `examples/worker/browserpool-only.yaml` reads no file beside its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from devicepool.client.cli import main
from devicepool.worker.config import WorkerConfig, load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "worker"
EXAMPLE = EXAMPLES / "browserpool-only.yaml"


def test_it_loads_with_no_account_no_secret_and_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Alone in a directory, with an environment that holds no key: nothing else is read.
    copy = tmp_path / "devicepool.yaml"
    shutil.copy(EXAMPLE, copy)
    monkeypatch.chdir(tmp_path)
    config = load_config(copy, env={})
    assert config.accounts == {}
    assert config.proxy_pools == {}
    assert config.encryption_keys is None
    assert config.settings.resync_seconds == 30
    assert config.settings.node_lost_after_seconds == 120
    assert config.metrics_port == 9464
    text = yaml.safe_load(EXAMPLE.read_text())
    assert set(text) <= {"accounts", "intervals", "metricsPort"}


def test_the_full_example_needs_its_rest_accounts_key(tmp_path: Path) -> None:
    # Why the minimal one exists: devicepool.yaml's `default` account reads a key file.
    from devicepool.worker.config import ConfigError

    copy = tmp_path / "devicepool.yaml"
    shutil.copy(EXAMPLES / "devicepool.yaml", copy)
    with pytest.raises(ConfigError, match=r"accounts\.default\.apiKey"):
        load_config(copy, env={})


def test_devicepool_worker_starts_with_it_and_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[WorkerConfig] = []

    async def main_async(config: WorkerConfig, **_: Any) -> None:
        started.append(config)  # where the real one connects to Temporal and serves

    monkeypatch.setattr("devicepool.worker.main.main_async", main_async)
    monkeypatch.setattr("devicepool.worker.logs.setup_logging", lambda *_: None)
    for name in ("DEVICEPOOL_CONFIG", "DEVICEPOOL_ENCRYPTION_KEY_FILES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["worker", "--config", str(EXAMPLE), "--metrics-port", "0"])
    assert code == 0, capsys.readouterr().err
    [config] = started
    assert config.accounts == {} and config.metrics_port == 0
    assert config.describe()["accounts"] == ""
