"""deploy/prometheus/prometheus-dev.yaml: Prometheus on this machine against `devicepool dev`.

The compose config scrapes `worker-1:9464`, names that resolve only inside compose; this one
scrapes the dev stack's worker on 127.0.0.1 at `devicepool dev`'s default metrics port, loads
the alert rules beside it, and is the command docs/operations.md gives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from devicepool.client._dev_config import DEV_HOST, DevOptions
from tests.helpers import programs

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "prometheus" / "prometheus-dev.yaml"
COMMAND = "prometheus --config.file=deploy/prometheus/prometheus-dev.yaml"


def test_it_scrapes_the_dev_workers_default_metrics_port() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    worker = jobs["devicepool-worker"]
    assert worker.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for group in worker["static_configs"] for t in group["targets"]]
    assert targets == [f"{DEV_HOST}:{DevOptions().metrics_port}"]


def test_its_rules_are_the_shipped_ones_beside_it() -> None:
    # Prometheus reads a relative rule file from the config file's folder.
    config = yaml.safe_load(CONFIG.read_text())
    assert config["rule_files"] == ["devicepool-rules.yaml"]
    assert (CONFIG.parent / "devicepool-rules.yaml").is_file()


def test_promtool_accepts_it() -> None:
    promtool = programs.promtool()
    result = subprocess.run(
        [promtool, "check", "config", str(CONFIG)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_operations_doc_gives_the_command() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    assert COMMAND in doc
